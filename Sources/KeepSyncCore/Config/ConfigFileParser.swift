/// Parses the `key = value` configuration file.
///
/// Each line is blank, a comment whose first non-blank byte is `#`, or `key = value` with
/// blanks around both trimmed. Comments are full-line only: a `#` after a value belongs to
/// the value, because `#` is a legal byte in paths and globs. Values are not quoted. Keys:
/// `source`, `mirror`, `state`, `exclude` (repeatable), `settle_ms`, `max_delay_ms`,
/// `delete` (`true`/`false`), `max_delete_percent` (0-100), `log_level`, `verify_interval`
/// (seconds, 0 is off), `ssh_command`, `rsync_path`, `keep_versions` (a duration such as
/// `30d`, 0 is off) and `versions_dir`. A path value of
/// `~` or starting with `~/` starts at the home directory (`~user` is left alone). Setting
/// any other key twice is an error. An `exclude` keeps a trailing blank escaped with `\`.
///
/// Several mirrors: a `[mirror NAME]` line (NAME: letters, digits, `-`, `_`, `.`) opens a
/// section that lasts until the next one; it takes `path` (required) and the keys of
/// `MirrorSection.keys`, for that mirror alone. Keys before the first section apply to
/// every mirror; `mirror =` there does not mix with sections, nor `state =` with two.
public enum ConfigFileParser {
    /// Largest accepted millisecond value (one day).
    public static let maximumMilliseconds = 86_400_000
    /// Largest accepted second count (a year).
    public static let maximumSeconds = 31_536_000
    /// Largest accepted duration (`keep_versions`), in seconds: 36500 days, about a century.
    public static let maximumDurationSeconds = 36_500 * 86_400

    /// A section being read: its header and the keys seen so far.
    private struct OpenSection {
        var name: String
        var line: Int
        var path: [UInt8]?
        var keys: [String: Int] = [:]
        var values = Configuration()
    }

    /// Parses `bytes`; errors are `.configuration`, one line, `"<fileName>:<line>: <what>"`.
    public static func parse(_ bytes: [UInt8], fileName: String, home: [UInt8]) throws -> Configuration {
        var config = Configuration()
        var firstLine: [String: Int] = [:]
        var open: OpenSection?
        var lineNumber = 0
        var start = 0
        func fail(_ what: String, line: Int? = nil) -> KeepSyncError {
            KeepSyncError(.configuration, "\(fileName):\(line ?? lineNumber): \(what)")
        }
        // A section without `path =` is named at its header.
        func closeSection() throws {
            guard let section = open else { return }
            guard let path = section.path else {
                throw fail("[mirror \(section.name)] has no 'path =' (the mirror's directory)", line: section.line)
            }
            config.sections.append(MirrorSection(name: section.name, line: section.line, path: path,
                                                  keys: Set(section.keys.keys), values: section.values))
            open = nil
        }
        // A UTF-8 byte order mark is not part of the first key.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { start = 3 }
        while start < bytes.count {
            lineNumber += 1
            var end = start
            while end < bytes.count, bytes[end] != 0x0A { end += 1 }
            let line = bytes[start..<end]
            start = end + 1

            let trimmed = trim(line)
            if trimmed.isEmpty || trimmed.first == 0x23 { continue }
            if trimmed.first == 0x5B {
                try closeSection()
                let name = try sectionName(trimmed, fail: { fail($0) })
                if let other = config.sections.first(where: { $0.name == name }) {
                    throw fail("duplicate section [mirror \(name)] (first on line \(other.line))")
                }
                if let mirrorLine = firstLine[Keys.mirror] {
                    throw fail("'mirror =' and [mirror NAME] sections (line \(lineNumber)) do not mix: "
                               + "move this mirror into a section of its own", line: mirrorLine)
                }
                if let stateLine = firstLine[Keys.state], !config.sections.isEmpty {
                    throw fail("'state =' before the sections would be shared by every mirror: "
                               + "set 'state =' in each [mirror NAME] section instead", line: stateLine)
                }
                open = OpenSection(name: name, line: lineNumber)
                continue
            }
            guard let equals = trimmed.firstIndex(of: 0x3D) else {
                throw fail("expected 'key = value', got '\(ByteEscaping.escapeControls(trimmed))'")
            }
            let keyBytes = trim(trimmed[..<equals])
            let rawValue = line[(equals + 1)...]
            let value = Array(trim(rawValue))
            guard !keyBytes.isEmpty else { throw fail("expected 'key = value', got '\(ByteEscaping.escapeControls(trimmed))'") }
            let key = String(decoding: keyBytes, as: UTF8.self)
            if value.contains(0) { throw fail("\(key): NUL byte in value") }

            guard var section = open else {
                if key == "path" { throw fail("'path =' belongs in a [mirror NAME] section") }
                guard Keys.all.contains(key) else { throw fail("unknown key '\(ByteEscaping.escapeControls(keyBytes))'") }
                if key != Keys.exclude, let first = firstLine[key] {
                    throw fail("duplicate key '\(key)' (first set on line \(first))")
                }
                firstLine[key] = lineNumber
                try apply(key, value, raw: rawValue, to: &config, home: home, fail: { fail($0) })
                continue
            }
            guard MirrorSection.keys.contains(key) else {
                guard Keys.all.contains(key) else { throw fail("unknown key '\(ByteEscaping.escapeControls(keyBytes))'") }
                if key == Keys.mirror { throw fail("'mirror =' in [mirror \(section.name)]: its directory is 'path ='") }
                throw fail("'\(key)' applies to every mirror: set it before the first section, not in [mirror \(section.name)]")
            }
            if let first = section.keys[key] {
                throw fail("duplicate key '\(key)' in [mirror \(section.name)] (first set on line \(first))")
            }
            section.keys[key] = lineNumber
            if key == "path" {
                guard !value.isEmpty else { throw fail("path: expected a path") }
                section.path = expandingHome(value, home: home)
            } else {
                try apply(key, value, raw: rawValue, to: &section.values, home: home, fail: { fail($0) })
            }
            open = section
        }
        try closeSection()
        return config
    }

