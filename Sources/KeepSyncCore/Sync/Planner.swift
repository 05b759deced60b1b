/// What the planner knows about one path: the source, the record and the mirror. A scan
/// keeps one per path it plans until the pass is applied, so the record and the mirror's
/// stat (absent for every file of a first run) take no room inline: 8 bytes each instead
/// of ~100 (the state went from 321 to 143 bytes).
public struct PathState: Equatable, Sendable {
    /// The path.
    public var path: RelativePath
    /// The source's `lstat`, nil when absent.
    public var source: FileStat?
    /// The source's link target, for symlinks.
    public var sourceLink: [UInt8]?
    /// The bookmark record, nil when none.
    public var record: FileRecord? {
        get { records.first }
        set { records = newValue.map { [$0] } ?? [] }
    }
    /// The mirror's `lstat`, nil when absent.
    public var mirror: FileStat? {
        get { mirrors.first }
        set { mirrors = newValue.map { [$0] } ?? [] }
    }
    private var records: [FileRecord] = []
    private var mirrors: [FileStat] = []
    /// The mirror's link target, for symlinks.
    public var mirrorLink: [UInt8]?
    /// Byte comparison of source and mirror (`--content`); nil when not compared.
    public var contentEqual: Bool?

    /// A path state.
    public init(path: RelativePath, source: FileStat?, sourceLink: [UInt8]? = nil, record: FileRecord?,
                mirror: FileStat?, mirrorLink: [UInt8]? = nil, contentEqual: Bool? = nil) {
        self.path = path
        self.source = source
        self.sourceLink = sourceLink
        self.record = record
        self.mirror = mirror
        self.mirrorLink = mirrorLink
        self.contentEqual = contentEqual
    }
}

/// One step that makes a mirror path equal to its source.
public enum SyncAction: Equatable, Sendable {
    /// Copy the source file into place atomically (then record it).
    case copyFile(RelativePath)
    /// Create the directory (its attributes follow after its entries).
    case makeDirectory(RelativePath, mode: UInt32)
    /// Create or replace the symlink (then record it).
    case makeSymlink(RelativePath, target: [UInt8])
    /// Remove what the mirror holds at the path (a deletion, or a type change).
    case remove(RelativePath)
    /// Set permission bits and/or modification time.
    case setAttributes(RelativePath, mode: UInt32?, mtime: Timespec?)
    /// Store this record; the mirror already holds what it says. (Boxed: an action is
    /// then 33 bytes, not 97, in the action list of every planned path.)
    indirect case updateRecord(FileRecord)
    /// Forget the record at the path.
    case dropRecord(RelativePath)
    /// A FIFO, socket or device: not mirrored, warned about.
    case skipSpecial(RelativePath)
    /// What the mirror's file system cannot hold (a symlink, a name it refuses, a name
    /// that differs from another only in case): not mirrored, warned about, listed.
    case skipUnholdable(RelativePath, reason: String)
    /// Move the mirror's copy of a vanished path here (a rename made while keepsync
    /// was not watching, identity certain); falls back to a copy.
    case renameFrom(RelativePath, to: RelativePath)

    /// True for actions that add, replace or remove a directory entry in the mirror.
    public var changesMirrorEntries: Bool {
        switch self {
        case .copyFile, .makeDirectory, .makeSymlink, .remove, .renameFrom: return true
        case .setAttributes, .updateRecord, .dropRecord, .skipSpecial, .skipUnholdable: return false
        }
    }

    /// True for actions that take something out of the mirror.
    public var isDeletion: Bool {
        if case .remove = self { return true }
        return false
    }
}

/// The pure decision function: given source, record and mirror of a path, the actions.
/// All subtle choices (what counts as changed, type flips) live here, compared within
/// what the mirror's file system holds (`limits`).
public struct Planner: Sendable {
    /// Whether deletions propagate.
    public var deleteEnabled: Bool
    /// What the mirror's file system holds.
    public var limits: MirrorLimits

    /// A planner.
    public init(deleteEnabled: Bool = true, limits: MirrorLimits = .none) {
        self.deleteEnabled = deleteEnabled
        self.limits = limits
    }

    /// Why the mirror cannot hold the source at this path (its name, its kind), or nil.
    public func unholdable(_ path: RelativePath, kind: FileKind) -> String? {
        if !path.isRoot, let reason = limits.refusal(of: path.name) { return reason }
        if kind == .symlink && !limits.symlinks { return "the mirror's file system holds no symlinks" }
        return nil
    }

    /// Why the mirror cannot hold this source object (its name, kind or size), or nil.
    public func unholdable(_ path: RelativePath, _ source: FileStat) -> String? {
        if let reason = unholdable(path, kind: source.kind) { return reason }
        if source.kind == .regular, let max = limits.maxFileSize, source.size > max { return SyncEngine.tooLargeReason }
        return nil
    }

