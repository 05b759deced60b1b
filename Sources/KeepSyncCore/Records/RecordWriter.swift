import Synchronization

/// The one owner of record changes not yet durable. Changes are added as the mirror
/// changes; `flush` hands them to a write, which runs where the `RecordScheduler` puts
/// it: a durability barrier on the mirror, then an append to the store. Changes flushed
/// while a write waits go out together in the next one (one barrier for all of them). A
/// batch whose append fails stays at the head of a backlog and goes out with the next
/// write, so the store never skips or reorders a change. A compaction takes its turn
/// among the writes. Whoever drives reads `failure`; nothing is reported back up.
public final class RecordWriter: Sendable {
    /// Everything not durable yet, and the writes' outcome, in one place.
    struct State {
        /// Added and not flushed yet.
        var added: [RecordChange] = []
        /// Flushed, waiting for the scheduled write.
        var handed: [RecordChange] = []
        /// A rewrite asked for: the set, and the flushed changes it holds that were not
        /// appended (they go back to the queue if the rewrite fails).
        var compaction: (set: RecordSet, covered: [RecordChange])?
        /// The last compaction failed and no write succeeded since: one is owed (of the
        /// records as they are when it is retried), or the failure would stand with nothing
        /// left to write that could clear it.
        var compactionFailed = false
        /// True while a write is queued and has not taken `handed` yet.
        var scheduled = false
        /// Changes whose write failed, oldest first: they stay until a write holding them
        /// succeeds.
        var backlog: [RecordChange] = []
        /// Writes that failed in a row, and the last one's error.
        var failures = 0
        var lastError: KeepSyncError?
        /// Writes that failed or recovered from failures so far.
        var outcomes = 0
    }

    let mirror: any MirrorProviding
    let store: any BookmarkStorageProviding
    let scheduler: RecordScheduler
    let logger: Logger
    private let state = Mutex(State())

    /// A writer making `mirror` durable before each append to `store`, its writes run
    /// where `scheduler` puts them.
    public init(mirror: any MirrorProviding, store: any BookmarkStorageProviding, scheduler: RecordScheduler,
                logger: Logger = .silent) {
        self.mirror = mirror
        self.store = store
        self.scheduler = scheduler
        self.logger = logger
    }

    /// Adds a change (its mirror change is made); returns how many wait to be flushed.
    @discardableResult
    func add(_ change: RecordChange) -> Int {
        switch change {
        case .put(let record): mirror.willRecord(record.path)
        case .remove(let path): mirror.willRecord(path)
        case .setRoot, .setMirror: break
        }
        return state.withLock { s in
            s.added.append(change)
            return s.added.count
        }
    }

    /// Hands what was added to a write; with `retryingBacklog`, a write goes out for a
    /// failed backlog even when nothing was added. Returns false when there was nothing
    /// to write.
    @discardableResult
    func flush(retryingBacklog: Bool = false) -> Bool {
        let (work, schedule) = state.withLock { s -> (Bool, Bool) in
            guard !s.added.isEmpty || (retryingBacklog && !s.backlog.isEmpty) else { return (false, false) }
            s.handed += s.added
            s.added.removeAll(keepingCapacity: true)
            defer { s.scheduled = true }
            return (true, !s.scheduled)
        }
        if schedule { scheduler.submit { self.write() } }
        return work
    }

    /// Queues a rewrite of the store as `set`, which holds every change added so far:
    /// those not appended yet leave the queue, being in `set` (they come back if the
    /// rewrite fails). Later changes are appended after it.
    func compact(_ set: RecordSet) {
        let schedule = state.withLock { s -> Bool in
            s.compaction = (set, (s.compaction?.covered ?? []) + s.handed + s.added)
            s.handed = []
            s.added = []
            defer { s.scheduled = true }
            return !s.scheduled
        }
        if schedule { scheduler.submit { self.write() } }
    }

    /// Rewrites the store as `set` on the caller, once every queued write is done (a
    /// stop, a command's end): a barrier first, since records follow the mirror. Throws
    /// when either fails; the store then keeps what it held.
    public func compactNow(_ set: RecordSet) throws {
        try compactDurably(set)
        clearBacklog()
    }

    /// Records follow the mirror: what they describe is made durable first.
    private func compactDurably(_ set: RecordSet) throws {
        try mirror.barrier()
        try store.compact(set)
    }

    /// True when changes (or a failed compaction) wait for a retry.
    var hasBacklog: Bool { state.withLock { !$0.backlog.isEmpty || $0.compactionFailed } }

    /// True when the last compaction failed and nothing was written since.
    var owesCompaction: Bool { state.withLock { $0.compactionFailed } }

    /// Writes that failed in a row (0 after a success).
    public var failures: Int { state.withLock { $0.failures } }

    /// Why the last write or compaction failed, while no later one has succeeded (a write
    /// in flight changes nothing until it ends): what status reports.
    public var failure: KeepSyncError? { state.withLock { $0.failures > 0 ? $0.lastError : nil } }

    /// How many writes failed or recovered so far: a driver that saw another count looks
    /// at `failure` again.
    public var outcomes: Int { state.withLock { $0.outcomes } }

    /// Forgets the backlog (a compaction wrote everything it held; no write is queued).
    func clearBacklog() {
        state.withLock { s in
            s.backlog = []
            s.compactionFailed = false
            s.failures = 0
            s.lastError = nil
        }
    }

    /// Returns once every write queued so far is done.
    public func drain() async {
        await scheduler.drain()
    }

    /// One queued write: the compaction asked for, if any, then the changes handed over.
    private func write() {
        let (handed, compaction) = state.withLock { s -> ([RecordChange], (set: RecordSet, covered: [RecordChange])?) in
            defer {
                s.handed = []
                s.compaction = nil
                s.scheduled = false
            }
            return (s.handed, s.compaction)
        }
        // Only the scheduler's writes (in order) change the backlog; it stays in place while
        // this write runs, so that nobody sees it empty before the append succeeded.
        var batch = handed
        var merged = false
        var recovered = false
        do {
            if let compaction {
                do {
                    try compactDurably(compaction.set)
                    recovered = succeeded()
                } catch {
                    batch = compaction.covered + handed
                    throw error
                }
            }
            batch = state.withLock { $0.backlog } + batch
            merged = true
            if !batch.isEmpty {
                try mirror.barrier()
                try store.apply(batch)
                recovered = succeeded() || recovered
            }
            if recovered {
                state.withLock { $0.outcomes += 1 }
                logger.info("records are written again")
            }
        } catch {
            let e = (error as? KeepSyncError) ?? KeepSyncError(.io, "\(error)")
            state.withLock { s in
                s.backlog = merged ? batch : s.backlog + batch
                if compaction != nil && !merged { s.compactionFailed = true }
                s.failures += 1
                s.lastError = e
                s.outcomes += 1
            }
            logger.error("cannot write records: " + e.message)
        }
    }

    /// Clears the backlog and the failures after a write succeeded; true if it had failed.
    private func succeeded() -> Bool {
        state.withLock { s in
            defer {
                s.backlog = []
                s.failures = 0
                s.lastError = nil
                s.compactionFailed = false
            }
            return s.failures > 0
        }
    }
}
