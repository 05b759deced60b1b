/// Parses `keepsync` arguments (bytes, without argv[0]) and merges them over the file.
///
/// Options may come before or after the command and take `--flag value` or `--flag=value`;
/// in the first form a following argument that starts with `--` is not taken as the value
/// (write `--exclude=--x` for that). A repeated option keeps its last value, except
/// `--exclude` and `--mirror` (several mirrors), which accumulate; `--state` takes one mirror. `-h`/`--help` anywhere wins, then `--version`.
/// `--json`, `--content`, `--name`, `--enable`, `--at`, `--to` and `--force` are refused
/// outside their commands. `versions` takes one PATH or none, `restore` one.
public enum CommandLineParser {
    /// The help text, printed by `--help` (made from `OptionTable`).
    public static var usage: String { HelpText.usage }

    /// Parses `arguments`; errors are `.configuration`, one line, naming the flag.
    public static func parse(_ arguments: [[UInt8]]) throws -> Invocation {
        if arguments.isEmpty { throw usageError("missing command") }
        if arguments.contains(where: { $0 == Array("--help".utf8) || $0 == Array("-h".utf8) }) {
            return Invocation(command: .help)
        }
        if arguments.contains(Array("--version".utf8)) { return Invocation(command: .version) }

        var invocation = Invocation(command: .run)
        var positionals: [[UInt8]] = []
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            i += 1
            if argument.starts(with: [0x2D, 0x2D]) {
                var name = argument
                var inline: [UInt8]?
                if let equals = argument.firstIndex(of: 0x3D) {
                    name = Array(argument[..<equals])
                    inline = Array(argument[(equals + 1)...])
                }
                let flag = String(decoding: name, as: UTF8.self)
                guard let option = Option(rawValue: flag) else {
                    throw usageError("unknown option '\(ByteEscaping.escapeControls(name))'")
                }
                var value: [UInt8] = []
                if option.takesValue {
                    if let inline {
                        value = inline
                    } else if i < arguments.count, !arguments[i].starts(with: [0x2D, 0x2D]) {
                        value = arguments[i]
                        i += 1
                    }
                    if value.isEmpty { throw usageError("\(flag) requires a value") }
                    // `--at 2h ago` unquoted: `ago` after a duration belongs to the value.
                    if option == .at, inline == nil, i < arguments.count, arguments[i] == Array("ago".utf8),
                       case .success = ConfigFileParser.duration(value) {
                        value += Array(" ago".utf8)
                        i += 1
                    }
                } else if inline != nil {
                    throw usageError("\(flag) takes no value")
                }
                try apply(option, value, to: &invocation)
            } else if argument.first == 0x2D, argument.count > 1 {
                guard argument == [0x2D, 0x76] else {
                    throw usageError("unknown option '\(ByteEscaping.escapeControls(argument))'")
                }
                invocation.logLevel = .debug
            } else {
                positionals.append(argument)
            }
        }