    /// NAME of a `[mirror NAME]` line (blanks around the words allowed).
    private static func sectionName(_ line: ArraySlice<UInt8>, fail: (String) -> KeepSyncError) throws -> String {
        let bad = fail("expected '[mirror NAME]' (NAME: letters, digits, '-', '_' or '.'), got '\(ByteEscaping.escapeControls(line))'")
        guard line.last == 0x5D else { throw bad }
        let inside = trim(line.dropFirst().dropLast())
        let word = Array("mirror".utf8)
        guard inside.starts(with: word) else { throw bad }
        let rest = inside.dropFirst(word.count)
        guard let blank = rest.first, isBlank(blank) else { throw bad }
        let name = trim(rest)
        guard !name.isEmpty, name.allSatisfy(MirrorSection.isNameByte) else { throw bad }
        return String(decoding: name, as: UTF8.self)
    }

    /// Sets `key` (a known key, not `path`) from `value` in `config`.
    private static func apply(_ key: String, _ value: [UInt8], raw rawValue: ArraySlice<UInt8>, to config: inout Configuration,
                              home: [UInt8], fail: (String) -> KeepSyncError) throws {
        switch key {
        case Keys.source:
            guard !value.isEmpty else { throw fail("source: expected a path") }
            config.source = expandingHome(value, home: home)
        case Keys.mirror:
            guard !value.isEmpty else { throw fail("mirror: expected a path") }
            config.mirror = expandingHome(value, home: home)
        case Keys.state:
            guard !value.isEmpty else { throw fail("state: expected a path") }
            config.state = expandingHome(value, home: home)
        case Keys.exclude:
            let pattern = excludeValue(rawValue)
            do {
                _ = try ExcludeMatcher(patterns: [pattern])
            } catch let error as KeepSyncError {
                throw fail(error.message)
            }
            config.excludes.append(pattern)
        case Keys.settle:
            switch milliseconds(value, minimum: 0) {
            case .success(let n): config.settleMilliseconds = n
            case .failure(let reason): throw fail("\(key): \(reason.text)")
            }
        case Keys.maxDelay:
            switch milliseconds(value, minimum: 1) {
            case .success(let n): config.maxDelayMilliseconds = n
            case .failure(let reason): throw fail("\(key): \(reason.text)")
            }
        case Keys.delete:
            switch value {
            case Array("true".utf8): config.deleteEnabled = true
            case Array("false".utf8): config.deleteEnabled = false
            default: throw fail("delete: expected 'true' or 'false', got '\(ByteEscaping.escapeControls(value))'")
            }
        case Keys.maxDeletePercent:
            switch percent(value) {
            case .success(let n): config.maxDeletePercent = n
            case .failure(let reason): throw fail("\(key): \(reason.text)")
            }
        case Keys.verifyInterval:
            switch seconds(value) {
            case .success(let n): config.verifyIntervalSeconds = n
            case .failure(let reason): throw fail("\(key): \(reason.text)")
            }
        case Keys.sshCommand:
            if case .failure(let reason) = RemoteTarget.words(value) { throw fail("\(key): \(reason.text)") }
            config.sshCommand = value
        case Keys.rsyncPath:
            guard let first = value.first, first != UInt8(ascii: "-") else { throw fail("\(key): expected a path") }
            config.rsyncPath = value
        case Keys.keepVersions:
            switch duration(value) {
            case .success(let n): config.keepVersionsSeconds = n
            case .failure(let reason): throw fail("\(key): \(reason.text)")
            }
        case Keys.versionsDirectory:
            guard !value.isEmpty else { throw fail("\(key): expected a path") }
            config.versionsDirectory = expandingHome(value, home: home)
        case Keys.logLevel:
            guard let level = LogLevel(bytes: value) else {
                throw fail("log_level: \(logLevelExpectation), got '\(ByteEscaping.escapeControls(value))'")
            }
            config.logLevel = level
        default:
            throw fail("unknown key '\(key)'")
        }
    }

