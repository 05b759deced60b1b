import Testing
@testable import KeepSyncCore

@Suite("CommandLineParser")
struct CommandLineParserTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    static func parse(_ args: [String]) throws -> Invocation {
        try CommandLineParser.parse(args.map { Array($0.utf8) })
    }

    /// Arguments and the invocation they should give.
    struct Case: Sendable, CustomTestStringConvertible {
        let arguments: [String]
        let expected: Invocation
        init(_ arguments: [String], _ expected: Invocation) {
            self.arguments = arguments
            self.expected = expected
        }
        var testDescription: String { arguments.joined(separator: " ") }
    }

    static let commands: [Case] = [
        Case(["run"], Invocation(command: .run)),
        Case(["sync"], Invocation(command: .sync)),
        Case(["check"], Invocation(command: .check)),
        Case(["status"], Invocation(command: .status)),
        Case(["service", "install"], Invocation(command: .serviceInstall)),
        Case(["service", "uninstall"], Invocation(command: .serviceUninstall)),
        Case(["help"], Invocation(command: .help)),
        Case(["--help"], Invocation(command: .help)),
        Case(["-h"], Invocation(command: .help)),
        Case(["--version"], Invocation(command: .version)),
        Case(["run", "--source", "/s", "--help"], Invocation(command: .help)),
        Case(["frobnicate", "--bogus", "-h"], Invocation(command: .help)),
        Case(["run", "--version"], Invocation(command: .version)),
        Case(["--version", "--help"], Invocation(command: .help)),
    ]

    @Test("versions takes one PATH or none, restore one, with --at (a split 'ago' too), --to and --force")
    func versionsAndRestore() throws {
        #expect(try Self.parse(["versions"]) == Invocation(command: .versions))
        var listed = Invocation(command: .versions, json: true)
        listed.path = Self.b("docs")
        #expect(try Self.parse(["versions", "docs", "--json"]) == listed)
        var restore = Invocation(command: .restore)
        restore.path = Self.b("docs/a b.txt")
        restore.at = .ago(7200)
        restore.restoreInto = Self.b("/tmp/out")
        restore.force = true
        #expect(try Self.parse(["restore", "docs/a b.txt", "--at", "2h", "ago", "--to", "/tmp/out", "--force"]) == restore)
        #expect(try Self.parse(["--force", "restore", "--at=2h ago", "--to=/tmp/out", "docs/a b.txt"]) == restore)
        let error = #expect(throws: KeepSyncError.self) { try Self.parse(["restore", "x", "--at", "soon"]) }
        #expect(error.map(ExitCode.init(failure:)) == .usage)
    }

    @Test("each command word, --help and --version", arguments: commands)
    func commandWords(_ row: Case) throws {
        #expect(try Self.parse(row.arguments) == row.expected)
    }

    static let valueFlags: [(String, String, Invocation)] = [
        ("--config", "/etc/k.conf", Invocation(command: .run, configFile: b("/etc/k.conf"))),
        ("--source", "/s", Invocation(command: .run, source: b("/s"))),
        ("--mirror", "~/m", Invocation(command: .run, mirror: b("~/m"))),
        ("--state", "/st", Invocation(command: .run, state: b("/st"))),
        ("--exclude", "*.o", Invocation(command: .run, excludes: [b("*.o")])),
        ("--settle", "0", Invocation(command: .run, settleMilliseconds: 0)),
        ("--max-delay", "1", Invocation(command: .run, maxDelayMilliseconds: 1)),
        ("--max-delete", "100", Invocation(command: .run, maxDeletePercent: 100)),
        ("--verify-interval", "0", Invocation(command: .run, verifyIntervalSeconds: 0)),
        ("--verify-interval", "31536000", Invocation(command: .run, verifyIntervalSeconds: 31_536_000)),
        ("--log-level", "warning", Invocation(command: .run, logLevel: .warning)),
        ("--keep-versions", "30d", Invocation(command: .run, keepVersionsSeconds: 2_592_000)),
        ("--keep-versions", "0", Invocation(command: .run, keepVersionsSeconds: 0)),
        ("--versions-dir", "~/m/v", Invocation(command: .run, versionsDirectory: b("~/m/v"))),
    ]

    @Test("a value flag takes '--flag value' and '--flag=value'", arguments: valueFlags)
    func valueFlagBothForms(_ flag: String, _ value: String, _ expected: Invocation) throws {
        #expect(try Self.parse(["run", flag, value]) == expected)
        #expect(try Self.parse(["run", "\(flag)=\(value)"]) == expected)
        #expect(try Self.parse([flag, value, "run"]) == expected)
    }

    static let switches: [(String, Invocation)] = [
        ("--no-delete", Invocation(command: .sync, noDelete: true)),
        ("--allow-mass-delete", Invocation(command: .sync, allowMassDelete: true)),
        ("--accept-new-source", Invocation(command: .sync, acceptNewSource: true)),
        ("--content", Invocation(command: .sync, content: true)),
        ("--foreground", Invocation(command: .sync, foreground: true)),
        ("-v", Invocation(command: .sync, logLevel: .debug)),
    ]

    @Test("a switch sets its field", arguments: switches)
    func switchSetsField(_ flag: String, _ expected: Invocation) throws {
        #expect(try Self.parse(["sync", flag]) == expected)
        #expect(try Self.parse([flag, "sync"]) == expected)
    }

    static let durations: [(String, Int)] = [
        ("30d", 2_592_000), ("12h", 43_200), ("90s", 90), ("2w", 1_209_600), ("5m", 300), ("0", 0), ("0d", 0),
        ("007d", 604_800), ("36500d", 3_153_600_000),
    ]

    @Test("--keep-versions takes a number and a unit, s m h d or w, in seconds; 0 is off", arguments: durations)
    func keepVersionsDurations(_ value: String, _ seconds: Int) throws {
        for command in ["sync", "run", "check"] {
            #expect(try Self.parse([command, "--keep-versions", value]).keepVersionsSeconds == seconds)
        }
        #expect(try Self.parse(["service", "install", "--keep-versions=\(value)"]).keepVersionsSeconds == seconds)
        // What service install writes reads back the same.
        #expect(try Self.parse(["run", "--keep-versions", ConfigFileParser.durationText(seconds)]).keepVersionsSeconds == seconds)
    }

    @Test("a duration is written in the largest unit that divides it")
    func durationText() {
        #expect(ConfigFileParser.durationText(2_592_000) == "30d")
        #expect(ConfigFileParser.durationText(1_209_600) == "2w")
        #expect(ConfigFileParser.durationText(43_200) == "12h")
        #expect(ConfigFileParser.durationText(90) == "90s")
        #expect(ConfigFileParser.durationText(120) == "2m")
        #expect(ConfigFileParser.durationText(0) == "0")
    }

    @Test("command-specific flags: --json, --name, --enable, --content")
    func commandSpecificFlags() throws {
        #expect(try Self.parse(["status", "--json"]) == Invocation(command: .status, json: true))
        #expect(try Self.parse(["service", "install", "--name", "photos", "--enable"])
            == Invocation(command: .serviceInstall, name: "photos", enable: true))
        #expect(try Self.parse(["service", "--name=a.b-c_d:1", "uninstall"])
            == Invocation(command: .serviceUninstall, name: "a.b-c_d:1"))
        #expect(try Self.parse(["check", "--content"]) == Invocation(command: .check, content: true))
    }

    @Test("service install takes the same options as run")
    func serviceInstallTakesRunOptions() throws {
        let inv = try Self.parse(["service", "install", "--source", "/s", "--mirror=/m", "--exclude", "x/", "--settle=5"])
        #expect(inv == Invocation(
            command: .serviceInstall, source: Self.b("/s"), mirror: Self.b("/m"), excludes: [Self.b("x/")],
            settleMilliseconds: 5))
    }

    @Test("excludes accumulate in order; other repeated options keep the last value")
    func repeatedOptions() throws {
        let inv = try Self.parse([
            "run", "--exclude", "a", "--exclude=b", "--source", "/1", "--source=/2",
            "-v", "--log-level", "error", "--settle", "1", "--settle=2",
        ])
        #expect(inv.excludes == [Self.b("a"), Self.b("b")])
        #expect(inv.source == Self.b("/2"))
        #expect(inv.logLevel == .error)
        #expect(inv.settleMilliseconds == 2)
        #expect(try Self.parse(["run", "--log-level=info", "-v"]).logLevel == .debug)
    }

    @Test("--mirror is repeatable: every one kept in order (several mirrors); one is the mirror as before")
    func repeatedMirrors() throws {
        let two = try Self.parse(["sync", "--mirror", "/a", "--source", "/s", "--mirror=usb"])
        #expect(two.mirrors == [Self.b("/a"), Self.b("usb")])
        #expect(two.mirror == Self.b("/a"))
        let one = try Self.parse(["sync", "--mirror", "/a"])
        #expect(one.mirrors == [Self.b("/a")] && one == Invocation(command: .sync, mirror: Self.b("/a")))
        #expect(try Self.parse(["sync"]).mirrors.isEmpty)
    }

    @Test("--state with two or more --mirror flags is refused: each mirror keeps its own state directory")
    func stateWithSeveralMirrors() throws {
        let error = #expect(throws: KeepSyncError.self) { try Self.parse(["sync", "--state", "/st", "--mirror", "/a", "--mirror", "/b"]) }
        #expect(error?.message == "--state takes one mirror, not 2: leave it out and each mirror keeps its own state directory")
        #expect(error.map(ExitCode.init(failure:)) == .usage)
        #expect(try Self.parse(["sync", "--state", "/st", "--mirror", "/a"]).state == Self.b("/st"))
    }

    @Test("values keep their bytes: '=', a leading '-', non-UTF-8")
    func valuesKeepBytes() throws {
        #expect(try Self.parse(["run", "--source=/a=b"]).source == Self.b("/a=b"))
        #expect(try Self.parse(["run", "--source", "-dir"]).source == Self.b("-dir"))
        #expect(try Self.parse(["run", "--exclude=--x"]).excludes == [Self.b("--x")])
        let raw: [UInt8] = [0x2F, 0x63, 0x61, 0x66, 0xE9]
        let inv = try CommandLineParser.parse([Self.b("run"), Self.b("--source"), raw, Self.b("--mirror=") + raw])
        #expect(inv.source == raw)
        #expect(inv.mirror == raw)
    }

    static let errors: [([String], String)] = [
        ([], "missing command"),
        (["--source", "/s"], "missing command"),
        (["foo"], "unknown command 'foo'"),
        (["-"], "unknown command '-'"),
        (["run", "--frobnicate"], "unknown option '--frobnicate'"),
        (["run", "--frobnicate=1"], "unknown option '--frobnicate'"),
        (["run", "--"], "unknown option '--'"),
        (["run", "-x"], "unknown option '-x'"),
        (["run", "-vv"], "unknown option '-vv'"),
        (["run", "--source"], "--source requires a value"),
        (["run", "--source", "--mirror", "/m"], "--source requires a value"),
        (["run", "--source="], "--source requires a value"),
        (["run", "--config"], "--config requires a value"),
        (["run", "--mirror"], "--mirror requires a value"),
        (["run", "--state"], "--state requires a value"),
        (["run", "--exclude"], "--exclude requires a value"),
        (["run", "--settle"], "--settle requires a value"),
        (["run", "--max-delay"], "--max-delay requires a value"),
        (["run", "--max-delete"], "--max-delete requires a value"),
        (["run", "--log-level"], "--log-level requires a value"),
        (["service", "install", "--name"], "--name requires a value"),
        (["run", "--settle", "abc"], "--settle: expected a number of milliseconds, got 'abc'"),
        (["run", "--settle=abc"], "--settle: expected a number of milliseconds, got 'abc'"),
        (["run", "--settle", "-5"], "--settle: expected a number of milliseconds, got '-5'"),
        (["run", "--settle", "86400001"], "--settle: expected a number of milliseconds from 0 to 86400000, got '86400001'"),
        (["run", "--max-delay", "0"], "--max-delay: expected a number of milliseconds from 1 to 86400000, got '0'"),
        (["run", "--max-delay", "2s"], "--max-delay: expected a number of milliseconds, got '2s'"),
        (["run", "--verify-interval"], "--verify-interval requires a value"),
        (["run", "--verify-interval", "1h"], "--verify-interval: expected a number of seconds from 0 to 31536000, got '1h'"),
        (["run", "--verify-interval", "31536001"],
         "--verify-interval: expected a number of seconds from 0 to 31536000, got '31536001'"),
        (["sync", "--verify-interval", "60"], "--verify-interval is only valid with 'run' and 'service install'"),
        (["check", "--verify-interval=60"], "--verify-interval is only valid with 'run' and 'service install'"),
        (["run", "--max-delete", "101"], "--max-delete: expected a percentage from 0 to 100, got '101'"),
        (["run", "--max-delete", "half"], "--max-delete: expected a percentage from 0 to 100, got 'half'"),
        (["run", "--keep-versions"], "--keep-versions requires a value"),
        (["sync", "--keep-versions", "30"], "--keep-versions: expected a duration like 30d, 12h or 90s, got '30'"),
        (["sync", "--keep-versions", "d"], "--keep-versions: expected a duration like 30d, 12h or 90s, got 'd'"),
        (["sync", "--keep-versions", "-1d"], "--keep-versions: expected a duration like 30d, 12h or 90s, got '-1d'"),
        (["run", "--keep-versions=1y"], "--keep-versions: expected a duration like 30d, 12h or 90s, got '1y'"),
        (["run", "--keep-versions", "1.5d"], "--keep-versions: expected a duration like 30d, 12h or 90s, got '1.5d'"),
        (["run", "--keep-versions", "30D"], "--keep-versions: expected a duration like 30d, 12h or 90s, got '30D'"),
        (["run", "--keep-versions", "30 d"], "--keep-versions: expected a duration like 30d, 12h or 90s, got '30 d'"),
        (["run", "--keep-versions", "36501d"], "--keep-versions: expected a duration up to 36500d, got '36501d'"),
        (["run", "--keep-versions", "99999999999999999999w"],
         "--keep-versions: expected a duration up to 36500d, got '99999999999999999999w'"),
        (["run", "--versions-dir"], "--versions-dir requires a value"),
        (["run", "--versions-dir="], "--versions-dir requires a value"),
        (["run", "--log-level", "loud"], "--log-level: expected error, warning, info or debug, got 'loud'"),
        (["run", "--exclude", "[ab"], "--exclude: bad exclude pattern '[ab': unterminated '['"),
        (["run", "--no-delete=yes"], "--no-delete takes no value"),
        (["run", "--foreground=false"], "--foreground takes no value"),
        (["service"], "service: expected 'install' or 'uninstall'"),
        (["service", "start"], "service: expected 'install' or 'uninstall', got 'start'"),
        (["run", "extra"], "unexpected argument 'extra'"),
        (["service", "install", "extra"], "unexpected argument 'extra'"),
        (["run", "--json"], "--json is only valid with 'status' and 'versions'"),
        (["sync", "--json"], "--json is only valid with 'status' and 'versions'"),
        (["restore"], "restore: expected the PATH to restore"),
        (["restore", "a", "b"], "unexpected argument 'b'"),
        (["versions", "a", "b"], "unexpected argument 'b'"),
        (["restore", "a", "--json"], "--json is only valid with 'status' and 'versions'"),
        (["versions", "--at", "2h ago"], "--at is only valid with 'restore'"),
        (["sync", "--force"], "--force is only valid with 'restore'"),
        (["versions", "--to", "/tmp"], "--to is only valid with 'restore'"),
        (["restore", "a", "--at"], "--at requires a value"),
        (["restore", "a", "--at", "yesterday"], "--at: \(VersionTime.expectation), got 'yesterday'"),
        (["restore", "a", "--at=2026-02-30 10:00"], "--at: \(VersionTime.expectation), got '2026-02-30 10:00'"),
        (["restore", "a", "--at", "2h"], "--at: \(VersionTime.expectation), got '2h'"),
        (["restore", "a", "--force=yes"], "--force takes no value"),
        (["run", "--content"], "--content is only valid with 'check' or 'sync'"),
        (["status", "--content"], "--content is only valid with 'check' or 'sync'"),
        (["run", "--name", "x"], "--name is only valid with 'service'"),
        (["run", "--enable"], "--enable is only valid with 'service install'"),
        (["service", "uninstall", "--enable"], "--enable is only valid with 'service install'"),
        (["service", "install", "--name", "a/b"], "--name: expected letters, digits, '-', '_', '.' or ':', got 'a/b'"),
        (["service", "install", "--name=a b"], "--name: expected letters, digits, '-', '_', '.' or ':', got 'a b'"),
        (["service", "install", "--name", "x@y"], "--name: expected letters, digits, '-', '_', '.' or ':', got 'x@y'"),
    ]

    @Test("each error is one line naming the flag or word", arguments: errors)
    func errorMessages(_ args: [String], _ message: String) {
        #expect(throws: KeepSyncError(.configuration, message)) {
            try Self.parse(args)
        }
    }

    @Test("an unknown option shows control bytes escaped")
    func unknownOptionEscapesBytes() {
        #expect(throws: KeepSyncError(.configuration, "unknown option '--a\\x0ab'")) {
            try Self.parse(["run", "--a\nb"])
        }
    }

    @Test("usage lists every command and option of the contract")
    func usageListsEverything() {
        let usage = CommandLineParser.usage
        for heading in ["USAGE:", "COMMANDS:", "OPTIONS:"] { #expect(usage.contains(heading)) }
        let words = [
            "run", "sync", "check", "status", "versions [PATH]", "restore PATH", "service install", "service uninstall",
            "--at <time>", "--to <dir>", "--force",
            "--config <file>", "--source <dir>", "--mirror <dir>", "--state <dir>", "--exclude <glob>",
            "--settle <ms>", "--max-delay <ms>", "--no-delete", "--max-delete <pct>", "--allow-mass-delete",
            "--accept-new-source", "--content", "--keep-versions <duration>", "--versions-dir <dir>", "--verify-interval <sec>", "--log-level <level>", "-v ", "--foreground", "--json",
            "--name <name>", "--enable", "--help", "--version", "--man", "--completion <shell>",
        ]
        for word in words { #expect(usage.contains("  \(word)"), "usage lacks \(word)") }
        #expect(usage.split(separator: "\n").allSatisfy { $0.count <= 100 })
    }

    @Test("--help, the manual page and the bash completions list exactly the options the parser takes")
    func helpManualAndCompletionsFollowTheParser() throws {
        let parsed = Set(CommandLineParser.parsedFlags)
        let table = Set(OptionTable.options.map(\.flag))
        #expect(parsed == table, "parser only: \(parsed.subtracting(table).sorted()), table only: \(table.subtracting(parsed).sorted())")
        // Each document, read back: every flag it names.
        func flags(_ text: String, _ pattern: Regex<(Substring, Substring)>) -> Set<String> {
            Set(text.matches(of: pattern).map { String($0.output.1) })
        }
        let usage = flags(CommandLineParser.usage, #/(?m)^  (-{1,2}[a-z][a-z-]*)/#)
        let manual = flags(HelpText.manual.replacingAll("\\-", with: "-"), #/(?m)^\.B (-{1,2}[a-z][a-z-]*)/#)
        let completion = Set(try #require(HelpText.bashCompletion.firstMatch(of: #/compgen -W "(-[^"]*)"/#)).output.1
            .split(separator: " ").map(String.init)).subtracting(["-h"])
        #expect(usage == parsed, "--help: \(usage.symmetricDifference(parsed).sorted())")
        #expect(manual == parsed, "the manual: \(manual.symmetricDifference(parsed).sorted())")
        #expect(completion == parsed, "the completions: \(completion.symmetricDifference(parsed).sorted())")
        // Each option given its value parses; --man and --completion belong to help.
        #expect(try CommandLineParser.parse(["help", "--man"].map { Array($0.utf8) }).manual)
        #expect(try CommandLineParser.parse(["help", "--completion", "bash"].map { Array($0.utf8) }).completionShell == "bash")
        #expect(throws: KeepSyncError.self) { try CommandLineParser.parse(["sync", "--man"].map { Array($0.utf8) }) }
        #expect(throws: KeepSyncError.self) { try CommandLineParser.parse(["help", "--completion", "fish"].map { Array($0.utf8) }) }
    }

    // MARK: - merge

    static let home = Array("/home/ann".utf8)

    static let file = Configuration(
        source: b("/file/src"), mirror: b("/file/mirror"), state: b("/file/state"),
        excludes: [b("*.o")], settleMilliseconds: 100, maxDelayMilliseconds: 5000,
        deleteEnabled: true, maxDeletePercent: 30, logLevel: .warning)

    @Test("without flags the file's configuration stands")
    func mergeWithoutFlags() {
        #expect(CommandLineParser.merge(file: Self.file, invocation: Invocation(command: .run), home: Self.home) == Self.file)
    }

    @Test("every flag overrides the file; excludes are added after the file's")
    func mergeFlagsOverride() throws {
        let inv = try Self.parse([
            "run", "--source", "/s", "--mirror", "/m", "--state", "/st", "--exclude", "tmp/",
            "--settle", "0", "--max-delay", "7", "--no-delete", "--max-delete", "90", "--log-level", "error",
            "--verify-interval", "0", "--keep-versions", "12h", "--versions-dir", "~/m/.v",
        ])
        let merged = CommandLineParser.merge(file: Self.file, invocation: inv, home: Self.home)
        #expect(merged == Configuration(
            source: Self.b("/s"), mirror: Self.b("/m"), state: Self.b("/st"), excludes: [Self.b("*.o"), Self.b("tmp/")],
            settleMilliseconds: 0, maxDelayMilliseconds: 7, deleteEnabled: false, maxDeletePercent: 90,
            logLevel: .error, verifyIntervalSeconds: 0, keepVersionsSeconds: 43_200, versionsDirectory: Self.b("/home/ann/m/.v")))
    }

    @Test("flags fill in what the file leaves unset, with '~' expanded")
    func mergeExpandsTilde() throws {
        let inv = try Self.parse(["run", "--source=~/src", "--mirror", "~", "--state=~other/x"])
        let merged = CommandLineParser.merge(file: Configuration(), invocation: inv, home: Self.home)
        #expect(merged.source == Self.b("/home/ann/src"))
        #expect(merged.mirror == Self.b("/home/ann"))
        #expect(merged.state == Self.b("~other/x"))
        #expect(merged.excludes.isEmpty)
        #expect(merged.deleteEnabled)
        #expect(merged.keepVersionsSeconds == 0 && merged.versionsDirectory == nil)
    }

    @Test("--keep-versions 0 turns off the file's keep_versions")
    func mergeKeepVersionsZero() throws {
        let file = Configuration(keepVersionsSeconds: 86_400, versionsDirectory: Self.b("/m/v"))
        let off = CommandLineParser.merge(file: file, invocation: try Self.parse(["run", "--keep-versions", "0"]), home: Self.home)
        #expect(off.keepVersionsSeconds == 0 && off.versionsDirectory == Self.b("/m/v"))
        #expect(CommandLineParser.merge(file: file, invocation: try Self.parse(["run"]), home: Self.home) == file)
    }

    @Test("no --no-delete leaves a file's delete = false alone")
    func mergeKeepsFileDeleteFalse() throws {
        var file = Configuration()
        file.deleteEnabled = false
        let merged = CommandLineParser.merge(file: file, invocation: try Self.parse(["sync"]), home: Self.home)
        #expect(!merged.deleteEnabled)
    }

    @Test("-v raises the file's log level to debug")
    func mergeVerbose() throws {
        let merged = CommandLineParser.merge(file: Self.file, invocation: try Self.parse(["run", "-v"]), home: Self.home)
        #expect(merged.logLevel == .debug)
    }
}
