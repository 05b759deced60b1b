import KeepSyncCore
import Synchronization

/// An in-memory store whose log and snapshot sizes the test sets: it asks for compaction
/// while the log is longer than the snapshot. A compaction leaves the sizes as they are.
public final class GaugedStore: AgentRecordStore {
    /// The records.
    public let inner = InMemoryStore()
    private let lengths = Mutex<(log: UInt64, snapshot: UInt64)>((0, 0))

    /// An empty store with empty log and snapshot.
    public init() {}

    /// What a load would return.
    public func load() throws -> RecordSet { try inner.load() }
    /// Applies a batch.
    public func apply(_ changes: [RecordChange]) throws { try inner.apply(changes) }
    /// Replaces everything.
    public func compact(_ set: RecordSet) throws { try inner.compact(set) }

    /// Sets the sizes.
    public func setLengths(log: UInt64, snapshot: UInt64) { lengths.withLock { $0 = (log, snapshot) } }

    /// True while the log is longer than the snapshot.
    public var needsCompaction: Bool { lengths.withLock { $0.log > $0.snapshot } }
    /// The log's size.
    public var logLength: UInt64 { lengths.withLock { $0.log } }
    /// The snapshot's size.
    public var snapshotLength: UInt64 { lengths.withLock { $0.snapshot } }
    /// Compactions done so far.
    public var compactions: Int { inner.compactions }
}