    // MARK: - Shared with CommandLineParser

    /// The key names.
    enum Keys {
        static let source = "source"
        static let mirror = "mirror"
        static let state = "state"
        static let exclude = "exclude"
        static let settle = "settle_ms"
        static let maxDelay = "max_delay_ms"
        static let delete = "delete"
        static let maxDeletePercent = "max_delete_percent"
        static let logLevel = "log_level"
        static let verifyInterval = "verify_interval"
        static let sshCommand = "ssh_command"
        static let rsyncPath = "rsync_path"
        static let keepVersions = "keep_versions"
        static let versionsDirectory = "versions_dir"
        static let all: Set<String> = [source, mirror, state, exclude, settle, maxDelay, delete, maxDeletePercent, logLevel,
                                       verifyInterval, sshCommand, rsyncPath, keepVersions, versionsDirectory]
    }

    /// Why a value was refused, as text following `<key>: `.
    struct ValueError: Error, Equatable {
        let text: String
    }

    /// The text after `<key>: ` for a bad log level.
    static let logLevelExpectation = "expected error, warning, info or debug"

    /// A millisecond count from `minimum` to `maximumMilliseconds`.
    static func milliseconds(_ value: [UInt8], minimum: Int) -> Result<Int, ValueError> {
        guard let n = decimal(value) else {
            return .failure(ValueError(text: "expected a number of milliseconds, got '\(ByteEscaping.escapeControls(value))'"))
        }
        guard n >= minimum, n <= maximumMilliseconds else {
            return .failure(ValueError(
                text: "expected a number of milliseconds from \(minimum) to \(maximumMilliseconds), got '\(ByteEscaping.escapeControls(value))'"))
        }
        return .success(n)
    }

    /// A second count from 0 to `maximumSeconds`.
    static func seconds(_ value: [UInt8]) -> Result<Int, ValueError> {
        guard let n = decimal(value), n <= maximumSeconds else {
            return .failure(ValueError(text: "expected a number of seconds from 0 to \(maximumSeconds), got '\(ByteEscaping.escapeControls(value))'"))
        }
        return .success(n)
    }

    /// The text after `<key>: ` for a malformed duration.
    static let durationExpectation = "expected a duration like 30d, 12h or 90s"

