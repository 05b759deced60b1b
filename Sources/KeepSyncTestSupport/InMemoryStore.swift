import KeepSyncCore
import Synchronization

/// A record store in memory: every applied batch kept, for tests and simulations.
public final class InMemoryStore: BookmarkStorageProviding {
    private let state = Mutex((set: RecordSet(), batches: [[RecordChange]](), compactions: 0))

    /// An empty store, or one holding `set`.
    public init(_ set: RecordSet = RecordSet()) {
        state.withLock { $0.set = set }
    }

    /// What a load would return.
    public func load() throws -> RecordSet { state.withLock { $0.set } }

    /// Applies a batch.
    public func apply(_ changes: [RecordChange]) throws {
        guard !changes.isEmpty else { return }
        state.withLock { s in
            for c in changes { s.set.apply(c) }
            s.batches.append(changes)
        }
    }

    /// Replaces everything.
    public func compact(_ set: RecordSet) throws {
        state.withLock { s in
            s.set = set
            s.set.wasDamaged = false
            s.compactions += 1
        }
    }

    /// Compactions done so far.
    public var compactions: Int { state.withLock { $0.compactions } }

    /// Batches applied so far.
    public var batches: [[RecordChange]] { state.withLock { $0.batches } }
}
