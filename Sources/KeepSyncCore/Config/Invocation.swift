/// One parsed command line: the command and the flags given, which override the file.
public struct Invocation: Sendable, Equatable {
    /// What to do.
    public enum Command: Sendable, Equatable, CaseIterable {
        /// Watch and mirror until stopped.
        case run
        /// One full verify-and-repair pass.
        case sync
        /// Compare mirror with source, change nothing.
        case check
        /// Print what the agent knows.
        case status
        /// List the kept versions (`versions [PATH]`).
        case versions
        /// Bring a kept version back (`restore PATH`).
        case restore
        /// Write a systemd user unit.
        case serviceInstall
        /// Remove the systemd user unit.
        case serviceUninstall
        /// Print usage to stdout.
        case help
        /// Print the version.
        case version
    }

    /// The command.
    public var command: Command
    /// `--config FILE`, as given.
    public var configFile: [UInt8]?
    /// `--source DIR`, as given.
    public var source: [UInt8]?
    /// Every `--mirror DIR`, as given, in order (several mirrors of one source).
    public var mirrors: [[UInt8]]
    /// The first `--mirror`; setting it replaces them all.
    public var mirror: [UInt8]? {
        get { mirrors.first }
        set { mirrors = newValue.map { [$0] } ?? [] }
    }
    /// `--state DIR`, as given.
    public var state: [UInt8]?
    /// `--exclude GLOB`, in order; added to the file's.
    public var excludes: [[UInt8]]
    /// `--settle MS`.
    public var settleMilliseconds: Int?
    /// `--max-delay MS`.
    public var maxDelayMilliseconds: Int?
    /// `--verify-interval SEC` (`run`).
    public var verifyIntervalSeconds: Int?
    /// `--ssh COMMAND`.
    public var sshCommand: [UInt8]?
    /// `--rsync-path PATH`.
    public var rsyncPath: [UInt8]?
    /// `--keep-versions DURATION`, in seconds (0 is off).
    public var keepVersionsSeconds: Int?
    /// `--versions-dir DIR`, as given.
    public var versionsDirectory: [UInt8]?
    /// `--no-delete`.
    public var noDelete: Bool
    /// `--max-delete PCT`.
    public var maxDeletePercent: Int?
    /// `--allow-mass-delete`.
    public var allowMassDelete: Bool
    /// `--accept-new-source`.
    public var acceptNewSource: Bool
    /// `--accept-new-mirror`.
    public var acceptNewMirror: Bool
    /// `--content` (`check` and `sync`).
    public var content: Bool
    /// `--log-level LEVEL` or `-v` (debug); the last one wins.
    public var logLevel: LogLevel?
    /// `--foreground`; nil means decide by whether stderr is a terminal.
    public var foreground: Bool?
    /// `--json` (`status`, `versions`).
    public var json: Bool
    /// `versions [PATH]`, `restore PATH`: the path, as given.
    public var path: [UInt8]?
    /// `--at TIME` (`restore`).
    public var at: VersionTime?
    /// `--to DIR` (`restore`), as given.
    public var restoreInto: [UInt8]?
    /// `--force` (`restore`).
    public var force = false
    /// `--name NAME` (`service`).
    public var name: String?
    /// `--enable` (`service install`).
    public var enable: Bool
    /// `--man` (`help`): the manual page instead of the usage.
    public var manual = false
    /// `--completion SHELL` (`help`): that shell's completions.
    public var completionShell: String?

    /// An invocation; everything but the command defaults to "not given".
    public init(
        command: Command,
        configFile: [UInt8]? = nil,
        source: [UInt8]? = nil,
        mirror: [UInt8]? = nil,
        state: [UInt8]? = nil,
        excludes: [[UInt8]] = [],
        settleMilliseconds: Int? = nil,
        maxDelayMilliseconds: Int? = nil,
        verifyIntervalSeconds: Int? = nil,
        sshCommand: [UInt8]? = nil,
        rsyncPath: [UInt8]? = nil,
        noDelete: Bool = false,
        maxDeletePercent: Int? = nil,
        allowMassDelete: Bool = false,
        acceptNewSource: Bool = false,
        acceptNewMirror: Bool = false,
        content: Bool = false,
        logLevel: LogLevel? = nil,
        foreground: Bool? = nil,
        json: Bool = false,
        name: String? = nil,
        enable: Bool = false,
        keepVersionsSeconds: Int? = nil,
        versionsDirectory: [UInt8]? = nil
    ) {
        self.command = command
        self.configFile = configFile
        self.source = source
        self.mirrors = mirror.map { [$0] } ?? []
        self.state = state
        self.excludes = excludes
        self.settleMilliseconds = settleMilliseconds
        self.maxDelayMilliseconds = maxDelayMilliseconds
        self.verifyIntervalSeconds = verifyIntervalSeconds
        self.sshCommand = sshCommand
        self.rsyncPath = rsyncPath
        self.noDelete = noDelete
        self.maxDeletePercent = maxDeletePercent
        self.allowMassDelete = allowMassDelete
        self.acceptNewSource = acceptNewSource
        self.acceptNewMirror = acceptNewMirror
        self.content = content
        self.logLevel = logLevel
        self.foreground = foreground
        self.json = json
        self.name = name
        self.enable = enable
        self.keepVersionsSeconds = keepVersionsSeconds
        self.versionsDirectory = versionsDirectory
    }
}

extension Invocation.Command {
    /// The command as typed: `sync`, `service install`.
    public var word: String {
        switch self {
        case .run: "run"
        case .sync: "sync"
        case .check: "check"
        case .status: "status"
        case .versions: "versions"
        case .restore: "restore"
        case .serviceInstall: "service install"
        case .serviceUninstall: "service uninstall"
        case .help: "help"
        case .version: "--version"
        }
    }
}