    /// Seconds in each duration unit, largest first.
    private static let durationUnits: [(unit: UInt8, seconds: Int)] = [
        (UInt8(ascii: "w"), 604_800), (UInt8(ascii: "d"), 86_400), (UInt8(ascii: "h"), 3_600), (UInt8(ascii: "m"), 60),
        (UInt8(ascii: "s"), 1),
    ]

    /// A duration in seconds (`keep_versions`, `--keep-versions`): decimal digits and one
    /// unit, `s`, `m`, `h`, `d` or `w` (`30d`, `12h`, `90s`); `0` alone is 0 (off), as is a
    /// zero with a unit. At most `maximumDurationSeconds`.
    static func duration(_ value: [UInt8]) -> Result<Int, ValueError> {
        let malformed = ValueError(text: "\(durationExpectation), got '\(ByteEscaping.escapeControls(value))'")
        if value == [UInt8(ascii: "0")] { return .success(0) }
        guard let last = value.last, let unit = durationUnits.first(where: { $0.unit == last }),
              let n = decimal(Array(value.dropLast())) else { return .failure(malformed) }
        let (total, overflow) = n.multipliedReportingOverflow(by: unit.seconds)
        guard !overflow, total <= maximumDurationSeconds else {
            return .failure(ValueError(
                text: "expected a duration up to \(maximumDurationSeconds / 86_400)d, got '\(ByteEscaping.escapeControls(value))'"))
        }
        return .success(total)
    }

    /// `seconds` as a duration `duration` reads back: in the largest unit that divides it
    /// (`2592000` is `30d`), `0` for 0.
    public static func durationText(_ seconds: Int) -> String {
        guard seconds > 0 else { return "0" }
        let unit = durationUnits.first { seconds % $0.seconds == 0 } ?? durationUnits[durationUnits.count - 1]
        return "\(seconds / unit.seconds)\(Character(Unicode.Scalar(unit.unit)))"
    }

    /// A percentage 0-100.
    static func percent(_ value: [UInt8]) -> Result<Int, ValueError> {
        guard let n = decimal(value), n <= 100 else {
            return .failure(ValueError(text: "expected a percentage from 0 to 100, got '\(ByteEscaping.escapeControls(value))'"))
        }
        return .success(n)
    }

    /// Unsigned decimal digits only; an overlong number saturates at `Int.max`.
    static func decimal(_ value: [UInt8]) -> Int? {
        guard !value.isEmpty else { return nil }
        var n = 0
        for b in value {
            guard b >= 0x30, b <= 0x39 else { return nil }
            let (times, o1) = n.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(Int(b - 0x30))
            n = (o1 || o2) ? Int.max : sum
        }
        return n
    }

    /// `path` with a leading `~` (alone or before `/`) replaced by `home`; otherwise unchanged.
    public static func expandingHome(_ path: [UInt8], home: [UInt8]) -> [UInt8] {
        guard path.first == 0x7E else { return path }
        if path.count == 1 { return home }
        guard path[1] == 0x2F else { return path }
        var out = home
        while out.count > 1, out.last == 0x2F { out.removeLast() }
        if out == [0x2F] { out = [] }
        out.append(contentsOf: path[1...])
        return out
    }

    // MARK: - Private

    private static func isBlank(_ b: UInt8) -> Bool {
        b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0B || b == 0x0C
    }

    private static func trim(_ s: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var lo = s.startIndex, hi = s.endIndex
        while lo < hi, isBlank(s[lo]) { lo += 1 }
        while hi > lo, isBlank(s[hi - 1]) { hi -= 1 }
        return s[lo..<hi]
    }

    /// The trimmed pattern, keeping one trailing blank that an odd run of `\` escapes.
    private static func excludeValue(_ raw: ArraySlice<UInt8>) -> [UInt8] {
        let trimmed = trim(raw)
        var backslashes = 0
        var i = trimmed.endIndex
        while i > trimmed.startIndex, trimmed[i - 1] == 0x5C { backslashes += 1; i -= 1 }
        if backslashes % 2 == 1, trimmed.endIndex < raw.endIndex, raw[trimmed.endIndex] != 0x0D {
            return Array(raw[trimmed.startIndex...trimmed.endIndex])
        }
        return Array(trimmed)
    }
}
