import Glibc
import KeepSyncCore
import Synchronization

/// A mirror on another host over one `RemoteSession`: reads from a remote `find -P
/// -printf` listing, files installed by one rsync run per batch (NUL-separated list on
/// stdin, temp + rename on the remote, `--fsync` where the remote rsync has it), entry
/// changes as NUL-separated lists through fixed remote scripts (`RemoteScript`), the
/// barrier a remote `sync -f`. Every path is checked on the remote for a symlink among
/// its ancestors before anything is written. Every failure is a `KeepSyncError`: the
/// transport's (`RemoteFailure.error`: `.unreachable` when the host cannot be reached or
/// refuses the login) or one naming the path. Safe on any thread.
public final class RemoteMirror: MirrorProviding {
    /// The connection.
    public let session: RemoteSession
    /// Where the mirror is.
    public let target: RemoteTarget
    /// The local directory that install paths are relative to (absolute).
    public let sourceRoot: [UInt8]
    /// The local rsync program.
    public let rsync: [UInt8]
    /// rsync's `--timeout` (seconds without I/O before it gives up).
    public let rsyncIOTimeout: Int
    /// Where what is replaced or removed is kept, and the clock of its tags; nil: nothing kept.
    public let versions: VersionKeeping?

    // Internal, not private: the install (RemoteMirrorInstall.swift) uses these.
    struct State {
        var inFlight: [RelativePath: Int] = [:]
        /// The tree as the full pass under way read it (`beginPass`), less what changed since.
        var pass: RemoteTreeListing?
        /// What the round of live changes under way read (`beginReads`), less what changed since.
        var reads: RemoteReadAhead?
        /// Directories a read just saw as real directories, their whole chain too (no
        /// symlink on the way), and when that read was sent: an install into one checked
        /// within `checkedFor` need not check again (`RemoteMirrorInstall`).
        var checked: [RelativePath: ContinuousClock.Instant] = [:]
        /// Versions rsync's backup put aside and moved to their names (`keepStaged`).
        var versionsStaged = 0
        /// Paths whose old file rsync's backup may have put aside, not yet moved to a name.
        var staged: Set<RelativePath> = []

        /// Notes `directories` as checked at `at`; forgets the checks gone stale.
        mutating func noteChecked(_ directories: some Sequence<RelativePath>, at: ContinuousClock.Instant) {
            let now = ContinuousClock.now
            checked = checked.filter { now - $0.value < RemoteMirror.checkedFor }
            for d in directories { checked[d] = max(checked[d] ?? at, at) }
        }

        /// What the pass's listing or the round's reads say of `path`.
        func answer(_ path: RelativePath) -> RemoteTreeListing.Answer {
            if let a = pass?.answer(path), a != .unknown { return a }
            return reads?.answer(path) ?? .unknown
        }

        /// A directory's entries from the pass's listing or the round's reads.
        func list(_ directory: RelativePath) -> [DirectoryEntry]? {
            pass?.list(directory) ?? reads?.list(directory)
        }
    }
    let state = Mutex(State())

    /// A mirror at `target` over `session`, installing from `sourceRoot`.
    /// With `versions`, what a replace or removal would lose is kept (SPEC "Versions").
    public init(session: RemoteSession, target: RemoteTarget, sourceRoot: [UInt8], rsync: [UInt8] = Array("rsync".utf8),
                rsyncIOTimeout: Int = 60, versions: VersionKeeping? = nil) {
        precondition(sourceRoot.first == 0x2F, "the source root is an absolute path")
        self.session = session
        self.target = target
        self.sourceRoot = sourceRoot
        self.rsync = rsync
        self.rsyncIOTimeout = rsyncIOTimeout
        self.versions = versions
    }

    // MARK: Reads

    /// `lstat` on the remote; nil when the path (or a parent) is not there.
    public func stat(_ path: RelativePath) throws -> FileStat? {
        try statAll([path])[0].map { try $0.get() } ?? nil
    }

    /// Stats several paths in one round trip (none when a pass's listing answers them
    /// all): nil when not there; a failure for a path behind a symlink.
    public func statAll(_ paths: [RelativePath]) throws -> [Result<FileStat, KeepSyncError>?] {
        for path in paths { _ = try argument(path) }
        let known = state.withLock { s in s.pass != nil || s.reads != nil ? paths.map { s.answer($0) } : nil }
        guard let known else { return try remoteStatAll(paths) }
        var out: [Result<FileStat, KeepSyncError>?] = []
        var ask: [Int] = []
        for (i, answer) in known.enumerated() {
            switch answer {
            case .present(let stat, _): out.append(.success(stat))
            case .absent: out.append(nil)
            case .unknown:
                out.append(nil)
                ask.append(i)
            }
        }
        guard !ask.isEmpty else { return out }
        for (i, reply) in zip(ask, try remoteStatAll(ask.map { paths[$0] })) { out[i] = reply }
        return out
    }

