/// A mirror on another machine, `[USER@]HOST:DIR` in rsync's syntax: a `:` before the
/// first `/` makes a path remote (`./a:b` stays local). DIR is bytes, as given, relative
/// to the remote home when not absolute (empty: the home itself).
public struct RemoteTarget: Sendable, Equatable {
    /// The login name, when given.
    public var user: String?
    /// The host name or address (an IPv6 address without its brackets).
    public var host: String
    /// The directory on the host, without a trailing `/` (except `/` itself).
    public var directory: [UInt8]

    /// A remote target.
    public init(user: String?, host: String, directory: [UInt8]) {
        self.user = user
        self.host = host
        self.directory = directory
    }

    /// The target `spec` names, nil when it is a local path; throws `.configuration`
    /// for the remote forms keepsync does not take (rsync daemon `::` and `rsync://`) and
    /// for a user or host that ssh would read as an option or cannot be.
    public static func parse(_ spec: [UInt8]) throws -> RemoteTarget? {
        let shown = ByteEscaping.escapeControls(spec)
        if spec.starts(with: Array("rsync://".utf8)) {
            throw KeepSyncError(.configuration, "--mirror \(shown): rsync daemons are not supported; use HOST:DIR over ssh")
        }
        // The host part ends at the first ':' outside an address in brackets (only right
        // at the start or after '@'); a '/' before it: local.
        var i = 0, bracket = false
        while i < spec.count {
            let b = spec[i]
            if b == UInt8(ascii: "/") && !bracket { return nil }
            if b == UInt8(ascii: "["), i == 0 || spec[i - 1] == UInt8(ascii: "@") { bracket = true }
            if b == UInt8(ascii: "]") { bracket = false }
            if b == UInt8(ascii: ":") && !bracket { break }
            i += 1
        }
        guard i < spec.count else { return nil }
        var rest = Array(spec[(i + 1)...])
        if rest.first == UInt8(ascii: ":") {
            throw KeepSyncError(.configuration, "--mirror \(shown): rsync daemons (HOST::MODULE) are not supported; use HOST:DIR over ssh")
        }
        var login = Array(spec[..<i]), user: String?
        if let at = login.lastIndex(of: UInt8(ascii: "@")) {
            user = String(decoding: login[..<at], as: UTF8.self)
            login = Array(login[(at + 1)...])
        }
        let bracketed = login.first == UInt8(ascii: "[") && login.last == UInt8(ascii: "]")
        if bracketed { login = Array(login.dropFirst().dropLast()) }
        let host = String(decoding: login, as: UTF8.self)
        guard Self.isName(host, address: bracketed) else { throw KeepSyncError(.configuration, "--mirror \(shown): not a host name: '\(ByteEscaping.escapeControls(login))'") }
        if let user, !Self.isName(user) { throw KeepSyncError(.configuration, "--mirror \(shown): not a user name: '\(user)'") }
        while rest.count > 1, rest.last == UInt8(ascii: "/") { rest.removeLast() }
        return RemoteTarget(user: user, host: host, directory: rest)
    }

    /// Letters, digits, `.`, `_` and `-` (and, in a bracketed address, `:` and `%`), not
    /// starting with `-`: ssh would take that for an option, and ssh's `%h`/`%r` put names
    /// into commands a shell runs (ProxyCommand, Match exec).
    static func isName(_ s: String, address: Bool = false) -> Bool {
        guard let first = s.utf8.first, first != UInt8(ascii: "-") else { return false }
        return s.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A) || b == UInt8(ascii: ".")
                || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
                || (address && (b == UInt8(ascii: ":") || b == UInt8(ascii: "%")))
        }
    }

    /// `user@host` (ssh's destination; an IPv6 address needs no brackets there).
    public var destination: String { user.map { "\($0)@\(host)" } ?? host }

    /// `[user@]host:dir` as rsync writes it, brackets around an IPv6 address: for display
    /// and for naming the state directory.
    public var normalized: [UInt8] {
        let h = host.contains(":") ? "[\(host)]" : host
        return Array((user.map { "\($0)@\(h)" } ?? h).utf8) + [UInt8(ascii: ":")] + directory
    }

    /// An ssh command line split into its words as rsync's `-e` does (its `do_cmd`): spaces
    /// separate; `'…'` and `"…"` quote, and inside them the quote doubled is one; a
    /// backslash is an ordinary byte.
    static func words(_ command: [UInt8]) -> Result<[[UInt8]], ConfigFileParser.ValueError> {
        var words: [[UInt8]] = [], word: [UInt8] = [], inWord = false, quote: UInt8?
        var i = 0
        while i < command.count {
            let b = command[i]
            i += 1
            if let q = quote {
                if b != q {
                    word.append(b)
                } else if i < command.count, command[i] == q {
                    word.append(q)
                    i += 1
                } else {
                    quote = nil
                }
            } else if b == UInt8(ascii: " ") {
                if inWord { words.append(word) }
                word = []
                inWord = false
            } else if b == UInt8(ascii: "'") || b == UInt8(ascii: "\"") {
                quote = b
                inWord = true
            } else {
                word.append(b)
                inWord = true
            }
        }
        if quote != nil { return .failure(.init(text: "unterminated quote in '\(ByteEscaping.escapeControls(command))'")) }
        if inWord { words.append(word) }
        if words.isEmpty { return .failure(.init(text: "expected a command, e.g. 'ssh -p 2222'")) }
        return .success(words)
    }
}
