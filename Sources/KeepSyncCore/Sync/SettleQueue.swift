/// Paths waiting for their events to settle: each is due a settle time after its last
/// event, and at most a max delay after its first; events on a queued path coalesce.
struct SettleQueue<Instant: InstantProtocol> where Instant.Duration == Duration {
    /// One queued path.
    struct Entry {
        /// The first event's time (the max delay counts from here).
        var first: Instant
        /// When the path is due.
        var deadline: Instant
        /// Something at or below the path was removed live (not braked).
        var removal = false
    }

    /// Quiet time after the last event on a path.
    var settle: Duration
    /// Longest wait since the first event on a path.
    var maxDelay: Duration
    private(set) var entries: [RelativePath: Entry] = [:]

    /// An empty queue.
    init(settle: Duration, maxDelay: Duration) {
        self.settle = settle
        self.maxDelay = maxDelay
    }

    /// True when nothing waits.
    var isEmpty: Bool { entries.isEmpty }

    /// The queued paths.
    var paths: Dictionary<RelativePath, Entry>.Keys { entries.keys }

    /// True when `path` waits.
    func contains(_ path: RelativePath) -> Bool { entries[path] != nil }

    /// Queues an event on `path`: due after the settle time (now, when `immediately`),
    /// never later than the max delay after its first event.
    mutating func add(_ path: RelativePath, now: Instant, immediately: Bool, removal: Bool = false) {
        let settleAt = immediately ? now : now.advanced(by: settle)
        if var p = entries[path] {
            p.deadline = min(settleAt, p.first.advanced(by: maxDelay))
            p.removal = p.removal || removal
            entries[path] = p
        } else {
            entries[path] = Entry(first: now, deadline: immediately ? now : min(settleAt, now.advanced(by: maxDelay)),
                                  removal: removal)
        }
    }

    /// Queues `path` as due at `at` unless it waits already (a retry).
    mutating func addIfAbsent(_ path: RelativePath, at: Instant) {
        if entries[path] == nil { entries[path] = Entry(first: at, deadline: at) }
    }

    /// Queues `path` afresh, due at `at` (a path put back for later).
    mutating func replace(_ path: RelativePath, at: Instant) {
        entries[path] = Entry(first: at, deadline: at)
    }

    /// What waits strictly below `from` now waits at the same place below `to` (a rename).
    mutating func move(below from: RelativePath, to: RelativePath) {
        for (path, entry) in entries where path != from && path.isWithin(from) {
            entries[path] = nil
            if let moved = path.rebased(from: from, to: to) {
                var e = entry
                if let existing = entries[moved] { e.removal = e.removal || existing.removal }
                entries[moved] = e
            }
        }
    }

    /// The earliest deadline, nil when nothing waits.
    var nextDeadline: Instant? { entries.values.map(\.deadline).min() }

    /// Takes the paths due at `now` out, sorted, with those that carry a live removal.
    mutating func takeDue(now: Instant) -> (paths: [RelativePath], removals: [RelativePath]) {
        let due = entries.filter { $0.value.deadline <= now }
        for path in due.keys { entries[path] = nil }
        return (due.keys.sorted(), due.filter(\.value.removal).map(\.key))
    }
}
