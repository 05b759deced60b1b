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
}

/// What a store holds.
public struct RecordSet: Sendable, Equatable {
    /// Records by path.
    public var records: RecordTable
    /// The recorded source root, if any.
    public var root: FileIdentity?
    /// True when the store was damaged and some or all records were discarded.
    public var wasDamaged: Bool

    /// A record set.
    public init(records: RecordTable = RecordTable(), root: FileIdentity? = nil, wasDamaged: Bool = false) {
        self.records = records
        self.root = root
        self.wasDamaged = wasDamaged
    }

    /// A record set from a dictionary of records by path.
    public init(records: [RelativePath: FileRecord], root: FileIdentity? = nil, wasDamaged: Bool = false) {
        self.init(records: RecordTable(records), root: root, wasDamaged: wasDamaged)
    }

    /// Applies one change.
    public mutating func apply(_ change: RecordChange) {
        switch change {
        case .put(let r): records[r.path] = r
        case .remove(let p): records[p] = nil
        case .setRoot(let id): root = id
        }
    }
}
