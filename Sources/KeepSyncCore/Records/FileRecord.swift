/// The bookmark record of one mirrored path: what the source held when it was last
/// synced, and which mirror inode received it.
public struct FileRecord: Hashable, Sendable {
    /// Path relative to the roots.
    public var path: RelativePath
    /// Kind of the source object.
    public var kind: FileKind
    /// Source device.
    public var device: UInt64
    /// Source inode.
    public var inode: UInt64
    /// Size in bytes.
    public var size: UInt64
    /// Modification time.
    public var mtime: Timespec
    /// Permission bits.
    public var mode: UInt32
    /// Link target bytes, for symlinks.
    public var linkTarget: [UInt8]?
    /// The mirror's inode holding this version.
    public var mirrorInode: UInt64
    /// The source object's identity stamp (`FileStat.identityStamp`: its birth time, or
    /// its inode generation as a stamp), where reported: with the inode, it makes a rename
    /// across restarts certain. Named for the birth time, the one it held first.
    public var birthTime: Timespec?

    /// A record.
    public init(path: RelativePath, kind: FileKind, device: UInt64, inode: UInt64, size: UInt64,
                mtime: Timespec, mode: UInt32, linkTarget: [UInt8]? = nil, mirrorInode: UInt64, birthTime: Timespec? = nil) {
        self.birthTime = birthTime
        self.path = path
        self.kind = kind
        self.device = device
        self.inode = inode
        self.size = size
        self.mtime = mtime
        self.mode = mode
        self.linkTarget = linkTarget
        self.mirrorInode = mirrorInode
    }

    /// The record for a source object synced into mirror inode `mirrorInode`.
    public init(path: RelativePath, source: FileStat, linkTarget: [UInt8]? = nil, mirrorInode: UInt64) {
        self.init(path: path, kind: source.kind, device: source.device, inode: source.inode, size: source.size,
                  mtime: source.mtime, mode: source.mode, linkTarget: linkTarget, mirrorInode: mirrorInode,
                  birthTime: source.identityStamp)
    }

    /// True when `stat` is certainly the object this record describes, moved: same
    /// device, inode, size, mtime and (reported, equal) birth time or generation.
    public func isCertainlySameObject(as stat: FileStat) -> Bool {
        guard let birthTime, stat.identityStamp == birthTime else { return false }
        return describes(source: stat)
    }

    /// True when `stat` shows the same source object and version this record describes.
    public func describes(source stat: FileStat) -> Bool {
        kind == stat.kind && device == stat.device && inode == stat.inode && size == stat.size && mtime == stat.mtime
    }
}

/// One change to the record store.
public enum RecordChange: Hashable, Sendable {
    /// Insert or replace the record at its path.
    case put(FileRecord)
    /// Forget the record at a path.
    case remove(RelativePath)
    /// Remember the source root's identity.
    case setRoot(FileIdentity)
    /// Remember the mirror root's identity and what its file system holds.
    case setMirror(MirrorRoot)
}

/// The mirror root as the records know it (SPEC Safety, "Vanished or replaced mirror"):
/// its identity, the file system it is on, and that file system's limits.
public struct MirrorRoot: Hashable, Sendable {
    /// Device and inode of the mirror root (inode 0: not comparable, see `limits`).
    public var identity: FileIdentity
    /// The file system it is on, as the mount table says: the mount's source and type
    /// (`/dev/sdb1 fuseblk`); stable across a remount of the same disk where device
    /// numbers are not (FUSE).
    public var fileSystem: [UInt8]
    /// What that file system holds.
    public var limits: MirrorLimits

    /// A mirror root.
    public init(identity: FileIdentity, fileSystem: [UInt8], limits: MirrorLimits) {
        self.identity = identity
        self.fileSystem = fileSystem
        self.limits = limits
    }

    /// True when `other` (found now) is the recorded root: on the same file system and,
    /// where inode numbers survive a remount, the same device and inode; elsewhere the
    /// same file system is all that can be compared.
    /// Where inode numbers do not survive a remount (FUSE), the device may change too (a
    /// disk plugged in again while the old mount is held gets another node): only the
    /// file system's type is compared, which tells an unplugged disk's empty mount point
    /// (the parent's file system) from the disk, but not two disks of one type.
    public func isSameRoot(as other: MirrorRoot) -> Bool {
        if limits.stableInodes && other.limits.stableInodes {
            return fileSystem == other.fileSystem && identity == other.identity
        }
        return limits.stableInodes == other.limits.stableInodes && Self.type(fileSystem) == Self.type(other.fileSystem)
    }

    /// The type in a `fileSystem` (`source type`): the bytes after the last space.
    static func type(_ fileSystem: [UInt8]) -> ArraySlice<UInt8> {
        guard let space = fileSystem.lastIndex(of: 0x20) else { return fileSystem[...] }
        return fileSystem[(space + 1)...]
    }
}

extension MirrorLimits: Hashable {
    /// Hashes what is compared.
    public func hash(into hasher: inout Hasher) { hasher.combine(encoded) }
}

/// What a store holds.
public struct RecordSet: Sendable, Equatable {
    /// Records by path.
    public var table: RecordTable
    /// The recorded source root, if any.
    public var root: FileIdentity?
    /// The recorded mirror root, if any.
    public var mirror: MirrorRoot?
    /// True when the store was damaged and some or all records were discarded.
    public var wasDamaged: Bool

    /// A record set.
    public init(table: RecordTable = RecordTable(), root: FileIdentity? = nil, wasDamaged: Bool = false) {
        self.table = table
        self.root = root
        self.wasDamaged = wasDamaged
    }

    /// A record set from a dictionary of records by path.
    public init(records: [RelativePath: FileRecord], root: FileIdentity? = nil, wasDamaged: Bool = false) {
        self.init(table: RecordTable(records), root: root, wasDamaged: wasDamaged)
    }

    /// Applies one change.
    public mutating func apply(_ change: RecordChange) {
        switch change {
        case .put(let r): table[r.path] = r
        case .remove(let p): table[p] = nil
        case .setRoot(let id): root = id
        case .setMirror(let m): mirror = m
        }
    }
}
