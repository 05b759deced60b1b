import Dispatch
import Synchronization

/// Where record writes run, in the order handed over: a serial queue of their own (the
/// agent), the caller at once, or held until `drain` runs them on its caller (a
/// simulation choosing when they land). The writes themselves are the same everywhere.
public struct RecordScheduler: Sendable {
    let submit: @Sendable (@escaping @Sendable () -> Void) -> Void
    let drain: @Sendable () async -> Void

    /// A scheduler from its two halves: queue a write, and wait for (or run) those queued.
    public init(submit: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void, drain: @escaping @Sendable () async -> Void) {
        self.submit = submit
        self.drain = drain
    }

    /// A serial Dispatch queue of its own.
    public static func serialQueue() -> RecordScheduler {
        let queue = DispatchQueue(label: "keepsync.records")
        return RecordScheduler(submit: { queue.async(execute: $0) }, drain: {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in queue.async { c.resume() } }
        })
    }

    /// Each write on the caller, before `append` returns.
    public static let immediate = RecordScheduler(submit: { $0() }, drain: {})

    /// Writes held until `drain` runs them, in order, on its caller.
    public static func held() -> RecordScheduler {
        let works = Mutex<[@Sendable () -> Void]>([])
        return RecordScheduler(submit: { work in works.withLock { $0.append(work) } }, drain: {
            while let work = works.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { work() }
        })
    }
}

/// Appends record batches in order through a `RecordScheduler`, each after a durability
/// barrier. Batches handed over while an append waits go out together in the next one
/// (one barrier for all of them, however fast copies finish). A batch whose append fails
/// stays at the head of a backlog and goes out with the next append, so the store never
/// skips or reorders a change. A compaction takes its turn among the appends.
final class RecordAppender: Sendable {
    let scheduler: RecordScheduler
    /// Changes whose append failed, oldest first (they stay here until an append that
    /// holds them succeeds), how many appends failed in a row, and the last failure.
    /// Touched by the queue's work items and read by the manager.
    let state = Mutex<(backlog: [RecordChange], failures: Int, lastError: String?)>(([], 0, nil))
    /// Changes handed over and not taken by an append yet; a compaction asked for, with
    /// the changes its set holds that were not appended; whether a write is queued.
    let waiting = Mutex<(changes: [RecordChange], compaction: (set: RecordSet, covered: [RecordChange])?, scheduled: Bool)>(([], nil, false))

    /// An appender whose writes run where `scheduler` puts them.
    init(scheduler: RecordScheduler) {
        self.scheduler = scheduler
    }

    func submit(_ work: @escaping @Sendable () -> Void) { scheduler.submit(work) }

    /// True when changes wait for a retry.
    var hasBacklog: Bool { state.withLock { !$0.backlog.isEmpty } }

    /// Appends that failed in a row (0 after a success).
    var failures: Int { state.withLock { $0.failures } }

    /// Why the last append or compaction failed, while no later one has succeeded (an
    /// append in flight changes nothing until it ends): what status reports.
    var failure: String? { state.withLock { $0.failures > 0 ? $0.lastError : nil } }

    /// Queues `changes` (after any backlog); `failed` is told of a failure and `recovered`
    /// of the first success after failures, off the queue.
    func append(_ changes: [RecordChange], mirror: any FileAccessorProviding, store: any BookmarkStorageProviding,
                failed: @escaping @Sendable (any Error) -> Void, recovered: @escaping @Sendable () -> Void) {
        let schedule = waiting.withLock { w -> Bool in
            w.changes += changes
            defer { w.scheduled = true }
            return !w.scheduled
        }
        if schedule { submit { self.write(mirror: mirror, store: store, failed: failed, recovered: recovered) } }
    }

    /// Queues a rewrite of the store as `set`, which holds every change handed over so
    /// far: those not appended yet are dropped from the queue, being in `set` (they go
    /// back if the rewrite fails). Later changes are appended after it.
    func compact(_ set: RecordSet, mirror: any FileAccessorProviding, store: any BookmarkStorageProviding,
                 failed: @escaping @Sendable (any Error) -> Void, recovered: @escaping @Sendable () -> Void) {
        let schedule = waiting.withLock { w -> Bool in
            w.compaction = (set, (w.compaction?.covered ?? []) + w.changes)
            w.changes = []
            defer { w.scheduled = true }
            return !w.scheduled
        }
        if schedule { submit { self.write(mirror: mirror, store: store, failed: failed, recovered: recovered) } }
    }

    /// One queued write: the compaction asked for, if any, then the changes handed over.
    private func write(mirror: any FileAccessorProviding, store: any BookmarkStorageProviding,
                       failed: @escaping @Sendable (any Error) -> Void, recovered: @escaping @Sendable () -> Void) {
        let (handed, compaction) = waiting.withLock { w -> ([RecordChange], (set: RecordSet, covered: [RecordChange])?) in
            defer { w = ([], nil, false) }
            return (w.changes, w.compaction)
        }
        // Only this serial queue (or `drain`) changes the backlog; it stays in place while
        // this write runs, so that nobody sees it empty before the append succeeded.
        var batch = handed
        var merged = false
        var hadFailed = false
        do {
            if let compaction {
                do {
                    // Records follow the mirror: what they describe is made durable first.
                    try mirror.barrier()
                    try store.compact(compaction.set)
                    hadFailed = state.withLock { s -> Bool in
                        defer { s = ([], 0, nil) }
                        return s.failures > 0
                    }
                } catch {
                    batch = compaction.covered + handed
                    throw error
                }
            }
            batch = state.withLock { $0.backlog } + batch
            merged = true
            if !batch.isEmpty {
                try SyncEngine.appendDurably(batch, mirror: mirror, store: store)
                hadFailed = state.withLock { s -> Bool in
                    defer { s = ([], 0, nil) }
                    return s.failures > 0
                } || hadFailed
            }
            if hadFailed { recovered() }
        } catch {
            state.withLock { s in
                s.backlog = merged ? batch : s.backlog + batch
                s.failures += 1
                s.lastError = (error as? KeepSyncError)?.message ?? "\(error)"
            }
            failed(error)
        }
    }

    /// Forgets the backlog (a compaction wrote everything it held; no write is queued).
    func clearBacklog() {
        state.withLock { $0 = ([], 0, nil) }
    }

    /// Returns once every append queued so far is done.
    func drain() async {
        await scheduler.drain()
    }
}
