import Synchronization

/// Finished copies on their way to a sync manager, taken in batches: a copy thread appends
/// under a lock and only the one that found the inbox empty schedules a hop onto the
/// actor, which then takes everything waiting. A burst of small copies costs one hop, not
/// one each.
final class ManagerInbox: Sendable {
    /// One copy work item's results.
    typealias Results = [(path: RelativePath, result: Result<CopyResult?, any Error>)]

    private struct State {
        var batches: [Results] = []
        var scheduled = false
    }

    private let state = Mutex(State())

    /// Appends `results`; true when the caller is to schedule a `take` on the actor
    /// (nothing was scheduled yet).
    func post(_ results: sending Results) -> Bool {
        state.withLock { s in
            s.batches.append(results)
            if s.scheduled { return false }
            s.scheduled = true
            return true
        }
    }

    /// Everything waiting, in the order posted; the next post schedules again.
    func take() -> [Results] {
        state.withLock { s in
            s.scheduled = false
            defer { s.batches.removeAll(keepingCapacity: true) }
            return s.batches
        }
    }

    /// True when nothing waits.
    var isEmpty: Bool { state.withLock { $0.batches.isEmpty } }
}
