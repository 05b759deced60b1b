/// What a scan found: the steps in depth-first order and the counts the brake needs.
public struct SyncScan: Sendable {
    /// One unit of work.
    /// (Boxed, every case: a scan holds one per path until it is applied, and the array
    /// then keeps 8 bytes per step instead of 104.)
    public indirect enum Step: Sendable, Equatable {
        /// The actions for one path; `removedEntries` counts mirror entries its removal takes.
        case path(PathState, [SyncAction], removedEntries: Int)
        /// A directory's entries are done: set its attributes and record.
        case finishDirectory(RelativePath, source: FileStat)
        /// A leftover temp file no record claims.
        case removeTemporary(RelativePath)
    }

    /// Where the scan started.
    public var scope: RelativePath
    /// Steps, parents before children, a directory's finish after its entries. After a
    /// streamed pass (`SyncEngine.fullPass`): only those that waited for its end.
    public var steps: [Step] = []
    /// Mirror entries below the scope (the scope itself excluded).
    public var mirrorEntries = 0
    /// Mirror entries the steps would remove (type changes included).
    public var deletions = 0
    /// Mirror paths under removed directories, for `check` (only when asked).
    public var removedBelow: [RelativePath: [RelativePath]] = [:]
    /// Regular files the mirror keeps although the source lost them (`--no-delete`).
    public var keptFiles = 0
    /// Their total size.
    public var keptBytes: UInt64 = 0
    /// Files the steps would copy, and their total size.
    public var plannedCopies: (files: Int, bytes: UInt64) = (0, 0)

    /// Renames paired by identity (vanished path → new path).
    public var renames = 0
    /// Directories moved while nobody watched (recorded path → new path), identity
    /// certain: found by full passes only; `SyncEngine.fullPass` applies them before it
    /// walks the new directories.
    public var directoryRenames: [Move] = []
    /// Directories that vanished while the scan walked them (not descended into).
    public var vanished: [RelativePath] = []
    /// Source directories that could not be listed (permission, I/O): not descended
    /// into, nothing below them removed or forgotten; each is a per-path error.
    public var unreadable: [KeepSyncError] = []
    /// Special files met (FIFOs, sockets, devices).
    public var specialFiles: [RelativePath] = []
    /// Source paths the mirror cannot hold, with why (never below one of them).
    public var unholdable: [(path: RelativePath, reason: String)] = []
    /// Record slots (`RecordTable.slotIndex`) the scan visited: one bit each.
    public var visitedRecords = BitSet()
    /// Records below the scope for paths the scan found on neither side.
    public var staleRecords: [RelativePath] = []
    /// Regular source files with more than one name.
    var hardLinked: Set<FileIdentity> = []
}

/// A path moved to another.
public struct Move: Sendable, Equatable {
    /// The old path.
    public var from: RelativePath
    /// The new path.
    public var to: RelativePath

    /// A move.
    public init(from: RelativePath, to: RelativePath) {
        self.from = from
        self.to = to
    }
}
