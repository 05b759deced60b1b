/// The copies of `run`: files waiting for a copy, in order, and the copies under way, each
/// with whether its file changed again meanwhile; and how what waits is cut into work
/// items (a lone file alone, the latency path; else groups of up to the mirror's
/// `groupFiles`, shared among at most its `concurrentGroups` at once). A value: the
/// manager decides when, this says what.
struct CopyQueue {
    private var waiting: [RelativePath] = []
    private var queued: Set<RelativePath> = []
    /// Copies under way; the flag says the path changed again meanwhile.
    private var running: [RelativePath: Bool] = [:]
    /// Work items under way, and how many of them are groups.
    private(set) var workers = 0
    private var groups = 0

    /// Nothing waits and nothing runs.
    var isEmpty: Bool { waiting.isEmpty && running.isEmpty }
    /// No copy is under way.
    var nothingRunning: Bool { running.isEmpty }
    /// Files waiting for a copy.
    var waitingCount: Int { waiting.count }
    /// Copies under way.
    var runningCount: Int { running.count }
    /// The files waiting and under way.
    var paths: Set<RelativePath> { queued.union(running.keys) }
    /// The most elements its storage holds room for.
    var capacity: Int { max(waiting.capacity, queued.capacity, running.capacity) }
    /// The files whose copy is under way.
    var runningPaths: Dictionary<RelativePath, Bool>.Keys { running.keys }

    /// True when `path` waits for a copy or its copy is under way.
    func holds(_ path: RelativePath) -> Bool { running[path] != nil || queued.contains(path) }

    /// Queues a copy of `path`: a copy under way goes again once it ends instead; one
    /// already waiting stays where it is.
    mutating func add(_ path: RelativePath) {
        if markChanged(path) { return }
        if queued.insert(path).inserted { waiting.append(path) }
    }

    /// Notes that `path` changed while its copy runs; false when none runs.
    @discardableResult
    mutating func markChanged(_ path: RelativePath) -> Bool {
        guard running[path] != nil else { return false }
        running[path] = true
        return true
    }

    /// The next work item, nil when nothing waits or no worker is free: `limit` work items
    /// at most; `shape` is the mirror's.
    mutating func next(limit: Int, shape: (groupFiles: Int, concurrentGroups: Int)) -> [RelativePath]? {
        guard !waiting.isEmpty else { return nil }
        let size: Int
        if waiting.count == 1 && workers < limit && (workers == 0 || groups == 0) {
            size = 1
        } else if workers < min(shape.concurrentGroups, limit) {
            // What waits, shared among the free group slots (at most `groupFiles` each).
            let free = min(shape.concurrentGroups, limit) - workers
            size = min(shape.groupFiles, (waiting.count + free - 1) / free)
        } else {
            return nil
        }
        let item = Array(waiting.prefix(size))
        waiting.removeFirst(item.count)
        for path in item {
            queued.remove(path)
            running[path] = false
        }
        workers += 1
        if size > 1 { groups += 1 }
        return item
    }

    /// A work item of `count` files ended.
    mutating func itemEnded(count: Int) {
        workers -= 1
        if count > 1 { groups -= 1 }
    }

    /// `path`'s copy ended; true when it changed again meanwhile.
    mutating func ended(_ path: RelativePath) -> Bool {
        running.removeValue(forKey: path) ?? false
    }

    /// Takes every file waiting out of the queue (copies under way go on).
    mutating func takeWaiting() -> [RelativePath] {
        defer {
            waiting = []
            queued = []
        }
        return waiting
    }

    /// Lets a big pass's storage go once the queue is empty.
    mutating func shrinkIfEmpty() {
        guard isEmpty, waiting.capacity > 1024 || queued.capacity > 1024 || running.capacity > 1024 else { return }
        waiting = []
        queued = []
        running = [:]
    }
}
