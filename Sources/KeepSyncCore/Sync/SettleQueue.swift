/// Paths waiting for their events to settle: each is due a settle time after its last
/// event, and at most a max delay after its first; events on a queued path coalesce.
struct SettleQueue {
    /// One queued path.
    struct Entry {
        /// The first event's time (the max delay counts from here).
        var first: Duration
        /// When the path is due.
        var deadline: Duration
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

    /// How many paths wait.
    var count: Int { entries.count }

    /// Lets every waiting path go, and the room they took.
    mutating func removeAll() { entries = [:] }

    /// The queued paths.
    var paths: Dictionary<RelativePath, Entry>.Keys { entries.keys }

    /// True when `path` waits.
    func contains(_ path: RelativePath) -> Bool { entries[path] != nil }

    /// The waiting paths that carry a live removal.
    var removals: Set<RelativePath> { Set(entries.filter(\.value.removal).keys) }

    /// Queues an event on `path`: due after the settle time (now, when `immediately`),
    /// never later than the max delay after its first event.
    mutating func add(_ path: RelativePath, now: Duration, immediately: Bool, removal: Bool = false) {
        let settleAt = immediately ? now : now + settle
        if var p = entries[path] {
            p.deadline = min(settleAt, p.first + maxDelay)
            p.removal = p.removal || removal
            entries[path] = p
        } else {
            entries[path] = Entry(first: now, deadline: immediately ? now : min(settleAt, now + maxDelay),
                                  removal: removal)
        }
    }

    /// Queues `path` as due at `at` unless it waits already (a retry).
    mutating func addIfAbsent(_ path: RelativePath, at: Duration) {
        if entries[path] == nil { entries[path] = Entry(first: at, deadline: at) }
    }

    /// Queues `path` afresh, due at `at` (a path put back for later).
    mutating func replace(_ path: RelativePath, at: Duration) {
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
    var nextDeadline: Duration? {
        // Loops, not key paths: a key path in generic code is built at run time, per call.
        var next: Duration?
        for entry in entries.values where next.map({ entry.deadline < $0 }) ?? true { next = entry.deadline }
        return next
    }

    /// Takes the paths due at `now` out, sorted, with those that carry a live removal.
    mutating func takeDue(now: Duration) -> (paths: [RelativePath], removals: [RelativePath]) {
        var paths: [RelativePath] = [], removals: [RelativePath] = []
        for (path, entry) in entries where entry.deadline <= now {
            paths.append(path)
            if entry.removal { removals.append(path) }
        }
        for path in paths { entries[path] = nil }
        return (paths.sorted(), removals)
    }
}
