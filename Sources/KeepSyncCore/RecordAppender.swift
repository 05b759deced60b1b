import Dispatch
import Synchronization

/// Appends record batches in order on a serial queue, each after a durability barrier.
/// Batches handed over while an append runs go out together in the next one (one
/// barrier for all of them, however fast copies finish). A batch whose append fails stays
/// at the head of a backlog and goes out with the next append, so the store never skips
/// or reorders a change. Deferred (for deterministic tests), the appends wait until
/// `drain` runs them on its caller.
final class RecordAppender: Sendable {
    let queue: DispatchQueue?
    let deferred = Mutex<[@Sendable () -> Void]>([])
    /// Changes whose append failed, oldest first, and how many appends failed in a row.
    /// Touched by the queue's work items and read by the manager.
    let state = Mutex<(backlog: [RecordChange], failures: Int)>(([], 0))
    /// Changes handed over and not taken by an append yet; whether an append is queued.
    let waiting = Mutex<(changes: [RecordChange], scheduled: Bool)>(([], false))

    /// An appender on a serial queue of its own, or deferred until `drain`.
    init(deferred: Bool) {
        queue = deferred ? nil : DispatchQueue(label: "keepsync.records")
    }

    func submit(_ work: @escaping @Sendable () -> Void) {
        if let queue { queue.async(execute: work) } else { deferred.withLock { $0.append(work) } }
    }

    /// True when changes wait for a retry.
    var hasBacklog: Bool { state.withLock { !$0.backlog.isEmpty } }

    /// Appends that failed in a row (0 after a success).
    var failures: Int { state.withLock { $0.failures } }

    /// Queues `changes` (after any backlog); `failed` is told of a failure and `recovered`
    /// of the first success after failures, off the queue.
    func append(_ changes: [RecordChange], mirror: any FileAccessorProviding, store: any BookmarkStorageProviding,
                failed: @escaping @Sendable (any Error) -> Void, recovered: @escaping @Sendable () -> Void) {
        let schedule = waiting.withLock { w -> Bool in
            w.changes += changes
            defer { w.scheduled = true }
            return !w.scheduled
        }
        guard schedule else { return }
        submit {
            let handed = self.waiting.withLock { w -> [RecordChange] in
                defer { w = ([], false) }
                return w.changes
            }
            // Only this serial queue (or `drain`) changes the backlog: taking it here is safe.
            let batch = self.state.withLock { s -> [RecordChange] in
                defer { s.backlog = [] }
                return s.backlog + handed
            }
            guard !batch.isEmpty else { return }
            do {
                try SyncEngine.appendDurably(batch, mirror: mirror, store: store)
                let hadFailed = self.state.withLock { s -> Bool in
                    defer { s.failures = 0 }
                    return s.failures > 0
                }
                if hadFailed { recovered() }
            } catch {
                self.state.withLock { s in
                    s.backlog = batch
                    s.failures += 1
                }
                failed(error)
            }
        }
    }

    /// Forgets the backlog (a compaction wrote everything it held).
    func clearBacklog() {
        if let queue { queue.sync { state.withLock { $0 = ([], 0) } } } else { state.withLock { $0 = ([], 0) } }
    }

    /// Returns once every append queued so far is done.
    func drain() async {
        if let queue {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in queue.async { c.resume() } }
            return
        }
        while let work = deferred.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { work() }
    }
}