    /// `statAll` on the remote, whatever a pass's listing says.
    func remoteStatAll(_ paths: [RelativePath]) throws -> [Result<FileStat, KeepSyncError>?] {
        let replies = try statCall(paths)
        return zip(paths, replies).map { path, reply in
            switch reply.token {
            case "S": return reply.stat.map { .success($0) } ?? .failure(KeepSyncError(.io, "unreadable remote listing", path: path))
            case "N", "P": return nil
            default: return .failure(reply.error(path, "stat"))
            }
        }
    }

    /// `statAll` as a result per path.
    public func statEach(_ paths: [RelativePath]) -> [Result<FileStat?, any Error>] {
        do {
            return try statAll(paths).map { reply in
                switch reply {
                case nil: .success(nil)
                case .success(let stat)?: .success(stat)
                case .failure(let error)?: .failure(error)
                }
            }
        } catch {
            return paths.map { .failure(Self.naming(error, $0)) }
        }
    }

    /// A remote directory's entries, never through a symlink (from a pass's listing
    /// when it still holds them).
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
        let word = try argument(directory)
        if let entries = state.withLock({ $0.list(directory) }) { return entries }
        let output = try remote(RemoteScript.batch(target.directory, RemoteScript.list, perCall: 1),
                                input: RemoteScript.input([word]))
        var reader = ReplyReader(output.stdout)
        guard let token = reader.field() else { throw remoteError(output, path: directory, "list") }
        switch token {
        case [0x53]: break
        case [0x4E], [0x50]: throw KeepSyncError(.notFound, "list: no such directory on \(session.host)", path: directory)
        case [0x4C]: throw KeepSyncError(.unsafePath, "list: a symlink on the way on \(session.host)", path: directory)
        default: throw KeepSyncError(.io, "list: \(String(decoding: token.dropFirst(), as: UTF8.self))", path: directory)
        }
        var entries: [DirectoryEntry] = []
        while !reader.atEnd {
            guard let record = reader.record() else { throw KeepSyncError(.io, "list: a record cut short", path: directory) }
            entries.append(DirectoryEntry(name: record.name, stat: record.stat))
        }
        guard output.status == 0 else { throw remoteError(output, path: directory, "list") }
        return entries
    }

    /// Every entry below the root in one round trip (`find -P . -printf`): path, stat and
    /// link target (`beginPass` and `snapshot` read the same, kept compactly).
    public func listTree() throws -> [(path: RelativePath, stat: FileStat, target: [UInt8])] {
        let output = try remote(RemoteScript.plain(target.directory,
                                                   "exec find -P . -mindepth 1 -printf '\(RemoteScript.format)'"))
        var reader = ReplyReader(output.stdout)
        var out: [(path: RelativePath, stat: FileStat, target: [UInt8])] = []
        while !reader.atEnd {
            guard let record = reader.record() else { throw KeepSyncError(.io, "listing: a record cut short") }
            out.append((RelativePath(bytes: record.name), record.stat, record.target))
        }
        guard output.status == 0 else { throw remoteError(output, path: nil, "find") }
        return out
    }

    /// Six group installs at once (a pass runs five rsync runs, the live side four): each
    /// waits mostly on the link and on the remote's fsync per file, so more runs keep the
    /// remote's disk busier (a 20,000-file copy on the loopback: 7.77 s with three runs,
    /// 7.20 with five, 6.85 with seven). Not more: a pass holds up to six sessions on the
    /// connection (its runs and its own call), ten with the live copies it may start
    /// beside, and sshd refuses an eleventh (`MaxSessions` 10 by default): ssh then opens
    /// a second login.
    public var concurrentGroups: Int { 6 }
    /// Up to 2,048 files per rsync run: each run costs a check, a start, a stat and a
    /// remote sync (1,024 spent 0.8 s more of a 20,000-file pass on them).
    public var groupFiles: Int { 2048 }
    /// 256: the first rsync run starts while the pass still makes directories.
    public var firstGroupFiles: Int { 256 }

    // MARK: Passes

    /// Reads the whole tree in one round trip (`find -P . -printf`) and, until `endPass`,
    /// answers `list`, `stat`, `statAll` and `readLink` from it, except what a change made
    /// through this mirror since made stale: the changed paths, their directories'
    /// entries and own stats, everything below a removed, renamed or replaced path. Those
    /// are asked of the remote. Throws when the remote cannot be read (unreachable, DIR
    /// missing), so that the pass fails instead of seeing an empty mirror.
    public func beginPass() throws {
        sweepStaged()
        let listing = try readTree()
        state.withLock { $0.pass = listing }
    }

    /// Drops the pass's listing.
    public func endPass() {
        state.withLock { $0.pass = nil }
    }

    /// Reads, in one round trip, what a round of live changes will look at: each tree
    /// whole, the trees' ancestors and the stats alone (`RemoteReadAhead`); until
    /// `endReads`, `list`, `stat`, `statAll` and `readLink` answer from that, except what
    /// changed through the mirror since. Nothing is kept when the read fails or its
    /// output passes `readAheadLimit` bytes: the calls then ask as they go. Throws when the
    /// host cannot be reached (`.unreachable`).
    public func beginReads(trees: [RelativePath], stats: [RelativePath]) throws {
        state.withLock { $0.reads = nil }
        let safe = trees.filter { (try? argument($0)) != nil }, safeStats = stats.filter { (try? argument($0)) != nil }
        let (words, asked) = RemoteReadAhead.arguments(trees: safe, stats: safeStats)
        guard !words.isEmpty else { return }
        let script = RemoteScript.enter(target.directory)
            + Array("xargs -0 -r sh -c 'exec find -P \"$@\" \\( -path \".//*\" -o -prune \\) -printf \"\(RemoteScript.formatPath)\"' sh | head -c \(Self.readAheadLimit + 1)".utf8)
        let output: RemoteOutput
        let sent = ContinuousClock.now
        do { output = try remote(script, input: RemoteScript.input(words)) } catch {
            if error.code == .unreachable { throw error }
            return
        }
        guard output.status == 0, output.stdout.count <= Self.readAheadLimit,
              let reads = RemoteReadAhead(findOutput: output.stdout, asked: asked) else { return }
        // The trees' directories the read saw whole: an install into one right after the
        // round need not check them again.
        let parents = Set(safe.compactMap(\.parent)).filter { parent in
            if case .present(let stat, _) = reads.answer(parent) { return stat.kind == .directory }
            return false
        }
        state.withLock { s in
            s.reads = reads
            s.noteChecked(parents, at: sent)
        }
    }

    /// Drops what `beginReads` kept.
    public func endReads() {
        state.withLock { $0.reads = nil }
    }

    /// How long a directory a read saw whole counts as checked for an install into it:
    /// the install that follows a round of live changes at once (the latency path) skips
    /// a round trip; a later one checks again, as would a check made just before rsync,
    /// which a swap on the remote can race as well.
    static let checkedFor: Duration = .milliseconds(100)

    /// The most bytes of listing a round's read-ahead keeps (about 150,000 entries).
    static let readAheadLimit = 16 << 20

    /// Entries the round's read-ahead holds; nil outside a round.
    var readAheadCount: Int? { state.withLock { $0.reads?.count } }

    /// The whole tree in one round trip, as a read side that answers without another
    /// (what `check` compares against).
    public func snapshot() throws -> RemoteTreeSnapshot {
        RemoteTreeSnapshot(listing: try readTree(), mirror: self)
    }

    /// Directories the pass's listing still answers for, and its size in bytes; nil
    /// outside a pass.
    var passListing: (directories: Int, bytes: Int)? {
        state.withLock { s in s.pass.map { ($0.directoryCount, $0.footprint) } }
    }

    /// The tree, root included. find exits 1 when it could not read a directory: that one
    /// is listed empty, as a failed `list` leaves it for a pass.
    private func readTree() throws -> RemoteTreeListing {
        // The versions directory, never compared, is not read (`-path` takes its name as a
        // pattern: safe for the default name, the only one a remote mirror takes).
        let output = try versions.map { v in
            try remote(RemoteScript.batch(target.directory, "exec find -P . -path \"./$1\" -prune -o -printf \"\(RemoteScript.format)\""),
                       input: RemoteScript.input([try argument(v.directory)]))
        } ?? remote(RemoteScript.plain(target.directory, "exec find -P . -printf '\(RemoteScript.format)'"))
        guard output.status == 0 || output.status == 1 else { throw remoteError(output, path: nil, "find") }
        guard let listing = RemoteTreeListing(findOutput: output.stdout) else {
            throw KeepSyncError(.io, "find: an unreadable listing from \(session.host) (exit \(output.status))")
        }
        return listing
    }

    /// Paths about to change: what the pass's listing says of them is stale.
    func changing(_ paths: [RelativePath]) {
        state.withLock { s in
            if !s.checked.isEmpty {
                s.checked = s.checked.filter { entry in !paths.contains { entry.key.isWithin($0) } }
            }
            guard s.pass != nil || s.reads != nil else { return }
            for path in paths {
                s.pass?.changed(path)
                s.reads?.changed(path)
            }
        }
    }

    /// A remote symlink's target (from a pass's listing when it still holds it).
    public func readLink(_ path: RelativePath) throws -> [UInt8] {
        _ = try argument(path)
        switch state.withLock({ $0.answer(path) }) {
        case .present(let stat, let target):
            guard stat.kind == .symlink else { throw KeepSyncError(.conflict, "readlink: not a symlink", path: path) }
            return target
        case .absent: throw KeepSyncError(.notFound, "readlink: not there", path: path)
        case .unknown: break
        }
        let replies = try statCall([path])
        guard replies[0].token == "S", let record = replies[0].record else {
            throw replies[0].token == "N" || replies[0].token == "P"
                ? KeepSyncError(.notFound, "readlink: not there", path: path) : replies[0].error(path, "readlink")
        }
        guard record.stat.kind == .symlink else { throw KeepSyncError(.conflict, "readlink: not a symlink", path: path) }
        return record.target
    }

    /// A remote file's bytes, fetched whole (`cat`), as an open file.
    public func open(_ path: RelativePath) throws -> any SourceFile {
        guard let stat = try stat(path) else { throw KeepSyncError(.notFound, "open: not there", path: path) }
        let output = try remote(RemoteScript.batch(target.directory, RemoteScript.read, perCall: 1),
                                input: RemoteScript.input([try argument(path)]))
        var reader = ReplyReader(output.stdout)
        guard output.status == 0, reader.field() == [0x53] else {
            throw KeepSyncError(.notFound, "open: not a regular file on \(session.host)", path: path)
        }
        return RemoteFileContents(stat: stat, bytes: reader.rest())
    }

    // MARK: Helpers

    /// A path as the scripts take it: `.` for the root; refused when a component is empty,
    /// `.` or `..` (nothing may name outside DIR).
    func argument(_ path: RelativePath) throws -> [UInt8] {
        if path.isRoot { return [0x2E] }
        for component in path.components where component.isEmpty || component == [0x2E] || component == [0x2E, 0x2E] {
            throw KeepSyncError(.unsafePath, "not a path below the mirror", path: path)
        }
        return path.bytes
    }

    /// The stat script over `paths`: a reply per path, `S` with its record (one that
    /// vanished between the test and the `find` is `N`).
    func statCall(_ paths: [RelativePath]) throws -> [Reply] {
        guard !paths.isEmpty else { return [] }
        let words = try paths.map { try argument($0) }
        let output = try remote(RemoteScript.batch(target.directory, RemoteScript.stat), input: RemoteScript.input(words))
        return try whole(Self.pairedReplies(output.stdout, names: words), of: paths.count, output)
    }

    /// `replies` when every one of `count` came; else the remote's error, saying how many did.
    func whole(_ replies: [Reply], of count: Int, _ output: RemoteOutput) throws -> [Reply] {
        guard replies.count == count else {
            let failure = remoteError(output, path: nil, "remote script")
            throw KeepSyncError(failure.code, "\(replies.count) of \(count) answers: \(failure.message)")
        }
        return replies
    }

    /// Answers followed by `find` records named `./NAME` (a shell's, or several shells'
    /// one after the other): each `S` answer gets the record of its name, or becomes `N`
    /// (vanished before the `find`). Fewer answers than names when the output is cut short.
    static func pairedReplies(_ stdout: [UInt8], names: [[UInt8]]) -> [Reply] {
        var reader = ReplyReader(stdout)
        var replies: [Reply] = []
        var records: [[UInt8]: (name: [UInt8], stat: FileStat, target: [UInt8])] = [:]
        while let field = reader.field() {
            if ReplyReader.isHeader(field) {
                guard let record = reader.record(header: field) else { break }
                records[record.name] = record
            } else {
                replies.append(Reply(raw: field))
            }
        }
        guard replies.count == names.count else { return replies }
        for (i, name) in names.enumerated() where replies[i].token == "S" {
            if let record = records[[0x2E, 0x2F] + name] { replies[i].record = record } else { replies[i] = Reply(raw: [0x4E]) }
        }
        return replies
    }

    /// Runs a batch script over `items` (each `perCall` NUL-separated words); one answer per
    /// item. With `after` (`RemoteScript.statMade`), the records of the `S` answers come
    /// after each shell's answers, named `./` and the item's first word; without, answers
    /// carry no record.
    func call(_ body: String, items: [[[UInt8]]], perCall: Int? = nil, after: String? = nil,
              looping: Bool = true) throws -> [Reply] {
        guard !items.isEmpty else { return [] }
        // As many items per shell as surely fit its command line (each word a pointer too).
        let widest = items.map { $0.reduce(0) { $0 + $1.count + 1 + 8 } }.max() ?? 1
        let perShell = max(1, min(items.count, RemoteScript.lineBudget / widest))
        let output = try remote(RemoteScript.batch(target.directory, body, perCall: perCall, items: perShell, after: after,
                                                     looping: looping),
                                input: RemoteScript.input(items.flatMap { $0 }))
        return try whole(Self.replies(output.stdout, items: items, withRecords: after != nil), of: items.count, output)
    }

    /// A batch's answers, one per item in order (fewer when the output is cut short): with
    /// records (`pairedReplies`, by each item's first word) or without.
    static func replies(_ stdout: [UInt8], items: [[[UInt8]]], withRecords: Bool) -> [Reply] {
        if withRecords { return pairedReplies(stdout, names: items.map { $0.first ?? [] }) }
        var reader = ReplyReader(stdout)
        var replies: [Reply] = []
        while replies.count < items.count, let token = reader.field() { replies.append(Reply(raw: token)) }
        return replies
    }

    /// Runs a remote command, a transport failure as its `KeepSyncError` (rsync: `runRsync`).
    func remote(_ script: [UInt8], input: [UInt8] = []) throws(KeepSyncError) -> RemoteOutput {
        do { return try session.run(script, input: input) } catch { throw error.error }
    }

    func remoteError(_ output: RemoteOutput, path: RelativePath?, _ call: String) -> KeepSyncError {
        let text = String(decoding: output.stderr, as: UTF8.self).trimmingNewlines
        if output.status == 97 { return KeepSyncError(.notFound, "\(call): the mirror directory is not on \(session.host): \(text)", path: path) }
        return KeepSyncError(.io, "\(call): exit \(output.status) on \(session.host): \(text)", path: path)
    }

    /// `755`.
    static func octal(_ mode: UInt32) -> [UInt8] { Array(String(mode & 0o7777, radix: 8).utf8) }

    /// `@SECONDS.NANOSECONDS` as GNU touch -d takes it.
    static func touchTime(_ t: Timespec) -> [UInt8] {
        let ns = String(t.nanoseconds)
        return Array("@\(t.seconds).\(String(repeating: "0", count: max(0, 9 - ns.count)))\(ns)".utf8)
    }

    /// One item's answer.
    struct Reply {
        let raw: [UInt8]
        var record: (name: [UInt8], stat: FileStat, target: [UInt8])?
        init(raw: [UInt8]) { self.raw = raw }

        /// The token's first letter (`0`, `S`, `L`, `N`, `P`, `E`).
        var token: String { raw.first.map { String(UnicodeScalar($0)) } ?? "" }
        var stat: FileStat? { record?.stat }

        /// The error this answer means for `path`.
        func error(_ path: RelativePath, _ call: String) -> KeepSyncError {
            switch token {
            case "L": return KeepSyncError(.unsafePath, "\(call): refused, a symlink on the remote path", path: path)
            case "N": return KeepSyncError(.notFound, "\(call): not on the remote", path: path)
            case "P": return KeepSyncError(.notFound, "\(call): the parent directory is not on the remote", path: path)
            case "E":
                let text = String(decoding: raw.dropFirst(), as: UTF8.self)
                let conflict = ["File exists", "not empty", "cannot overwrite", "Is a directory", "Not a directory"]
                if conflict.contains(where: text.contains) { return KeepSyncError(.conflict, "\(call): \(text)", path: path) }
                if text.contains("No space left") || text.contains("quota") { return KeepSyncError(.noSpace, "\(call): \(text)", path: path) }
                if text.contains("Read-only file system") { return KeepSyncError(.readOnly, "\(call): \(text)", path: path) }
                if text.contains("Permission denied") || text.contains("Operation not permitted") {
                    return KeepSyncError(.permissionDenied, "\(call): \(text)", path: path)
                }
                return KeepSyncError(.io, "\(call): \(text)", path: path)
            default: return KeepSyncError(.io, "\(call): unexpected answer from the remote", path: path)
            }
        }
    }
}
