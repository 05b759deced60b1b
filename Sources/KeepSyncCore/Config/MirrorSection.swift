/// One `[mirror NAME]` section of the configuration file: a mirror and the keys that
/// apply to it alone (SPEC "Configuration file"). A key not set here comes from the
/// keys before the first section, then the default.
public struct MirrorSection: Sendable, Equatable {
    /// NAME, as written in the header.
    public var name: String
    /// The header's line number, for messages.
    public var line: Int
    /// `path =`: the mirror, local (`~`-expanded) or `[USER@]HOST:DIR`.
    public var path: [UInt8]
    /// `state =`, `~`-expanded.
    public var state: [UInt8]?
    /// `delete =`.
    public var deleteEnabled: Bool?
    /// `max_delete_percent =`.
    public var maxDeletePercent: Int?
    /// `verify_interval =`.
    public var verifyIntervalSeconds: Int?
    /// `ssh_command =`.
    public var sshCommand: [UInt8]?
    /// `rsync_path =`.
    public var rsyncPath: [UInt8]?
    /// `keep_versions =`, in seconds.
    public var keepVersionsSeconds: Int?
    /// `versions_dir =`, `~`-expanded.
    public var versionsDirectory: [UInt8]?

    /// A section named `name` whose header is on `line`, for the mirror at `path`.
    public init(name: String, line: Int, path: [UInt8]) {
        self.name = name
        self.line = line
        self.path = path
    }

    /// A section as read: `values` holds what the keys in `keys` set (the rest is default).
    init(name: String, line: Int, path: [UInt8], keys: Set<String>, values: Configuration) {
        self.init(name: name, line: line, path: path)
        typealias K = ConfigFileParser.Keys
        if keys.contains(K.state) { state = values.state }
        if keys.contains(K.delete) { deleteEnabled = values.deleteEnabled }
        if keys.contains(K.maxDeletePercent) { maxDeletePercent = values.maxDeletePercent }
        if keys.contains(K.verifyInterval) { verifyIntervalSeconds = values.verifyIntervalSeconds }
        if keys.contains(K.sshCommand) { sshCommand = values.sshCommand }
        if keys.contains(K.rsyncPath) { rsyncPath = values.rsyncPath }
        if keys.contains(K.keepVersions) { keepVersionsSeconds = values.keepVersionsSeconds }
        if keys.contains(K.versionsDirectory) { versionsDirectory = values.versionsDirectory }
    }

    /// The keys a section takes: `path` and these, which override the top-level ones.
    static let keys: Set<String> = [
        "path", ConfigFileParser.Keys.state, ConfigFileParser.Keys.delete, ConfigFileParser.Keys.maxDeletePercent,
        ConfigFileParser.Keys.verifyInterval, ConfigFileParser.Keys.sshCommand, ConfigFileParser.Keys.rsyncPath,
        ConfigFileParser.Keys.keepVersions, ConfigFileParser.Keys.versionsDirectory,
    ]

    /// `top` (the keys before the first section) with this section's keys over it: one
    /// mirror's configuration, without sections.
    public func applied(to top: Configuration) -> Configuration {
        var config = top
        config.sections = []
        config.mirror = path
        if let state { config.state = state }
        if let deleteEnabled { config.deleteEnabled = deleteEnabled }
        if let maxDeletePercent { config.maxDeletePercent = maxDeletePercent }
        if let verifyIntervalSeconds { config.verifyIntervalSeconds = verifyIntervalSeconds }
        if let sshCommand { config.sshCommand = sshCommand }
        if let rsyncPath { config.rsyncPath = rsyncPath }
        if let keepVersionsSeconds { config.keepVersionsSeconds = keepVersionsSeconds }
        if let versionsDirectory { config.versionsDirectory = versionsDirectory }
        return config
    }

    /// Whether `byte` may be in NAME: letters, digits, `-`, `_`, `.`.
    static func isNameByte(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            || byte == 0x2D || byte == 0x5F || byte == 0x2E
    }
}
