/// Everything a command needs, resolved: the configuration and flags merged, the paths
/// absolute and checked apart.
public struct Settings: Sendable {
    /// The merged configuration.
    public var configuration: Configuration
    /// The command line.
    public var invocation: Invocation
    /// The source's absolute path.
    public var source: [UInt8]
    /// The mirror's absolute path; for a remote mirror, `[user@]host:dir`.
    public var mirror: [UInt8]
    /// The mirror's name in messages and `status`: its section's NAME, or for a mirror
    /// given by `--mirror` or `mirror =`, its path (for display).
    public var mirrorLabel: String
    /// The mirror's machine and directory, when it is on another one.
    public var remote: RemoteTarget?
    /// The state directory's absolute path.
    public var state: [UInt8]
    /// The exclude patterns, compiled.
    public var excludes: ExcludeMatcher
    /// The configuration file read, if any.
    public var configFile: [UInt8]?
    /// Versions (SPEC "Versions"): nil when off (`keep_versions` 0).
    public var versions: VersionSettings?
    /// The versions directory keepsync leaves alone whether versions are on or off (its
    /// own exclude, both sides): versions kept before stay until removed by hand.
    public var versionsDirectory: RelativePath = VersionSettings.defaultDirectory
    /// The versions directory's absolute path when `versions_dir` names one outside the
    /// mirror, versions on or off (`keepsync versions` and `restore` read it).
    public var versionsElsewhere: [UInt8]?

    /// Resolved settings.
    public init(configuration: Configuration, invocation: Invocation, source: [UInt8], mirror: [UInt8], state: [UInt8],
                excludes: ExcludeMatcher, configFile: [UInt8]?) {
        self.configuration = configuration
        self.invocation = invocation
        self.source = source
        self.mirror = mirror
        self.mirrorLabel = String(decoding: mirror, as: UTF8.self)
        self.state = state
        self.excludes = excludes
        self.configFile = configFile
    }

    /// What the engine is told.
    public var options: SyncOptions {
        SyncOptions(deleteEnabled: configuration.deleteEnabled, compareContent: invocation.content,
                    maxDeletePercent: configuration.maxDeletePercent, allowMassDelete: invocation.allowMassDelete,
                    excludes: excludes)
    }

    /// The ssh command line's words (remote mirrors).
    public var sshCommand: [[UInt8]] {
        configuration.sshCommand.flatMap { try? RemoteTarget.words($0).get() } ?? [Array("ssh".utf8)]
    }

    /// The rsync program on the remote host (remote mirrors).
    public var rsyncPath: [UInt8] { configuration.rsyncPath ?? Array("rsync".utf8) }

    /// The source path, for display.
    public var sourceName: String { String(decoding: source, as: UTF8.self) }
    /// The mirror path, for display.
    public var mirrorName: String { String(decoding: mirror, as: UTF8.self) }
    /// The state path, for display.
    public var stateName: String { String(decoding: state, as: UTF8.self) }
}
