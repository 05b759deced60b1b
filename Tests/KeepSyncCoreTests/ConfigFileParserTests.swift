import Testing
@testable import KeepSyncCore

@Suite("ConfigFileParser")
struct ConfigFileParserTests {
    static let home = Array("/home/ann".utf8)

    static func parse(_ text: String, fileName: String = "keepsync.conf", home: [UInt8] = home) throws -> Configuration {
        try ConfigFileParser.parse(Array(text.utf8), fileName: fileName, home: home)
    }

    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    @Test("an empty or comment-only file gives the defaults")
    func emptyFileGivesDefaults() throws {
        let expected = Configuration(
            source: nil, mirror: nil, state: nil, excludes: [], settleMilliseconds: 20,
            maxDelayMilliseconds: 2000, deleteEnabled: true, maxDeletePercent: 50, logLevel: .info,
            verifyIntervalSeconds: 3600)
        #expect(try Self.parse("") == expected)
        #expect(try Self.parse("\n\n  \t\n# a comment\n   # indented comment\n") == expected)
        #expect(Configuration() == expected)
    }

    @Test("every key is read")
    func everyKeyIsRead() throws {
        let text = """
            # keepsync
            source = /data/src
            mirror = /backup/mirror
            state = /var/tmp/ks
            exclude = *.o
            exclude = node_modules/
            settle_ms = 0
            max_delay_ms = 1
            delete = false
            max_delete_percent = 100
            log_level = debug
            verify_interval = 0
            keep_versions = 2w
            versions_dir = ~/mirror/.old
            """
        let config = try Self.parse(text)
        #expect(config == Configuration(
            source: Self.b("/data/src"), mirror: Self.b("/backup/mirror"), state: Self.b("/var/tmp/ks"),
            excludes: [Self.b("*.o"), Self.b("node_modules/")], settleMilliseconds: 0,
            maxDelayMilliseconds: 1, deleteEnabled: false, maxDeletePercent: 100, logLevel: .debug,
            verifyIntervalSeconds: 0, keepVersionsSeconds: 1_209_600, versionsDirectory: Self.b("/home/ann/mirror/.old")))
    }

    @Test("keep_versions takes a number and a unit, s m h d or w; 0 is off", arguments: [
        ("30d", 2_592_000), ("12h", 43_200), ("90s", 90), ("2w", 1_209_600), ("15m", 900), ("0", 0),
    ])
    func keepVersions(_ value: String, _ seconds: Int) throws {
        #expect(try Self.parse("keep_versions = \(value)").keepVersionsSeconds == seconds)
        #expect(try Self.parse("").keepVersionsSeconds == 0)
        #expect(try Self.parse("").versionsDirectory == nil)
    }

    @Test("numbers at their limits are accepted")
    func numberLimits() throws {
        let config = try Self.parse("settle_ms = 86400000\nmax_delay_ms = 86400000\nmax_delete_percent = 0\ndelete = true")
        #expect(config.settleMilliseconds == 86_400_000)
        #expect(config.maxDelayMilliseconds == 86_400_000)
        #expect(config.maxDeletePercent == 0)
        #expect(config.deleteEnabled)
        #expect(try Self.parse("settle_ms = 007").settleMilliseconds == 7)
        #expect(try Self.parse("verify_interval = 31536000").verifyIntervalSeconds == 31_536_000)
    }

    @Test("log_level takes each level name", arguments: LogLevel.allCases)
    func logLevelNames(_ level: LogLevel) throws {
        #expect(try Self.parse("log_level = \(level.name)").logLevel == level)
    }

    @Test("whitespace around keys and values is trimmed, CRLF and a BOM are fine", arguments: [
        "source=/s",
        "source = /s",
        "  source\t=\t/s  ",
        "source = /s\r",
        "\u{FEFF}source = /s",
    ])
    func whitespaceIsTrimmed(_ line: String) throws {
        #expect(try Self.parse(line + "\n").source == Self.b("/s"))
    }

    @Test("comments are whole lines only: '#' and '=' inside a value are kept")
    func hashInsideValueIsKept() throws {
        let config = try Self.parse("source = /a # b\nmirror = /m=n\nexclude = #*#")
        #expect(config.source == Self.b("/a # b"))
        #expect(config.mirror == Self.b("/m=n"))
        #expect(config.excludes == [Self.b("#*#")])
    }

    @Test("'~' at the start of a path is the home directory", arguments: [
        ("~", "/home/ann", "/home/ann"),
        ("~/", "/home/ann", "/home/ann/"),
        ("~/Documents", "/home/ann", "/home/ann/Documents"),
        ("~/Documents", "/home/ann/", "/home/ann/Documents"),
        ("~/x", "/", "/x"),
        ("~ann/x", "/home/ann", "~ann/x"),
        ("/data/~/x", "/home/ann", "/data/~/x"),
        ("relative/dir", "/home/ann", "relative/dir"),
    ])
    func tildeIsHome(_ value: String, _ home: String, _ expected: String) throws {
        let config = try Self.parse("source = \(value)\nmirror = \(value)\nstate = \(value)", home: Self.b(home))
        #expect(config.source == Self.b(expected))
        #expect(config.mirror == Self.b(expected))
        #expect(config.state == Self.b(expected))
    }

    @Test("path bytes that are not UTF-8 are kept exactly")
    func nonUTF8PathsAreKept() throws {
        let bytes = Self.b("source = /d/caf") + [0xE9] + Self.b("\nexclude = ") + [0xFF, 0x2A] + [0x0A]
        let config = try ConfigFileParser.parse(bytes, fileName: "k.conf", home: Self.home)
        #expect(config.source == Self.b("/d/caf") + [0xE9])
        #expect(config.excludes == [[0xFF, 0x2A]])
    }

    @Test("excludes keep their order and a trailing blank escaped with a backslash")
    func excludesKeepOrder() throws {
        let config = try Self.parse("exclude = b\nexclude = a\nexclude = foo\\ \nexclude = bar\\\\  ")
        #expect(config.excludes == [Self.b("b"), Self.b("a"), Self.b("foo\\ "), Self.b("bar\\\\")])
    }

    static let errors: [(String, String)] = [
        ("sorce = /x", "keepsync.conf:1: unknown key 'sorce'"),
        ("Source = /x", "keepsync.conf:1: unknown key 'Source'"),
        ("\n# comment\nnonsense", "keepsync.conf:3: expected 'key = value', got 'nonsense'"),
        ("= /x", "keepsync.conf:1: expected 'key = value', got '= /x'"),
        ("source = /a\nsource = /b", "keepsync.conf:2: duplicate key 'source' (first set on line 1)"),
        ("log_level = info\n\nlog_level = debug", "keepsync.conf:3: duplicate key 'log_level' (first set on line 1)"),
        ("source =", "keepsync.conf:1: source: expected a path"),
        ("mirror = ", "keepsync.conf:1: mirror: expected a path"),
        ("state=", "keepsync.conf:1: state: expected a path"),
        ("settle_ms = abc", "keepsync.conf:1: settle_ms: expected a number of milliseconds, got 'abc'"),
        ("settle_ms = -1", "keepsync.conf:1: settle_ms: expected a number of milliseconds, got '-1'"),
        ("settle_ms = 1.5", "keepsync.conf:1: settle_ms: expected a number of milliseconds, got '1.5'"),
        ("settle_ms = +5", "keepsync.conf:1: settle_ms: expected a number of milliseconds, got '+5'"),
        ("settle_ms = 5 ms", "keepsync.conf:1: settle_ms: expected a number of milliseconds, got '5 ms'"),
        ("settle_ms =", "keepsync.conf:1: settle_ms: expected a number of milliseconds, got ''"),
        ("settle_ms = 86400001",
         "keepsync.conf:1: settle_ms: expected a number of milliseconds from 0 to 86400000, got '86400001'"),
        ("settle_ms = 99999999999999999999999",
         "keepsync.conf:1: settle_ms: expected a number of milliseconds from 0 to 86400000, got '99999999999999999999999'"),
        ("max_delay_ms = 0", "keepsync.conf:1: max_delay_ms: expected a number of milliseconds from 1 to 86400000, got '0'"),
        ("max_delay_ms = soon", "keepsync.conf:1: max_delay_ms: expected a number of milliseconds, got 'soon'"),
        ("delete = yes", "keepsync.conf:1: delete: expected 'true' or 'false', got 'yes'"),
        ("delete = True", "keepsync.conf:1: delete: expected 'true' or 'false', got 'True'"),
        ("verify_interval = 1h", "keepsync.conf:1: verify_interval: expected a number of seconds from 0 to 31536000, got '1h'"),
        ("verify_interval = -1", "keepsync.conf:1: verify_interval: expected a number of seconds from 0 to 31536000, got '-1'"),
        ("max_delete_percent = 101", "keepsync.conf:1: max_delete_percent: expected a percentage from 0 to 100, got '101'"),
        ("max_delete_percent = 50%", "keepsync.conf:1: max_delete_percent: expected a percentage from 0 to 100, got '50%'"),
        ("keep_versions = 30", "keepsync.conf:1: keep_versions: expected a duration like 30d, 12h or 90s, got '30'"),
        ("keep_versions = d", "keepsync.conf:1: keep_versions: expected a duration like 30d, 12h or 90s, got 'd'"),
        ("\nkeep_versions = -1d", "keepsync.conf:2: keep_versions: expected a duration like 30d, 12h or 90s, got '-1d'"),
        ("keep_versions = 1y", "keepsync.conf:1: keep_versions: expected a duration like 30d, 12h or 90s, got '1y'"),
        ("keep_versions =", "keepsync.conf:1: keep_versions: expected a duration like 30d, 12h or 90s, got ''"),
        ("keep_versions = 5300w", "keepsync.conf:1: keep_versions: expected a duration up to 36500d, got '5300w'"),
        ("keep_versions = 1d\nkeep_versions = 2d", "keepsync.conf:2: duplicate key 'keep_versions' (first set on line 1)"),
        ("versions_dir =", "keepsync.conf:1: versions_dir: expected a path"),
        ("versions_dir = /a\n# x\nversions_dir = /b", "keepsync.conf:3: duplicate key 'versions_dir' (first set on line 1)"),
        ("log_level = loud", "keepsync.conf:1: log_level: expected error, warning, info or debug, got 'loud'"),
        ("log_level = DEBUG", "keepsync.conf:1: log_level: expected error, warning, info or debug, got 'DEBUG'"),
        ("exclude = [ab", "keepsync.conf:1: bad exclude pattern '[ab': unterminated '['"),
        ("exclude =", "keepsync.conf:1: bad exclude pattern '': empty"),
        ("source = /a\u{0}b", "keepsync.conf:1: source: NUL byte in value"),
        ("source = /s\r\nbogus\r\n", "keepsync.conf:2: expected 'key = value', got 'bogus'"),
    ]

    @Test("an error names the file and line, on one line", arguments: errors)
    func errorsNameFileAndLine(_ text: String, _ message: String) {
        #expect(throws: KeepSyncError(.configuration, message)) {
            try Self.parse(text)
        }
    }

    @Test("the error uses the file name it was given")
    func errorUsesFileName() {
        #expect(throws: KeepSyncError(.configuration, "/etc/ks/backup.conf:2: unknown key 'x'")) {
            try Self.parse("source = /s\nx = 1", fileName: "/etc/ks/backup.conf")
        }
    }

    @Test("a control byte in a bad value is shown escaped, keeping the message on one line")
    func controlBytesAreEscaped() {
        #expect(throws: KeepSyncError(.configuration, "k:1: delete: expected 'true' or 'false', got 'a\\x1bb'")) {
            try ConfigFileParser.parse(Self.b("delete = a\u{1B}b"), fileName: "k", home: Self.home)
        }
    }
}