    /// The actions for one path. A directory's own attributes are decided after its
    /// entries by `finishDirectory`.
    public func plan(_ s: PathState) -> [SyncAction] {
        let path = s.path
        guard let source = s.source else {
            guard let mirror = s.mirror else { return s.record == nil ? [] : [.dropRecord(path)] }
            if path.isRoot { return [] }
            _ = mirror
            if deleteEnabled { return [.remove(path)] + (s.record == nil ? [] : [.dropRecord(path)]) }
            return s.record == nil ? [] : [.dropRecord(path)]
        }
        // Anything of another kind in the mirror goes first (a type change counts as a
        // deletion). Under --no-delete nothing is removed: a file or link is replaced by
        // rename, and a directory in the way makes the copy fail for this path.
        let replaceFirst: [SyncAction]
        if let mirror = s.mirror, mirror.kind != source.kind, source.kind != .special, !path.isRoot, deleteEnabled {
            replaceFirst = [.remove(path)]
        } else {
            replaceFirst = []
        }
        switch source.kind {
        case .special:
            return [.skipSpecial(path)] + (s.record == nil ? [] : [.dropRecord(path)])
        case _ where unholdable(path, source) != nil:
            // What the mirror held there before (a file where a link is now) goes.
            let stale: [SyncAction] = s.mirror != nil && deleteEnabled && !path.isRoot ? [.remove(path)] : []
            return stale + [.skipUnholdable(path, reason: unholdable(path, source)!)]
                + (s.record == nil ? [] : [.dropRecord(path)])
        case .directory:
            if let mirror = s.mirror, mirror.kind == .directory { return [] }
            return replaceFirst + [.makeDirectory(path, mode: source.mode)]
        case .symlink:
            if let mirror = s.mirror, mirror.kind == .symlink, let target = s.sourceLink, s.mirrorLink == target {
                let record = FileRecord(path: path, source: source, linkTarget: target,
                                        mirrorInode: limits.recordedInode(mirror.inode))
                var actions: [SyncAction] = []
                // A link's own mtime (touch -h) is mirrored too.
                if !limits.mtimesEqual(mirror.mtime, source.mtime) { actions.append(.setAttributes(path, mode: nil, mtime: source.mtime)) }
                if s.record != record { actions.append(.updateRecord(record)) }
                return actions
            }
            // Its target unread: the link went or changed since it was listed (a listing
            // another mirror's pass made a while ago); its events follow.
            guard let target = s.sourceLink else { return [] }
            return replaceFirst + [.makeSymlink(path, target: target)]
        case .regular:
            if let mirror = s.mirror, mirror.kind == .regular, mirrorHolds(source: source, mirror: mirror, record: s.record),
               s.contentEqual != false {
                var actions: [SyncAction] = []
                if !limits.modesEqual(source: source.mode, mirror: mirror.mode) {
                    actions.append(.setAttributes(path, mode: source.mode, mtime: nil))
                }
                let record = FileRecord(path: path, source: source, mirrorInode: limits.recordedInode(mirror.inode))
                if s.record != record { actions.append(.updateRecord(record)) }
                return actions
            }
            return replaceFirst + [.copyFile(path)]
        }
    }

    /// True when the mirror file already holds the source's current version. With a
    /// record, the record must describe this source object and this mirror inode; without
    /// one (first run), size and mtime must match (rsync's quick check).
    func mirrorHolds(source: FileStat, mirror: FileStat, record: FileRecord?) -> Bool {
        guard mirror.size == source.size, limits.mtimesEqual(mirror.mtime, source.mtime) else { return false }
        guard let record, record.kind == .regular else { return true }
        return record.describes(source: source) && record.mirrorInode == limits.recordedInode(mirror.inode)
    }

    /// The actions after a directory's entries were updated: its mode and mtime (again,
    /// when an entry changed), and its record.
    public func finishDirectory(path: RelativePath, source: FileStat, mirror: FileStat, record: FileRecord?,
                                entriesChanged: Bool) -> [SyncAction] {
        var actions: [SyncAction] = []
        let mode: UInt32? = limits.modesEqual(source: source.mode, mirror: mirror.mode) ? nil : source.mode
        let mtime: Timespec? = (entriesChanged || !limits.mtimesEqual(mirror.mtime, source.mtime)) ? source.mtime : nil
        if mode != nil || mtime != nil { actions.append(.setAttributes(path, mode: mode, mtime: mtime)) }
        let newRecord = FileRecord(path: path, source: source, mirrorInode: limits.recordedInode(mirror.inode))
        if record != newRecord { actions.append(.updateRecord(newRecord)) }
        return actions
    }
}