        (invocation.command, invocation.path) = try command(from: positionals)
        try checkScope(invocation)
        return invocation
    }

    /// The configuration to run with: `invocation`'s flags over `file`; excludes are
    /// appended; flag paths get `~` expanded with `home`. The mirror is the first `--mirror`
    /// (`SettingsResolver.eachMirror` takes each in turn).
    public static func merge(file: Configuration, invocation: Invocation, home: [UInt8]) -> Configuration {
        var config = file
        if let source = invocation.source { config.source = ConfigFileParser.expandingHome(source, home: home) }
        if let mirror = invocation.mirror { config.mirror = ConfigFileParser.expandingHome(mirror, home: home) }
        if let state = invocation.state { config.state = ConfigFileParser.expandingHome(state, home: home) }
        config.excludes += invocation.excludes
        if let n = invocation.settleMilliseconds { config.settleMilliseconds = n }
        if let n = invocation.maxDelayMilliseconds { config.maxDelayMilliseconds = n }
        if invocation.noDelete { config.deleteEnabled = false }
        if let n = invocation.maxDeletePercent { config.maxDeletePercent = n }
        if let level = invocation.logLevel { config.logLevel = level }
        if let n = invocation.verifyIntervalSeconds { config.verifyIntervalSeconds = n }
        if let ssh = invocation.sshCommand { config.sshCommand = ssh }
        if let path = invocation.rsyncPath { config.rsyncPath = path }
        if let n = invocation.keepVersionsSeconds { config.keepVersionsSeconds = n }
        if let dir = invocation.versionsDirectory { config.versionsDirectory = ConfigFileParser.expandingHome(dir, home: home) }
        return config
    }

    // MARK: - Private

    private enum Option: String, CaseIterable {
        case config = "--config"
        case source = "--source"
        case mirror = "--mirror"
        case state = "--state"
        case exclude = "--exclude"
        case settle = "--settle"
        case maxDelay = "--max-delay"
        case noDelete = "--no-delete"
        case maxDelete = "--max-delete"
        case allowMassDelete = "--allow-mass-delete"
        case acceptNewSource = "--accept-new-source"
        case acceptNewMirror = "--accept-new-mirror"
        case content = "--content"
        case keepVersions = "--keep-versions"
        case versionsDir = "--versions-dir"
        case verifyInterval = "--verify-interval"
        case ssh = "--ssh"
        case rsyncPath = "--rsync-path"
        case logLevel = "--log-level"
        case foreground = "--foreground"
        case json = "--json"
        case at = "--at"
        case to = "--to"
        case force = "--force"
        case name = "--name"
        case enable = "--enable"
        case man = "--man"
        case completion = "--completion"

        /// From the table: an option with a value's name takes a value.
        var takesValue: Bool { OptionTable.option(rawValue)?.value != nil }
    }

    /// The long options the parser knows (`--help` and `--version` are read before it, `-v`
    /// and `-h` are short): what `OptionTable` must list.
    static var parsedFlags: [String] { Option.allCases.map(\.rawValue) + ["--help", "--version", "-v"] }

    private static func usageError(_ message: String) -> KeepSyncError {
        KeepSyncError(.configuration, message)
    }

    private static func apply(_ option: Option, _ value: [UInt8], to inv: inout Invocation) throws {
        let flag = option.rawValue
        func unwrap(_ result: Result<Int, ConfigFileParser.ValueError>) throws -> Int {
            switch result {
            case .success(let n): return n
            case .failure(let reason): throw usageError("\(flag): \(reason.text)")
            }
        }
        switch option {
        case .config: inv.configFile = value
        case .source: inv.source = value
        case .mirror: inv.mirrors.append(value)
        case .state: inv.state = value
        case .exclude:
            do {
                _ = try ExcludeMatcher(patterns: [value])
            } catch let error as KeepSyncError {
                throw usageError("\(flag): \(error.message)")
            }
            inv.excludes.append(value)
        case .settle: inv.settleMilliseconds = try unwrap(ConfigFileParser.milliseconds(value, minimum: 0))
        case .maxDelay: inv.maxDelayMilliseconds = try unwrap(ConfigFileParser.milliseconds(value, minimum: 1))
        case .maxDelete: inv.maxDeletePercent = try unwrap(ConfigFileParser.percent(value))
        case .verifyInterval: inv.verifyIntervalSeconds = try unwrap(ConfigFileParser.seconds(value))
        case .keepVersions: inv.keepVersionsSeconds = try unwrap(ConfigFileParser.duration(value))
        case .versionsDir: inv.versionsDirectory = value
        case .ssh:
            if case .failure(let reason) = RemoteTarget.words(value) { throw usageError("\(flag): \(reason.text)") }
            inv.sshCommand = value
        case .rsyncPath:
            guard let first = value.first, first != UInt8(ascii: "-") else { throw usageError("\(flag): expected a path") }
            inv.rsyncPath = value
        case .noDelete: inv.noDelete = true
        case .allowMassDelete: inv.allowMassDelete = true
        case .acceptNewSource: inv.acceptNewSource = true
        case .acceptNewMirror: inv.acceptNewMirror = true
        case .content: inv.content = true
        case .foreground: inv.foreground = true
        case .json: inv.json = true
        case .at:
            guard let time = VersionTime(parsing: value) else {
                throw usageError("\(flag): \(VersionTime.expectation), got '\(ByteEscaping.escapeControls(value))'")
            }
            inv.at = time
        case .to: inv.restoreInto = value
        case .force: inv.force = true
        case .enable: inv.enable = true
        case .man: inv.manual = true
        case .completion:
            guard value == Array("bash".utf8) else {
                throw usageError("\(flag): expected 'bash', got '\(ByteEscaping.escapeControls(value))'")
            }
            inv.completionShell = "bash"
        case .logLevel:
            guard let level = LogLevel(bytes: value) else {
                throw usageError(
                    "\(flag): \(ConfigFileParser.logLevelExpectation), got '\(ByteEscaping.escapeControls(value))'")
            }
            inv.logLevel = level
        case .name:
            guard value.allSatisfy(isNameByte), value.count <= 200 else {
                throw usageError(
                    "\(flag): expected letters, digits, '-', '_', '.' or ':', got '\(ByteEscaping.escapeControls(value))'")
            }
            inv.name = String(decoding: value, as: UTF8.self)
        }
    }

    /// Bytes systemd allows in a unit instance name (without `\` escapes).
    private static func isNameByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
            || b == 0x2D || b == 0x5F || b == 0x2E || b == 0x3A
    }

    private static func command(from positionals: [[UInt8]]) throws -> (Invocation.Command, [UInt8]?) {
        guard let first = positionals.first else { throw usageError("missing command") }
        let word = String(decoding: first, as: UTF8.self)
        var used = 1
        let command: Invocation.Command
        var path: [UInt8]?
        switch word {
        case "run": command = .run
        case "sync": command = .sync
        case "check": command = .check
        case "status": command = .status
        case "help": command = .help
        case "versions":
            command = .versions
            if positionals.count > 1 {
                path = positionals[1]
                used = 2
            }
        case "restore":
            guard positionals.count > 1 else { throw usageError("restore: expected the PATH to restore") }
            command = .restore
            path = positionals[1]
            used = 2
        case "service":
            guard positionals.count > 1 else { throw usageError("service: expected 'install' or 'uninstall'") }
            switch String(decoding: positionals[1], as: UTF8.self) {
            case "install": command = .serviceInstall
            case "uninstall": command = .serviceUninstall
            default:
                throw usageError(
                    "service: expected 'install' or 'uninstall', got '\(ByteEscaping.escapeControls(positionals[1]))'")
            }
            used = 2
        default:
            throw usageError("unknown command '\(ByteEscaping.escapeControls(first))'")
        }
        if positionals.count > used {
            throw usageError("unexpected argument '\(ByteEscaping.escapeControls(positionals[used]))'")
        }
        return (command, path)
    }

    /// Refuses options given to a command they do not apply to.
    private static func checkScope(_ inv: Invocation) throws {
        if inv.command == .help {
            if inv.manual && inv.completionShell != nil { throw usageError("help: give --man or --completion, not both") }
            return
        }
        if inv.manual { throw usageError("--man is only valid with 'help'") }
        if inv.state != nil, inv.mirrors.count > 1 {
            throw usageError("--state takes one mirror, not \(inv.mirrors.count): leave it out and each mirror keeps its own state directory")
        }
        if inv.completionShell != nil { throw usageError("--completion is only valid with 'help'") }
        if inv.json, inv.command != .status, inv.command != .versions {
            throw usageError("--json is only valid with 'status' and 'versions'")
        }
        for (given, flag) in [(inv.at != nil, "--at"), (inv.restoreInto != nil, "--to"), (inv.force, "--force")]
            where given && inv.command != .restore {
            throw usageError("\(flag) is only valid with 'restore'")
        }
        if inv.content, inv.command != .check, inv.command != .sync {
            throw usageError("--content is only valid with 'check' or 'sync'")
        }
        if inv.verifyIntervalSeconds != nil, inv.command != .run, inv.command != .serviceInstall {
            throw usageError("--verify-interval is only valid with 'run' and 'service install'")
        }
        if inv.name != nil, inv.command != .serviceInstall, inv.command != .serviceUninstall {
            throw usageError("--name is only valid with 'service'")
        }
        if inv.enable, inv.command != .serviceInstall {
            throw usageError("--enable is only valid with 'service install'")
        }
    }
}
