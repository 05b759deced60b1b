import Dispatch

/// Runs blocking work (a file copy) off the actor, and says where record writes run.
/// Production: a bounded set of Dispatch threads and a serial queue; tests: inline, for
/// determinism.
public struct CopyExecutor: Sendable {
    /// Copies in flight at most.
    public var limit: Int
    /// Where record writes run (nil: a serial queue of the manager's own).
    public var records: RecordScheduler?
    let run: @Sendable (@escaping @Sendable () -> Void) -> Void

    /// An executor calling `run` with each copy's work (tests can hold it back).
    public init(limit: Int, records: RecordScheduler? = nil,
                run: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.limit = limit
        self.records = records
        self.run = run
    }

    /// Runs work on Dispatch's global concurrent queue, at most `limit` at once.
    public static func dispatch(limit: Int) -> CopyExecutor {
        CopyExecutor(limit: max(1, limit)) { work in DispatchQueue.global(qos: .utility).async(execute: work) }
    }

    /// Runs each copy on the caller (the manager), one at a time, and record writes too:
    /// deterministic for tests. Completions still reach the manager as the agent's do,
    /// on a task of their own (`waitForCopies` waits for them).
    public static let inline = CopyExecutor(limit: 1, records: .immediate) { work in work() }
}

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

        /// A timing.
        public init(settle: Duration = .milliseconds(20), maxDelay: Duration = .milliseconds(2000),
                    verifyInterval: Duration? = nil) {
            self.settle = settle
            self.maxDelay = maxDelay
            self.verifyInterval = verifyInterval
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

        /// Compares the counters.
        public static func == (a: Snapshot, b: Snapshot) -> Bool {
            a.pending == b.pending && a.errors == b.errors && a.files == b.files && a.bytes == b.bytes
                && a.heldDeletes == b.heldDeletes && a.fullPasses == b.fullPasses && a.resyncing == b.resyncing
                && a.copiedFiles == b.copiedFiles && a.copiedBytes == b.copiedBytes
                && a.passPlanned == b.passPlanned && a.passCopied == b.passCopied
        }
    }

    let engine: SyncEngine
    let source: any FileSystemProviding
    let mirror: any FileAccessorProviding
    let clock: C
    /// Current timing.
    public private(set) var timing: Timing
    let executor: CopyExecutor
    let logger: Logger
    /// Paths that happen in the same millisecond are processed together.
    var pending: SettleQueue<C.Instant>
    var fullResyncRequested = false
    var copyQueue: [RelativePath] = []
    var queued: Set<RelativePath> = []
    /// Copies running; the flag says the path changed again meanwhile.
    var inFlight: [RelativePath: Bool] = [:]
    /// Record writes (syncfs, then append), in order, off the actor; a failed one is
    /// retried with the next, or after `recordRetryDelay` when nothing else comes.
    var records: RecordWriter { engine.recordWriter }
    var lastAppendAt: C.Instant?
    /// The writer's outcome count the status last reflected.
    var seenRecordOutcomes = 0
    /// Copy work items running, and how many of them are groups.
    var workers = 0
    var groupsRunning = 0
    /// Set while `processDue` works through what is due: copies start after, together.
    var holdingCopies = false
    /// Stages a group's files in parallel.
    let io: ParallelIO
    var errors: [RelativePath: String] = [:]
    /// Failed paths, tried again on their own after a backoff (1 s doubling to 60 s);
    /// not counted as pending. A full or read-only mirror is not retried per path.
    var retries = RetryBackoff<C.Instant>()
    /// While the mirror is full or read-only: when to probe it next. A probe that writes
    /// starts a full resync, which redoes what failed.
    var mirrorProbeAt: C.Instant?
    /// Blocked episodes and failed probes, counted until a minute passes without one:
    /// the probe's backoff (0.25 s doubling to 5 s).
    var mirrorFailures = 0
    var lastBlockedAt: C.Instant?
    var directoriesToFix: Set<RelativePath> = []
    /// Hard-linked files copied whose other names were not looked for yet: the name
    /// copied last for each (device, inode), and since when the first one waits.
    var linkedCopies: [InodeKey: RelativePath] = [:]
    var linkedSince: C.Instant?
    /// Source files with more than one name, as the scans saw them (a full pass sees all).
    var hardLinked: Set<InodeKey> = []
    var heldDeletes = 0
    var fullPasses = 0
    var resyncing = false
    /// When the last full pass ended: the periodic verify counts from there.
    var lastFullPassAt: C.Instant?
    /// When the periodic verify is due.
    var verifyAt: C.Instant? {
        guard let interval = timing.verifyInterval, let last = lastFullPassAt else { return nil }
        return last.advanced(by: interval)
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
    var woken = false
    var stopping = false
    /// Called (on the actor) whenever something status-relevant changed.
    var onChange: (@Sendable () -> Void)?
    /// Says why the source root cannot be trusted now, or nil when it can; given the
    /// number of recorded entries.
    let rootCheck: (@Sendable (Int) -> String?)?
    /// Set when a full pass found the source root vanished or replaced; `run` then returns.
    public private(set) var rootLost: String?
    /// Where the manager's own tasks (copy completions, record reports) prefer to run;
    /// nil: the global pool. A simulation keeps them on its own thread.
    let taskExecutor: (any TaskExecutor)?
    /// Where the actor runs: a thread of its own by default (`ManagerExecutor`), so that
    /// its blocking scans never hold a thread of the cooperative pool.
    nonisolated let actorExecutor: any SerialExecutor

    /// The actor's executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { actorExecutor.asUnownedSerialExecutor() }

    /// A manager over the given engine's seams.
    public init(engine: sending SyncEngine, source: any FileSystemProviding, mirror: any FileAccessorProviding,
                clock: C, timing: Timing = Timing(), executor: CopyExecutor, logger: Logger = .silent,
                io: ParallelIO = .serial, rootCheck: (@Sendable (Int) -> String?)? = nil,
                taskExecutor: (any TaskExecutor)? = nil, actorExecutor: (any SerialExecutor)? = nil) {
        self.actorExecutor = actorExecutor ?? ManagerExecutor()
        self.rootCheck = rootCheck
        self.taskExecutor = taskExecutor
        self.io = io
        self.engine = engine
        self.source = source
        self.mirror = mirror
        self.clock = clock
        self.timing = timing
        pending = SettleQueue(settle: timing.settle, maxDelay: timing.maxDelay)
        self.executor = executor
        self.logger = logger
        // Record writes leave the actor (the engine's, a full pass's batches, too).
        engine.writeRecords(on: executor.records ?? .serialQueue())
    }

    /// Sets a callback run after status-relevant changes.
    public func setOnChange(_ callback: (@Sendable () -> Void)?) { onChange = callback }

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
        let now = clock.now
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
        }
        signal()
    }

    /// Asks for a full resync (SIGUSR1, SIGHUP, overflow).
    public func requestFullResync() {
        fullResyncRequested = true
        signal()
    }

    func enqueue(_ path: RelativePath, now: C.Instant, immediately: Bool, removal: Bool = false) {
        if engine.options.excludes.excludes(path, isDirectory: false) && engine.options.excludes.excludes(path, isDirectory: true) {
            // Not mirrored, but its creation or removal changed its directory's mtime.
            if let parent = path.parent, !engine.options.excludes.excludes(parent, isDirectory: true) {
                directoriesToFix.insert(parent)
            }
            return
        }
        if inFlight[path] != nil {
            inFlight[path] = true
            if !immediately { return }
        }
        pending.add(path, now: now, immediately: immediately, removal: removal)
    }

    func move(from: RelativePath, to: RelativePath, now: C.Instant) {
        let excludes = engine.options.excludes
        let fromExcluded = excludes.excludes(from, isDirectory: false) && excludes.excludes(from, isDirectory: true)
        let toExcluded = excludes.excludes(to, isDirectory: false) && excludes.excludes(to, isDirectory: true)
        let busy = inFlight.keys.contains { $0.isWithin(from) || $0.isWithin(to) }
        if !fromExcluded, !toExcluded, !busy, !pending.contains(from) {
            do {
                if try engine.applyRename(from: from, to: to) {
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

    // MARK: Processing

    /// The earliest moment something is due, nil when nothing waits.
    public func nextDeadline() -> C.Instant? {
        if fullResyncRequested { return clock.now }
        if !directoriesToFix.isEmpty && inFlight.isEmpty && copyQueue.isEmpty { return clock.now }
        var next = pending.nextDeadline
        let linked = linkedSince?.advanced(by: timing.maxDelay)
        for at in [retries.nextDeadline, mirrorProbeAt, linked, verifyAt].compactMap({ $0 }) { next = min(next ?? at, at) }
        if records.hasBacklog, let at = lastAppendAt {
            let retry = at.advanced(by: recordRetryDelay)
            next = min(next ?? retry, retry)
        }
        return next
    }

    /// How long after a failed record append it is tried again when nothing else comes:
    /// 1 s, doubling up to 30 s.
    var recordRetryDelay: Duration {
        .seconds(min(30, 1 << min(5, max(0, records.failures - 1))))
    }

    /// Processes a requested full resync and every path whose deadline has passed.
    public func processDue() {
        let start = clock.now
        if let at = mirrorProbeAt, at <= start { probeMirror(now: start) }
        if let since = linkedSince, since.advanced(by: timing.maxDelay) <= start { queueOtherLinks() }
        for path in retries.takeDue(now: start) { pending.addIfAbsent(path, at: start) }
        let verify = !fullResyncRequested && verifyAt.map { $0 <= start } == true
        if fullResyncRequested || verify {
            fullResyncRequested = false
            fullResync(label: verify ? "verify" : "full pass")
        }
        let now = clock.now
        let (due, liveRemovals) = pending.takeDue(now: now)
        guard !due.isEmpty else { return finishRound() }
        var last: RelativePath?
        holdingCopies = true
        defer {
            holdingCopies = false
            startCopies()
        }
        for path in due {
            // A due directory's scan covers the due paths below it.
            if let last, path != last, path.isWithin(last), (try? source.stat(last))?.kind == .directory { continue }
            // Copies still running below it would race a removal: wait for them.
            if inFlight.keys.contains(where: { $0 != path && $0.isWithin(path) }) {
                let later = clock.now.advanced(by: timing.settle)
                pending.replace(path, at: later)
                continue
            }
            process(path, liveRemovals: liveRemovals)
            last = path
        }
        finishRound()
    }

    /// A full pass: scan everything, brake on, apply, copy. Logs what it changes in the
    /// mirror under `label` (at debug level when nothing).
    public func fullResync(exempt: Set<RelativePath> = [], label: String = "full pass") {
        let start = clock.now
        defer { lastFullPassAt = clock.now }
        if let problem = rootCheck?(engine.records.records.count - (engine.records.records[.root] == nil ? 0 : 1)) {
            rootLost = problem
            errors[.root] = problem
            logger.error(problem)
            stopping = true
            return
        }
        resyncing = true
        onChange?()
        defer { resyncing = false }
        let options = engine.options
        do {
            let scan = try engine.prepare(.root)
            hardLinked = scan.hardLinked
            passPlanned = scan.plannedCopies
            passCopied = (0, 0)
            let summary = engine.apply(scan, deferCopies: true, brake: MassDeleteBrake(options, exempt: exempt))
            heldDeletes = summary.heldDeletes
            if summary.heldDeletes > 0 {
                logger.warning("held \(summary.heldDeletes) deletions: more than \(options.maxDeletePercent)% of the mirror's \(scan.mirrorEntries) entries; send SIGUSR1 after checking, or restart with --allow-mass-delete")
            }
            // A copy it queued again keeps its error until that copy ends.
            let queuedAgain = Set(summary.deferredCopies)
            errors = errors.filter { queuedAgain.contains($0.key) }
            clearFailures(within: .root, except: summary.deferredCopies)
            // A pass that wrote without meeting a full or read-only mirror ends that state.
            mirrorProbeAt = nil
            note(summary)
            for path in summary.deferredCopies { queueCopy(path) }
            fullPasses += 1
            let took = Self.seconds(start.duration(to: clock.now))
            if summary.mirrorChanges == 0 {
                logger.debug("\(label): nothing to repair (\(scan.mirrorEntries) mirror entries checked in \(took))")
            } else {
                logger.info("\(label): \(summary.changeList) in \(took)")
            }
        } catch {
            errors[.root] = "\(error)"
            logger.error("full resync failed: \(error); retrying")
            scheduleRetry(.root, error)
        }
        startCopies()
    }

    /// `12 ms` below a second, `1.25 s` above.
    static func seconds(_ d: Duration) -> String {
        let ms = Int(d / .milliseconds(1))
        return ms < 1000 ? "\(ms) ms" : "\(Double(ms / 10) / 100) s"
    }

    // MARK: Failures

    /// True for errors that say the whole mirror takes no writes now.
    static func blocksMirror(_ code: KeepSyncError.Code) -> Bool { code == .noSpace || code == .readOnly }

    /// Plans another attempt at a failed path: a probe of the mirror when it is full or
    /// read-only, else the path alone after its backoff.
    func scheduleRetry(_ path: RelativePath, _ error: any Error) {
        if let e = error as? KeepSyncError, Self.blocksMirror(e.code) { return blockMirror(e) }
        retries.schedule(path, now: clock.now)
    }

    /// Forgets the failures of `scope` and below (they synced or vanished); paths whose
    /// copy is still to come keep their count, so that their backoff keeps growing.
    func clearFailures(within scope: RelativePath, except copies: [RelativePath] = []) {
        retries.clear(within: scope, keep: Set(copies))
    }

    func blockMirror(_ error: KeepSyncError) {
        guard mirrorProbeAt == nil else { return }
        // A mirror that fills up again soon (a file that does not fit while smaller ones
        // do) keeps its long backoff: at most one probe and full pass per 5 s.
        if let last = lastBlockedAt, last.duration(to: clock.now) > .seconds(60) { mirrorFailures = 0 }
        lastBlockedAt = clock.now
        let what = error.code == .noSpace ? "full" : "read-only"
        logger.warning("the mirror is \(what) (\(error.message)); waiting until it takes writes again")
        mirrorProbeAt = clock.now.advanced(by: probeBackoff)
        mirrorFailures += 1
        errors[.root] = "the mirror is \(what): \(error.message)"
    }

    var probeBackoff: Duration { .milliseconds(min(5000, 250 << min(5, mirrorFailures))) }

    func probeMirror(now: C.Instant) {
        do { try mirror.probe() } catch {
            mirrorProbeAt = now.advanced(by: probeBackoff)
            mirrorFailures += 1
            logger.debug("the mirror still takes no writes: \(error)")
            return
        }
        mirrorProbeAt = nil
        if errors[.root]?.hasPrefix("the mirror is ") == true { errors[.root] = nil }
        logger.info("the mirror takes writes again: full resync")
        fullResyncRequested = true
    }

    /// One path (and, for a directory, what is below it), with deletions not braked.
    func process(_ path: RelativePath, liveRemovals: [RelativePath] = []) {
        let scope = nearestMirrorScope(path)
        // The whole tree: a full pass, with its root check.
        if scope.isRoot { return fullResync(exempt: Set(liveRemovals)) }
        // Deletions seen live by inotify are not braked: a path that is gone, and the
        // removal events at or below the scope. Deletions a scan of an existing
        // directory infers on its own are, like a full pass's.
        var brake = MassDeleteBrake(engine.options, exempt: Set(liveRemovals.filter { $0.isWithin(scope) }))
        if (try? source.stat(scope))??.kind != .directory { brake.lifted = true }
        do {
            let scan = try engine.scan(scope)
            hardLinked.formUnion(scan.hardLinked)
            noteLinkedNamesGoing(scan)
            let summary = engine.apply(scan, deferCopies: true, brake: brake)
            noteLinkedChanges(scan)
            let queuedAgain = Set(summary.deferredCopies)
            for key in errors.keys where key.isWithin(scope) && !queuedAgain.contains(key) { errors[key] = nil }
            clearFailures(within: scope, except: summary.deferredCopies)
            if summary.heldDeletes > 0 {
                heldDeletes = summary.heldDeletes
                logger.warning("held \(summary.heldDeletes) deletions below \(scope.escaped): more than \(brake.maxDeletePercent)% of its entries")
            }
            note(summary)
            for copy in summary.deferredCopies { queueCopy(copy) }
            if let parent = scope.parent { directoriesToFix.insert(parent) }
        } catch {
            if (try? source.stat(scope)) ?? nil == nil || (error as? KeepSyncError)?.code == .notFound {
                // Changing under our feet: try again once it settles.
                logger.debug("\(scope.escaped): \(error); retrying")
                enqueue(scope, now: clock.now, immediately: false)
            } else {
                errors[scope] = "\(error)"
                logger.error("\(scope.escaped): \(error)")
                scheduleRetry(scope, error)
            }
        }
        startCopies()
    }

    /// `path`, or its nearest ancestor whose parent directory exists in the mirror.
    func nearestMirrorScope(_ path: RelativePath) -> RelativePath {
        var scope = path
        while let parent = scope.parent, (try? mirror.stat(parent))??.kind != .directory {
            scope = parent
        }
        return scope
    }

    func note(_ summary: SyncSummary) {
        for e in summary.errors {
            errors[e.path ?? .root] = e.message
            scheduleRetry(e.path ?? .root, e)
        }
        copiedFiles += summary.copiedFiles
        copiedBytes += summary.copiedBytes
    }

    // MARK: Copies

    func queueCopy(_ path: RelativePath) {
        if inFlight[path] != nil {
            inFlight[path] = true
            return
        }
        if queued.insert(path).inserted { copyQueue.append(path) }
    }

    /// Starts copy work while workers are free. A lone file with nothing else copying is
    /// installed on its own (the latency path); otherwise what queued goes out in groups
    /// of up to 256 (one group commit each), at most two at once, so a burst shares a
    /// few barriers instead of paying one per file.
    func startCopies() {
        if holdingCopies { return }
        while !copyQueue.isEmpty, !stopping {
            let size: Int
            if copyQueue.count == 1 && workers < executor.limit && (workers == 0 || groupsRunning == 0) {
                size = 1
            } else if workers < min(2, executor.limit) {
                size = min(256, copyQueue.count)
            } else {
                break
            }
            let group = Array(copyQueue.prefix(size))
            copyQueue.removeFirst(group.count)
            for path in group {
                queued.remove(path)
                inFlight[path] = false
            }
            workers += 1
            if size > 1 { groupsRunning += 1 }
            let source = self.source, mirror = self.mirror, logger = self.logger, io = self.io, preferred = taskExecutor
            executor.run {
                let results = SyncEngine.copyFiles(group, source: source, mirror: mirror, logger: logger, io: io)
                Task(executorPreference: preferred) { await self.copiesFinished(results) }
            }
        }
    }

    func copiesFinished(_ results: [(path: RelativePath, result: Result<SyncEngine.CopyResult?, any Error>)]) {
        workers -= 1
        if results.count > 1 { groupsRunning -= 1 }
        for (path, result) in results { copyFinished(path, result) }
        startCopies()
        if inFlight.isEmpty && copyQueue.isEmpty {
            finishRound()
            let waiters = copyWaiters
            copyWaiters.removeAll()
            for w in waiters { w.resume() }
        }
        signal()
    }

    /// Returns once no copy is queued or running, their completions applied (a caller
    /// driving `processDue` itself, as a test does, waits here for the round to end).
    public func waitForCopies() async {
        while !(inFlight.isEmpty && copyQueue.isEmpty) {
            await withCheckedContinuation { copyWaiters.append($0) }
        }
    }

    func copyFinished(_ path: RelativePath, _ result: Result<SyncEngine.CopyResult?, any Error>) {
        let changedAgain = inFlight.removeValue(forKey: path) ?? false
        switch result {
        case .success(let copied):
            errors[path] = nil
            clearFailures(within: path)
            if let copied {
                if copied.source.links > 1 {
                    hardLinked.insert(InodeKey(device: copied.source.device, inode: copied.source.inode))
                    linkedCopies[InodeKey(device: copied.source.device, inode: copied.source.inode)] = copied.path
                    if linkedSince == nil { linkedSince = clock.now }
                }
                engine.recordCopy(copied)
                copiedFiles += 1
                copiedBytes += copied.installed.size
                passCopied.files += 1
                passCopied.bytes += copied.installed.size
                unflushed += 1
            }
        case .failure(let error):
            let now = (try? source.stat(path)) ?? nil
            if stopping {
                logger.debug("\(path.escaped): copy abandoned on stop")
            } else if now == nil || now?.kind != .regular {
                // Vanished or replaced by another kind while copied: its events follow.
                errors[path] = nil
                enqueue(path, now: clock.now, immediately: false)
            } else {
                errors[path] = (error as? KeepSyncError)?.message ?? "\(error)"
                logger.error("\(path.escaped): \((error as? KeepSyncError)?.message ?? "\(error)")")
                scheduleRetry(path, error)
            }
        }
        if let parent = path.parent { directoriesToFix.insert(parent) }
        if changedAgain { enqueue(path, now: clock.now, immediately: false) }
        if unflushed >= 256 { flushRecords() }
    }

    /// A hard-linked file whose mode or mtime changed through one name changed under its
    /// other names too (IN_ATTRIB comes for the name used only): like a write, it has them
    /// looked for (a copy's completion does the same for content).
    func noteLinkedChanges(_ scan: SyncScan) {
        for step in scan.steps {
            guard case .path(let state, let actions, _) = step, let s = state.source, s.kind == .regular, s.links > 1,
                  actions.contains(where: { if case .setAttributes = $0 { return true }; return false }) else { continue }
            linkedCopies[InodeKey(device: s.device, inode: s.inode)] = state.path
            if linkedSince == nil { linkedSince = clock.now }
        }
    }

    /// A name of a hard-linked file that goes (removed, replaced, or below a directory that
    /// goes) may have been written through just before, and its events name only it: its
    /// other names are looked at, as after a copy. Called before the scan is applied, while
    /// the records below a removed directory are still there.
    func noteLinkedNamesGoing(_ scan: SyncScan) {
        guard !hardLinked.isEmpty else { return }
        let table = engine.records.records
        for step in scan.steps {
            guard case .path(let state, let actions, _) = step, actions.contains(where: \.isDeletion) else { continue }
            for slot in table.slots(within: state.path) {
                guard let (path, record) = table.entry(atSlot: slot), record.kind == .regular else { continue }
                let key = InodeKey(device: record.device, inode: record.inode)
                guard hardLinked.contains(key) else { continue }
                linkedCopies[key] = path
                if linkedSince == nil { linkedSince = clock.now }
            }
        }
    }

    /// A hard-linked file written through one name changed under its other names too
    /// (inotify reports only the name written through): queue those, for every linked
    /// file copied since the last look, in one walk of the records. Done when the copies
    /// end, or once the first waited the max delay while they go on: a walk per copy
    /// made a pass over n hard-linked names O(n²).
    func queueOtherLinks() {
        guard !linkedCopies.isEmpty else { return }
        let copied = linkedCopies
        linkedCopies.removeAll()
        linkedSince = nil
        for (path, r) in engine.records.records {
            if let last = copied[InodeKey(device: r.device, inode: r.inode)], last != path {
                enqueue(path, now: clock.now, immediately: false)
            }
        }
    }

    /// Once the copies end: queues the other names of linked copies and fixes directory
    /// attributes. Appends records, wakes idle waiters.
    func finishRound() {
        if inFlight.isEmpty && copyQueue.isEmpty {
            queueOtherLinks()
            for dir in directoriesToFix.sorted(by: { $0.depth != $1.depth ? $0.depth > $1.depth : $0 < $1 }) {
                do { try engine.fixDirectory(dir) } catch { logger.debug("\(dir.escaped): \(error)") }
            }
            directoriesToFix.removeAll()
        }
        flushRecords()
        onChange?()
        if isIdle {
            let waiters = idleWaiters
            idleWaiters.removeAll()
            for w in waiters { w.resume() }
        }
    }

    /// Appends the records queued so far. With a concurrent executor the syncfs and the
    /// append run in order on a serial queue, so the actor never waits on the disk.
    func flushRecords() {
        unflushed = 0
        showRecordsFailure()
        guard records.flush(retryingBacklog: true) else { return }
        lastAppendAt = clock.now
        // A write that ran at once (an immediate scheduler) shows its outcome now.
        showRecordsFailure()
    }

    static var recordsError: String { "cannot write records: " }

    /// The root's "cannot write records" error, as the appender's state says now: set while
    /// its appends fail, gone once one succeeded. The reports below only ask for this, so
    /// their order does not matter.
    @discardableResult
    func showRecordsFailure() -> Bool {
        let shown = errors[.root]?.hasPrefix(SyncManager.recordsError) == true
        if let failure = records.failure {
            errors[.root] = SyncManager.recordsError + failure.message
        } else if shown {
            errors[.root] = nil
            return true
        }
        return false
    }

    /// Shows the writer's failure again when a write failed or recovered since the last look.
    func lookAtRecordWrites() {
        guard records.outcomes != seenRecordOutcomes else { return }
        seenRecordOutcomes = records.outcomes
        showRecordsFailure()
    }

    /// Waits until every record write handed to the queue is done.
    public func drainRecords() async {
        await records.drain()
    }

    /// Appends queued records and rewrites the store compactly.
    public func compactRecords() async throws {
        flushRecords()
        await records.drain()
        lookAtRecordWrites()
        // Records follow the mirror: a change whose append failed is not durable yet.
        try mirror.barrier()
        try engine.store.compact(engine.records)
        records.clearBacklog()
    }

    /// Queues a rewrite of the store as the records, in turn with the appends, so that
    /// the log does not grow for as long as the agent runs; copies go on meanwhile.
    public func compactRecordsInBackground() {
        flushRecords()
        records.compact(engine.records)
    }

    /// True when nothing is pending, queued or copying.
    public var isIdle: Bool {
        pending.isEmpty && copyQueue.isEmpty && inFlight.isEmpty && !fullResyncRequested && directoriesToFix.isEmpty
    }

    /// Returns once the manager is idle.
    public func waitUntilIdle() async {
        if isIdle { return }
        await withCheckedContinuation { idleWaiters.append($0) }
    }

    /// Status numbers.
    public func snapshot() -> Snapshot {
        lookAtRecordWrites()
        let files = engine.records.records.regularFiles
        let bytes = engine.records.records.regularBytes
        var queuedPaths = Set(pending.paths)
        queuedPaths.formUnion(queued)
        queuedPaths.formUnion(inFlight.keys)
        return Snapshot(pending: queuedPaths.count, errors: errors, files: files, bytes: bytes,
                        heldDeletes: heldDeletes, fullPasses: fullPasses, resyncing: resyncing,
                        copiedFiles: copiedFiles, copiedBytes: copiedBytes, passPlanned: passPlanned, passCopied: passCopied)
    }

    // MARK: Driving

    /// Processes what is due, as events arrive through `receive`, until `stop`;
    /// returns after the copies in flight ended and the records are appended.
    public func run() async {
        while !stopping {
            processDue()
            if stopping { break }
            // Let copy completions and events waiting for the actor in first, even when
            // something is already due again (a slow pass must not starve them).
            await Task.yield()
            await sleep(until: nextDeadline())
        }
        while !inFlight.isEmpty { await waitForSignal() }
        finishRound()
        await drainRecords()
        // One more try for appends that failed.
        if records.hasBacklog {
            flushRecords()
            await drainRecords()
        }
    }

    /// Feeds a watcher's events to `receive` until the stream ends.
    public nonisolated func consume(_ events: AsyncStream<WatchEvent>) async {
        for await event in events { await receive(event) }
    }

    /// True once `stop` was called or a full pass found the root lost (`run` returns).
    public var hasStopped: Bool { stopping }

    /// Makes `run` return after the copies in flight end.
    public func stop() {
        stopping = true
        signal()
    }

    func signal() {
        if let c = wakeContinuation {
            wakeContinuation = nil
            c.resume()
        } else {
            woken = true
        }
    }

    func waitForSignal() async {
        if woken {
            woken = false
            return
        }
        await withCheckedContinuation { wakeContinuation = $0 }
        woken = false
    }

    func sleep(until deadline: C.Instant?) async {
        guard let deadline else { return await waitForSignal() }
        if deadline <= clock.now { return }
        if woken {
            woken = false
            return
        }
        let clock = self.clock
        let timer = Task {
            try? await clock.sleep(until: deadline, tolerance: nil)
            if !Task.isCancelled { self.signal() }
        }
        await waitForSignal()
        timer.cancel()
    }
}
