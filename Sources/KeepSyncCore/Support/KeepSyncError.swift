/// The one error type of keepsync: a small code, a message naming the call, and the path.
public struct KeepSyncError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, coarsely.
    public enum Code: String, Sendable, Equatable {
        /// The path does not exist.
        case notFound
        /// Permission denied.
        case permissionDenied
        /// No space left on the device (or quota).
        case noSpace
        /// The file is larger than the mirror's file system takes (EFBIG: FAT32's 4 GiB).
        case tooLarge
        /// The file system is read-only.
        case readOnly
        /// Something exists where it should not, or the wrong kind of object is there.
        case conflict
        /// The source changed while it was being copied.
        case sourceChanged
        /// inotify's watch limit is reached.
        case watchLimitReached
        /// Bad configuration or usage.
        case configuration
        /// Refused for safety (vanished source, brake, lock).
        case unsafe
        /// A path would escape its root or cross a symlink.
        case unsafePath
        /// The mirror's host cannot be reached or refuses the login (remote mirrors).
        case unreachable
        /// The file system does not do it (a hard link on exFAT or FAT).
        case unsupported
        /// Any other I/O failure.
        case io
    }

    /// The code.
    public var code: Code
    /// Human-readable message, naming the operation.
    public var message: String
    /// The path concerned, when there is one.
    public var path: RelativePath?
    /// The errno behind it, when there is one.
    public var errno: Int32?

    /// An error.
    public init(_ code: Code, _ message: String, path: RelativePath? = nil, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.errno = errno
    }

    /// `message`, prefixed with the path when there is one.
    public var description: String {
        if let path { return "\(path.escaped): \(message)" }
        return message
    }
}
