import Synchronization

/// Finished copies or watcher events on their way to a sync manager, taken in batches: a
/// copy thread (the event consumer) appends under a lock and only the one that found the
/// inbox empty schedules a hop onto the actor, which then takes everything waiting. A
/// burst of small copies (of events) costs one hop, and one round, not one each.
final class ManagerInbox<Item: Sendable>: Sendable {
    private struct State {
        var items: [Item] = []
        var scheduled = false
    }

    private let state = Mutex(State())

    /// Appends `item`; true when the caller is to schedule a `take` on the actor
    /// (nothing was scheduled yet).
    func post(_ item: Item) -> Bool {
        state.withLock { s in
            s.items.append(item)
            if s.scheduled { return false }
            s.scheduled = true
            return true
        }
    }

    /// Everything waiting, in the order posted; the next post schedules again.
    func take() -> [Item] {
        state.withLock { s in
            s.scheduled = false
            defer { s.items.removeAll(keepingCapacity: true) }
            return s.items
        }
    }

    /// True when nothing waits.
    var isEmpty: Bool { state.withLock { $0.items.isEmpty } }
}

/// One copy work item's results.
typealias CopyResults = [(path: RelativePath, result: Result<CopyResult?, any Error>)]
