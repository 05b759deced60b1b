/// Parses `keepsync` arguments (bytes, without argv[0]) and merges them over the file.
///
/// Options may come before or after the command and take `--flag value` or `--flag=value`;
/// in the first form a following argument that starts with `--` is not taken as the value
/// (write `--exclude=--x` for that). A repeated option keeps its last value, except
/// `--exclude`, which accumulates. `-h`/`--help` anywhere wins, then `--version`.
/// `--json`, `--content`, `--name` and `--enable` are refused outside their commands.
public enum CommandLineParser {
    /// The help text, printed by `--help`.
    public static let usage: String = """
        OVERVIEW: Keep a mirror directory identical to a source directory, continuously.

        USAGE: keepsync <command> [<options>]

        COMMANDS:
          run                     Watch the source and mirror every change until stopped.
          sync                    Run one full verify-and-repair pass, then exit.
          check                   Compare the mirror with the source; change nothing.
          status                  Show what the agent knows, from its state.
          service install         Write a systemd user unit (also --name, --enable).
          service uninstall       Remove the systemd user unit (also --name).

        OPTIONS:
          --config <file>         Configuration file.
                                  (default: $XDG_CONFIG_HOME/keepsync/keepsync.conf if it exists)
          --source <dir>          The folder to watch. (required)
          --mirror <dir>          The mirror; receives the source's contents. (required)
                                  [USER@]HOST:DIR: a directory on another machine, over ssh.
          --state <dir>           Records, lock and status file.
                                  (default: $XDG_STATE_HOME/keepsync/<hash of source and mirror>)
          --exclude <glob>        Skip matching paths, gitignore-style. (repeatable)
          --settle <ms>           Quiet time before a changed path is copied. (default: \(Configuration.defaultSettleMilliseconds))
          --max-delay <ms>        A busy path is still copied this often. (default: \(Configuration.defaultMaxDelayMilliseconds))
          --no-delete             Never remove anything from the mirror.
          --max-delete <pct>      Hold a scan's deletions above this percentage of the
                                  mirror's entries; 100 turns the brake off. (default: \(Configuration.defaultMaxDeletePercent))
          --allow-mass-delete     Lift the mass-delete brake for this invocation.
          --accept-new-source     Accept a source root whose identity changed.
          --accept-new-mirror     Accept a mirror root whose identity changed (a new disk).
          --content               check, sync: also compare file contents byte by byte.
          --verify-interval <sec> run: a full pass this often, repairing what changed in
                                  the mirror behind its back; 0 turns it off. (default: \(Configuration.defaultVerifyIntervalSeconds))
          --ssh <command>         Remote mirrors: the ssh command line. (default: ssh)
          --rsync-path <path>     Remote mirrors: the rsync program on the remote host.
                                  (default: rsync)
          --log-level <level>     error, warning, info or debug. (default: \(Configuration.defaultLogLevel))
          -v                      Same as --log-level debug.
          --foreground            Human-readable log lines.
                                  (default: on when stderr is a terminal)
          --json                  status: print the status file as JSON.
          --name <name>           service: the instance name (keepsync@<name>.service).
          --enable                service install: also enable the unit.
          -h, --help              Show help information.
          --version               Show the version.

        A flag overrides the configuration file.

        """

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

        invocation.command = try command(from: positionals)
        try checkScope(invocation)
        return invocation
    }

    /// The configuration to run with: `invocation`'s flags over `file`; excludes are
    /// appended; flag paths get `~` expanded with `home`.
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
        return config
    }

    // MARK: - Private

    private enum Option: String {
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
        case verifyInterval = "--verify-interval"
        case ssh = "--ssh"
        case rsyncPath = "--rsync-path"
        case logLevel = "--log-level"
        case foreground = "--foreground"
        case json = "--json"
        case name = "--name"
        case enable = "--enable"

        var takesValue: Bool {
            switch self {
            case .config, .source, .mirror, .state, .exclude, .settle, .maxDelay, .maxDelete, .logLevel, .name,
                 .verifyInterval, .ssh, .rsyncPath:
                true
            case .noDelete, .allowMassDelete, .acceptNewSource, .acceptNewMirror, .content, .foreground, .json, .enable:
                false
            }
        }
    }

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
        case .mirror: inv.mirror = value
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
        case .enable: inv.enable = true
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

    private static func command(from positionals: [[UInt8]]) throws -> Invocation.Command {
        guard let first = positionals.first else { throw usageError("missing command") }
        let word = String(decoding: first, as: UTF8.self)
        var used = 1
        let command: Invocation.Command
        switch word {
        case "run": command = .run
        case "sync": command = .sync
        case "check": command = .check
        case "status": command = .status
        case "help": command = .help
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
        return command
    }

    /// Refuses options given to a command they do not apply to.
    private static func checkScope(_ inv: Invocation) throws {
        if inv.command == .help { return }
        if inv.json, inv.command != .status { throw usageError("--json is only valid with 'status'") }
        if inv.content, inv.command != .check, inv.command != .sync {
            throw usageError("--content is only valid with 'check' or 'sync'")
        }
        if inv.verifyIntervalSeconds != nil, inv.command != .run {
            throw usageError("--verify-interval is only valid with 'run'")
        }
        if inv.name != nil, inv.command != .serviceInstall, inv.command != .serviceUninstall {
            throw usageError("--name is only valid with 'service'")
        }
        if inv.enable, inv.command != .serviceInstall {
            throw usageError("--enable is only valid with 'service install'")
        }
    }
}
