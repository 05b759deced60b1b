/// What kind of object a path names.
public enum FileKind: UInt8, Sendable, Equatable {
    /// A regular file.
    case regular = 1
    /// A directory.
    case directory = 2
    /// A symbolic link.
    case symlink = 3
    /// A FIFO, socket or device node: never mirrored.
    case special = 4
}

/// Seconds and nanoseconds, as the kernel reports them.
public struct Timespec: Hashable, Sendable, Comparable {
    /// Whole seconds since the epoch.
    public var seconds: Int64
    /// Nanoseconds, 0 ..< 1_000_000_000.
    public var nanoseconds: Int64

    /// A timestamp.
    public init(seconds: Int64, nanoseconds: Int64) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    /// Orders by seconds, then nanoseconds.
    public static func < (a: Timespec, b: Timespec) -> Bool {
        (a.seconds, a.nanoseconds) < (b.seconds, b.nanoseconds)
    }

    /// An inode generation carried where a birth time goes (records keep one field):
    /// the generation as seconds, and nanoseconds no clock gives (2^30 - 1), so that it
    /// never equals a real birth time.
    public static func generationStamp(_ generation: UInt32) -> Timespec {
        Timespec(seconds: Int64(generation), nanoseconds: (1 << 30) - 1)
    }
}

/// The metadata keepsync compares: the result of `lstat`.
public struct FileStat: Hashable, Sendable {
    /// Object kind.
    public var kind: FileKind
    /// Permission bits (`mode & 07777`).
    public var mode: UInt32
    /// Size in bytes.
    public var size: UInt64
    /// Modification time.
    public var mtime: Timespec
    /// Status change time.
    public var ctime: Timespec
    /// Device number.
    public var device: UInt64
    /// Inode number.
    public var inode: UInt64
    /// Birth time, where the file system reports one.
    public var birthTime: Timespec?
    /// The inode generation (`FS_IOC_GETVERSION`), taken where there is no birth time.
    public var generation: UInt32?
    /// Hard-link count (1 when unknown).
    public var links: UInt32 = 1

    /// A stat result.
    public init(kind: FileKind, mode: UInt32, size: UInt64, mtime: Timespec,
                ctime: Timespec = Timespec(seconds: 0, nanoseconds: 0), device: UInt64 = 0, inode: UInt64 = 0,
                birthTime: Timespec? = nil) {
        self.birthTime = birthTime
        self.kind = kind
        self.mode = mode
        self.size = size
        self.mtime = mtime
        self.ctime = ctime
        self.device = device
        self.inode = inode
    }

    /// What, with device and inode, makes the object's identity certain: the birth time,
    /// else the generation as a stamp; nil when the file system reports neither.
    public var identityStamp: Timespec? {
        if let birthTime { return birthTime }
        return generation.map(Timespec.generationStamp)
    }

    /// True when content-relevant metadata (size, mtime, ctime) is the same: the file did not change.
    public func sameVersion(as other: FileStat) -> Bool {
        size == other.size && mtime == other.mtime && ctime == other.ctime && inode == other.inode && device == other.device
    }
}

/// One name in a directory, with its `lstat`.
public struct DirectoryEntry: Sendable, Equatable {
    /// The name, as bytes.
    public var name: [UInt8]
    /// Its metadata.
    public var stat: FileStat

    /// An entry.
    public init(name: [UInt8], stat: FileStat) {
        self.name = name
        self.stat = stat
    }
}
