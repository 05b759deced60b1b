/// Versions (SPEC "Versions"), resolved: how long the mirror keeps what the source
/// replaced or deleted, and where. `Settings.versions` is nil when they are off.
public struct VersionSettings: Sendable, Equatable {
    /// How long versions are kept, seconds (> 0).
    public var keepSeconds: Int64
    /// The versions directory relative to the mirror root (default `.keepsync-versions`);
    /// `.root` when it is `elsewhere`.
    public var directory: RelativePath
    /// The versions directory's absolute path when it is outside the mirror, on the
    /// mirror's file system; nil when it is in the mirror.
    public var elsewhere: [UInt8]?

    /// The versions directory's name in the mirror root when `versions_dir` is not given.
    public static let defaultDirectoryName = ".keepsync-versions"
    /// `defaultDirectoryName` as a path below the mirror root.
    public static let defaultDirectory = RelativePath(defaultDirectoryName)

    /// Versions kept `keepSeconds` in `directory` below the mirror root.
    public init(keepSeconds: Int64, directory: RelativePath = VersionSettings.defaultDirectory) {
        self.keepSeconds = keepSeconds
        self.directory = directory
    }

    /// Versions kept `keepSeconds` in the directory at the absolute path `elsewhere`.
    public init(keepSeconds: Int64, elsewhere: [UInt8]) {
        self.keepSeconds = keepSeconds
        self.directory = .root
        self.elsewhere = elsewhere
    }
}
