/// What the agent (and `sync`) asks of the machine it runs on; the executable wires the
/// Linux one, tests a fake over in-memory trees.
public protocol AgentHost: Sendable {
    /// The process ID status.json names.
    var processID: Int { get }
    /// The wall-clock time, ISO 8601 in UTC (status.json's `lastFullSync`).
    func timestamp() -> String
    /// Where copies run, and how many directory reads and copies go at once.
    var copies: (executor: CopyExecutor, io: ParallelIO, scanIO: ParallelIO) { get }
    /// Takes the single-instance lock, loads the records, applies the source-safety rules
    /// and makes the mirror; calls `refused` with the records and the reason before
    /// throwing a refusal. `pausingForMirror` (`run`): a recorded mirror root that is
    /// missing or replaced is no refusal but `PreparedRecords.mirrorAway`.
    func prepare(_ settings: Settings, logger: Logger, heartbeat: Heartbeat?, pausingForMirror: Bool,
                 refused: (RecordSet, String) -> Void) throws -> PreparedRecords
    /// Opens the source and the mirror (on a file system holding `limits`) for one watcher
    /// generation; `live` for `run` (see `LocalMirror.changedCopyRetries`).
    func openTrees(_ settings: Settings, limits: MirrorLimits, cancellation: CancellationFlag, live: Bool) throws
        -> (source: any FileSystemProviding, mirror: any MirrorProviding)
    /// A new (not started) watcher of the source, whose walk also ends once `cancellation`
    /// is set (a stop that came before the walk began).
    func makeWatcher(_ settings: Settings, logger: Logger, heartbeat: Heartbeat, cancellation: CancellationFlag)
        -> any WatcherProviding
    /// Starts reading the source's directories ahead of a watcher's walk; returns its stop.
    func warmDirectories(_ settings: Settings) -> @Sendable () -> Void
    /// Starts reading both trees (a remote mirror's: the source only) and looking up their
    /// entries while the records load, so that the pass after finds them cached; returns
    /// its stop.
    func readAhead(_ settings: Settings) -> @Sendable () -> Void
    /// The lstat of the source root's path now; nil when nothing is there.
    func sourceRootStat(_ path: [UInt8]) -> FileStat?
    /// True when the source root's path lists no entries (false when it cannot be read).
    func sourceRootIsEmpty(_ path: [UInt8]) -> Bool
    /// The mirror root at `path` as it is now (identity and file system, no limits probed);
    /// nil when nothing is there; throws when it cannot be asked (a remote mirror's host
    /// does not answer).
    func mirrorRoot(_ path: [UInt8]) throws -> MirrorRoot?
    /// Returns memory freed by a big pass to the system (the allocator keeps it otherwise:
    /// a first run over 100k files left `run` at 97 MiB resident, a restart at 20 MiB).
    func releaseMemory()
    /// Calls `tick` now and every `interval` on a timer of the host's own, until cancelled.
    func repeating(every interval: Duration, _ tick: @escaping @Sendable () -> Void) -> any TimerHandle
}

/// The records as `AgentHost.prepare` left them: locked, loaded, the source checked.
public struct PreparedRecords {
    /// The record store.
    public var store: any AgentRecordStore
    /// The records as loaded.
    public var records: RecordSet
    /// The source root's stat, checked safe.
    public var root: FileStat
    /// Releases the single-instance lock.
    public var release: () -> Void
    /// Why the recorded mirror cannot be written now (missing or replaced), when
    /// preparation went on without it; nil when it can.
    public var mirrorAway: String?

    /// Prepared records.
    public init(store: any AgentRecordStore, records: RecordSet, root: FileStat, mirrorAway: String? = nil,
                release: @escaping () -> Void) {
        self.store = store
        self.records = records
        self.root = root
        self.mirrorAway = mirrorAway
        self.release = release
    }
}

/// A record store that says when its log has grown past its snapshot.
public protocol AgentRecordStore: BookmarkStorageProviding {
    /// True when the log is longer than the snapshot (and its allowance).
    var needsCompaction: Bool { get }
    /// Bytes in the log.
    var logLength: UInt64 { get }
    /// Bytes in the snapshot.
    var snapshotLength: UInt64 { get }
}
