/// What keepsync runs with: the configuration file merged with command-line flags.
/// Paths are bytes, `~`-expanded but not resolved.
public struct Configuration: Sendable, Equatable {
    /// The folder to watch.
    public var source: [UInt8]?
    /// The mirror folder.
    public var mirror: [UInt8]?
    /// The state directory; nil means the XDG default.
    public var state: [UInt8]?
    /// Exclude patterns, file first, then flags.
    public var excludes: [[UInt8]]
    /// Quiet time after the last event on a path before it is copied.
    public var settleMilliseconds: Int
    /// A path that never goes quiet is still copied this often.
    public var maxDelayMilliseconds: Int
    /// Whether deletions propagate to the mirror.
    public var deleteEnabled: Bool
    /// The mass-delete brake, in percent of the mirror's entries (100 turns it off).
    public var maxDeletePercent: Int
    /// How much to log.
    public var logLevel: LogLevel
    /// `run`: seconds between full passes that repair drift in the mirror; 0 is off.
    public var verifyIntervalSeconds: Int
    /// Remote mirrors: the ssh command line (`ssh_command`, `--ssh`), as typed; nil: `ssh`.
    public var sshCommand: [UInt8]?
    /// Remote mirrors: the rsync program on the remote host; nil: `rsync`.
    public var rsyncPath: [UInt8]?
    /// How long the mirror keeps what the source replaced or deleted, in seconds
    /// (`keep_versions`, `--keep-versions`); 0 is off (SPEC "Versions").
    public var keepVersionsSeconds: Int
    /// Where versions are kept (`versions_dir`, `--versions-dir`); nil: `MIRROR/.keepsync-versions`.
    public var versionsDirectory: [UInt8]?
    /// The file's `[mirror NAME]` sections, in file order (empty: `mirror` is the one mirror).
    public var sections: [MirrorSection]

    /// The defaults, written here only: the help text shows these, and a test holds the
    /// example file (etc/keepsync.conf) to them.
    public static let defaultSettleMilliseconds = 20
    /// Default of `maxDelayMilliseconds`.
    public static let defaultMaxDelayMilliseconds = 2000
    /// Default of `maxDeletePercent`.
    public static let defaultMaxDeletePercent = 50
    /// Default of `logLevel`.
    public static let defaultLogLevel = LogLevel.info
    /// Default of `verifyIntervalSeconds`.
    public static let defaultVerifyIntervalSeconds = 3600
    /// Default of `keepVersionsSeconds`: versions off.
    public static let defaultKeepVersionsSeconds = 0

    /// A configuration; every argument has the documented default.
    public init(
        source: [UInt8]? = nil,
        mirror: [UInt8]? = nil,
        state: [UInt8]? = nil,
        excludes: [[UInt8]] = [],
        settleMilliseconds: Int = Configuration.defaultSettleMilliseconds,
        maxDelayMilliseconds: Int = Configuration.defaultMaxDelayMilliseconds,
        deleteEnabled: Bool = true,
        maxDeletePercent: Int = Configuration.defaultMaxDeletePercent,
        logLevel: LogLevel = Configuration.defaultLogLevel,
        verifyIntervalSeconds: Int = Configuration.defaultVerifyIntervalSeconds,
        sshCommand: [UInt8]? = nil,
        rsyncPath: [UInt8]? = nil,
        keepVersionsSeconds: Int = Configuration.defaultKeepVersionsSeconds,
        versionsDirectory: [UInt8]? = nil,
        sections: [MirrorSection] = []
    ) {
        self.source = source
        self.mirror = mirror
        self.state = state
        self.excludes = excludes
        self.settleMilliseconds = settleMilliseconds
        self.maxDelayMilliseconds = maxDelayMilliseconds
        self.deleteEnabled = deleteEnabled
        self.maxDeletePercent = maxDeletePercent
        self.logLevel = logLevel
        self.verifyIntervalSeconds = verifyIntervalSeconds
        self.sshCommand = sshCommand
        self.rsyncPath = rsyncPath
        self.keepVersionsSeconds = keepVersionsSeconds
        self.versionsDirectory = versionsDirectory
        self.sections = sections
    }
}
