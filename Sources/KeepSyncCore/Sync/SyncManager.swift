/// The live heart of `run`: receives watcher events, keeps a pending map keyed by path
/// with settle deadlines, coalesces, applies moves as renames, runs copies with bounded
/// concurrency, and re-queues a file that changed while it was being copied. A full
/// resync goes through the same scan-and-apply path as a single event.
public actor SyncManager<C: Clock> where C.Duration == Duration {
    /// Timing of the pending queue.
    public struct Timing: Sendable {
        /// Quiet time after the last event on a path.
        public var settle: Duration
        /// Longest wait since the first event on a path.
        public var maxDelay: Duration

        /// Time from the end of one full pass to the next periodic one (nil: none).
        public var verifyInterval: Duration?

        /// Changed paths kept while the mirror's host is unreachable; past it, one full
        /// pass at reconnection finds them.
        public var heldWhileUnreachable: Int

        /// A timing.
        public init(settle: Duration = .milliseconds(20), maxDelay: Duration = .milliseconds(2000),
                    verifyInterval: Duration? = nil, heldWhileUnreachable: Int = 10_000) {
            self.settle = settle
            self.maxDelay = maxDelay
            self.verifyInterval = verifyInterval
            self.heldWhileUnreachable = heldWhileUnreachable
        }
    }

    /// What the manager is doing, for status.
    public struct Snapshot: Sendable, Equatable {
        /// Paths queued (pending, queued for copy, in flight).
        public var pending: Int
        /// Unresolved per-path failures, by path.
        public var errors: [RelativePath: String]
        /// Regular files the records hold.
        public var files: Int
        /// Their total size.
        public var bytes: UInt64
        /// Deletions held by the brake at the last full pass.
        public var heldDeletes: Int
        /// Number of completed full passes.
        public var fullPasses: Int
        /// True while a full pass is being applied.
        public var resyncing: Bool
        /// Files copied since start.
        public var copiedFiles: Int
        /// Bytes copied since start.
        public var copiedBytes: UInt64
        /// Files and bytes the last full pass planned to copy.
        public var passPlanned: (files: Int, bytes: UInt64) = (0, 0)
        /// Files and bytes copied since the last full pass began.
        public var passCopied: (files: Int, bytes: UInt64) = (0, 0)
        /// What the mirror's file system holds, as probed.
        public var mirrorLimits: MirrorLimits?
        /// Source paths the mirror cannot hold, sorted.
        public var skipped: [RelativePath] = []
        /// Why the mirror's host cannot be reached now (nil: it can, or is local).
        public var unreachable: String?
        /// How long the oldest change not yet in the mirror has waited (nil: none waits).
        public var lag: Duration?

        /// Compares the counters.
        public static func == (a: Snapshot, b: Snapshot) -> Bool {
            a.pending == b.pending && a.errors == b.errors && a.files == b.files && a.bytes == b.bytes
                && a.heldDeletes == b.heldDeletes && a.fullPasses == b.fullPasses && a.resyncing == b.resyncing
                && a.copiedFiles == b.copiedFiles && a.copiedBytes == b.copiedBytes
                && a.passPlanned == b.passPlanned && a.passCopied == b.passCopied
                && a.mirrorLimits == b.mirrorLimits && a.skipped == b.skipped && a.unreachable == b.unreachable
        }
    }

    /// How each change is applied: the mirror, the source and the records are its.
    let engine: SyncEngine
    let clock: C
    /// When the manager was made: its own times (deadlines, the queues') count from here,
    /// as plain durations, so that handling an event builds no generic type at run time.
    let origin: C.Instant
    /// The manager's time: since `origin`.
    var now: Duration { origin.duration(to: clock.now) }
    /// Current timing.
    public private(set) var timing: Timing
    let executor: CopyExecutor
    let logger: Logger
    /// Paths that happen in the same millisecond are processed together.
    var pending: SettleQueue
    var fullResyncRequested = false
    /// Files waiting for a copy and copies under way.
    var copies = CopyQueue()
    /// Record writes (syncfs, then append), in order, off the actor; a failed one is
    /// retried with the next, or after `recordRetryDelay` when nothing else comes.
    var recordWriter: RecordWriter { engine.recordWriter }
    var lastAppendAt: Duration?
    /// The writer's outcome count the status last reflected.
    var seenRecordOutcomes = 0
    /// Set while `processDue` works through what is due: copies start after, together.
    var holdingCopies = false
    /// Stages a group's files in parallel.
    let io: ParallelIO
    /// Unresolved failures by path, the root aside.
    var errors: [RelativePath: String] = [:]
    /// The root's entry, by meaning.
    var rootError: RootError?
    /// Failed paths, tried again on their own after a backoff (1 s doubling to 60 s);
    /// not counted as pending. A full or read-only mirror is not retried per path.
    var retries = RetryBackoff()
    /// Whether the mirror takes writes: available, full or read-only, or its host lost;
    /// when to probe it next. A probe that writes starts a full resync, which redoes what
    /// failed. While the host is lost nothing is sent; changes wait in `pending` (up to
    /// `timing.heldWhileUnreachable` paths, then `catchUpInFull`).
    var health = MirrorHealth()
    /// Copies in a row whose source changed during them with no event for it, per path.
    var changedDuringCopy: [RelativePath: Int] = [:]
    /// When the oldest change not yet in the mirror came (nil: none waits).
    var oldestWaiting: Duration?
    var directoriesToFix: Set<RelativePath> = []
    /// Hard-linked files changed whose other names are to be looked at.
    var hardLinks = HardLinkTracker()
    /// Deletions the brake holds, by the directory whose entries they are: a scan of a
    /// scope replaces what is below it, a full pass all of it.
    var held: [RelativePath: Int] = [:]
    var heldDeletes: Int { held.values.reduce(0, +) }
    var fullPasses = 0
    var resyncing = false
    /// When the last full pass ended: the periodic verify counts from there.
    var lastFullPassAt: Duration?
    /// When the periodic verify is due.
    var verifyAt: Duration? {
        guard let interval = timing.verifyInterval, let last = lastFullPassAt else { return nil }
        return last + interval
    }
    var copiedFiles = 0
    var copiedBytes: UInt64 = 0
    var passPlanned: (files: Int, bytes: UInt64) = (0, 0)
    var passCopied: (files: Int, bytes: UInt64) = (0, 0)
    var unflushed = 0
    var idleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Waiting for every queued and running copy to end (`waitForCopies`).
    var copyWaiters: [CheckedContinuation<Void, Never>] = []
    var wakeContinuation: CheckedContinuation<Void, Never>?
    /// The armed alarm of `sleep(until:)`: when it rings, and its task.
    var alarm: (at: Duration, task: Task<Void, Never>)?
    var woken = false
    var stopping = false
    /// Says why the source root cannot be trusted now, or nil when it can; given the
    /// number of recorded entries.
    let rootCheck: (@Sendable (Int) -> String?)?
    /// Set when a full pass found the source root vanished or replaced; `run` then returns.
    public internal(set) var rootLost: String?
    /// Where the actor and its own tasks (the loop, copy results, alarms) run: a thread of
    /// its own, so that its blocking scans and listings never hold the cooperative pool, and
    /// a task waiting there resumes there (no hop through the pool per event).
    nonisolated let thread: ManagerThread
    /// True when the manager made its thread, and closes it when it goes.
    let ownsThread: Bool
    /// Copy results waiting for the actor, taken a batch per hop.
    let inbox = ManagerInbox<CopyResults>()
    /// Watcher events waiting for the actor, taken together by its next hop or round.
    let events = ManagerInbox<WatchEvent>()

    /// The actor's executor: its thread.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    /// A manager over the given engine's seams, on `thread` (nil: a thread of its own).
    public init(engine: sending SyncEngine, clock: C, timing: Timing = Timing(), executor: CopyExecutor, logger: Logger = .silent,
                io: ParallelIO = .serial, rootCheck: (@Sendable (Int) -> String?)? = nil,
                thread: ManagerThread? = nil) {
        self.thread = thread ?? ManagerThread()
        ownsThread = thread == nil
        self.rootCheck = rootCheck
        self.io = io
        self.engine = engine
        self.clock = clock
        origin = clock.now
        self.timing = timing
        pending = SettleQueue(settle: timing.settle, maxDelay: timing.maxDelay)
        self.executor = executor
        self.logger = logger
    }

    deinit {
        if ownsThread { thread.close() }
    }

    /// Changes timing and options (SIGHUP).
    public func reconfigure(timing: Timing, options: SyncOptions) {
        self.timing = timing
        pending.settle = timing.settle
        pending.maxDelay = timing.maxDelay
        engine.reconfigure(options)
    }

    /// The current options.
    public var options: SyncOptions { engine.options }

    // MARK: Events

    /// Takes one watcher event.
    public func receive(_ event: WatchEvent) {
        let now = self.now
        switch event {
        case .changed(let path):
            enqueue(path, now: now, immediately: false)
        case .removed(let path):
            enqueue(path, now: now, immediately: false, removal: true)
        case .closedAfterWrite(let path):
            enqueue(path, now: now, immediately: true)
        case .moved(let from, let to):
            move(from: from, to: to, now: now)
        case .rescan(let reason):
            logger.info("full resync: \(reason)")
            fullResyncRequested = true
            // Events were lost: a listing another mirror's pass made before now must not
            // stand in for this pass's own (nothing would bring back what it missed).
            engine.source.endListingPass()
        }
        signal()
    }

    /// Asks for a full resync (SIGUSR1, SIGHUP, overflow).
    public func requestFullResync() {
        fullResyncRequested = true
        signal()
    }

    func enqueue(_ path: RelativePath, now: Duration, immediately: Bool, removal: Bool = false) {
        if engine.options.excludes.excludes(path, isDirectory: false) && engine.options.excludes.excludes(path, isDirectory: true) {
            // Not mirrored, but its creation or removal changed its directory's mtime.
            if let parent = path.parent, !engine.options.excludes.excludes(parent, isDirectory: true) {
                directoriesToFix.insert(parent)
            }
            return
        }
        if copies.markChanged(path), !immediately { return }
        if oldestWaiting == nil { oldestWaiting = now }
        if health.isHostLost {
            // Bounded however long the host stays away: past the limit, the full pass at
            // reconnection finds every change.
            if health.catchUpInFull { return }
            if pending.count >= timing.heldWhileUnreachable {
                pending.removeAll()
                health.catchUpInFull = true
                logger.info("more than \(timing.heldWhileUnreachable) changes while the mirror's host is unreachable: a full pass will find them")
                return
            }
        }
        pending.add(path, now: now, immediately: immediately, removal: removal)
    }

    /// Forgets when the oldest waiting change came once nothing waits.
    func noteIfIdle() {
        if pending.isEmpty && copies.isEmpty && !health.isHostLost && !fullResyncRequested {
            oldestWaiting = nil
        }
    }

    func move(from: RelativePath, to: RelativePath, now: Duration) {
        let excludes = engine.options.excludes
        let fromExcluded = excludes.excludes(from, isDirectory: false) && excludes.excludes(from, isDirectory: true)
        let toExcluded = excludes.excludes(to, isDirectory: false) && excludes.excludes(to, isDirectory: true)
        let busy = copies.runningPaths.contains { $0.isWithin(from) || $0.isWithin(to) }
        if !fromExcluded, !toExcluded, !busy, !pending.contains(from) {
            do {
                if try engine.applyRename(from: from, to: to) {
                    // A listing another mirror's pass made before this rename is not this
                    // manager's next pass's (it would undo the rename, and nothing is left
                    // pending at the old name).
                    engine.source.endListingPass()
                    // What was pending below `from` is now below `to`.
                    pending.move(below: from, to: to)
                    if let parent = from.parent { directoriesToFix.insert(parent) }
                    if let parent = to.parent { directoriesToFix.insert(parent) }
                    enqueue(to, now: now, immediately: false)
                    return
                }
            } catch {
                logger.debug("rename \(from.escaped) -> \(to.escaped) not applied: \(error)")
            }
        }
        enqueue(from, now: now, immediately: false)
        enqueue(to, now: now, immediately: false)
    }

    /// True when nothing is pending, queued or copying.
    public var isIdle: Bool {
        pending.isEmpty && copies.isEmpty && !fullResyncRequested && directoriesToFix.isEmpty
            && inbox.isEmpty && events.isEmpty
    }

    /// Returns once the manager is idle.
    public func waitUntilIdle() async {
        if isIdle { return }
        // Asked again inside: see `waitForSignal`.
        await withCheckedContinuation { c in
            if isIdle { c.resume() } else { idleWaiters.append(c) }
        }
    }

    /// Status numbers.
    public func snapshot() -> Snapshot {
        lookAtRecordWrites()
        let files = engine.records.table.regularFiles
        let bytes = engine.records.table.regularBytes
        var queuedPaths = Set(pending.paths)
        queuedPaths.formUnion(copies.paths)
        var shown = errors
        if let rootError { shown[.root] = rootError.message }
        noteIfIdle()
        return Snapshot(pending: queuedPaths.count, errors: shown, files: files, bytes: bytes,
                        heldDeletes: heldDeletes, fullPasses: fullPasses, resyncing: resyncing,
                        copiedFiles: copiedFiles, copiedBytes: copiedBytes, passPlanned: passPlanned, passCopied: passCopied,
                        mirrorLimits: engine.records.mirror?.limits, skipped: engine.skipped.keys.sorted(),
                        unreachable: health.hostLost?.message, lag: oldestWaiting.map { now - $0 })
    }
}
