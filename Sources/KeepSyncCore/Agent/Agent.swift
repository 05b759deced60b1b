import Dispatch

/// `keepsync run`: the long-running agent. Takes the lock, starts watching (watch first,
/// then the initial full pass, so nothing falls in between), feeds events to the
/// SyncManager, reports status, and handles signals. When the source root vanishes it
/// stops mirroring, reports, and resumes with a full resync when the root is back.
/// Reads time only through `clock`; everything of the machine comes through `host`.
public actor Agent<C: Clock> where C.Duration == Duration {
    var settings: Settings
    let reload: @Sendable () throws -> Settings
    let host: any AgentHost
    let logger: Logger
    let notifier: any Notifier
    let progress: any ProgressDisplay
    let clock: C
    let startedAt: C.Instant
    var status: StatusPublisher<C>
    /// Set on SIGTERM: copies in progress give up.
    public nonisolated let cancellation = CancellationFlag()
    /// The mirror, from its records' preparation to the stop.
    var link: MirrorLink<C>?
    /// The current generation's manager.
    var manager: SyncManager<C>? { link?.manager }
    /// The current watcher (a reload replaces it) and the task feeding its events.
    var watcher: (any WatcherProviding)?
    /// Watchers whose `start` (a walk of the tree: 10 s on 200,000 directories) is under
    /// way, off the actor, by a number of their own: a SIGTERM, or a reload's new watcher,
    /// stops them.
    var starting: [Int: any WatcherProviding] = [:]
    var startsMade = 0
    var consumer: Task<Void, Never>?
    var stopRequested = false
    var state = AgentState.starting
    var lastFullSync: String?
    var seenPasses = 0
    /// The full passes whose memory was given back (`AgentHost.releaseMemory`).
    var releasedAfterPasses = 0
    var rootProblem: String?
    /// Counts the mirror's versions for status.json (versions on).
    var versionCounter: VersionCounter?
    /// The source root's recorded identity.
    var rootIdentity: FileIdentity?
    /// What the watchdog listens to (see `Watchdog`).
    public nonisolated let heartbeat = Heartbeat()
    /// The actor's thread, as the manager has one: the agent's blocking steps (the records'
    /// load, the trees' open) hold it, never a thread of Swift's cooperative pool.
    nonisolated let thread = ManagerThread(label: "keepsync.agent")

    /// The actor's executor: its thread.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    deinit { thread.close() }

    /// An agent for `settings`; `reload` resolves them again on SIGHUP.
    public init(settings: Settings, host: any AgentHost, notifier: any Notifier, statusWriter: any StatusWriter,
                progress: any ProgressDisplay, clock: C, logger: Logger,
                reload: @escaping @Sendable () throws -> Settings) {
        self.settings = settings
        self.host = host
        self.notifier = notifier
        self.progress = progress
        self.clock = clock
        self.logger = logger
        self.reload = reload
        startedAt = clock.now
        status = StatusPublisher(notifier: notifier, writer: statusWriter)
    }

    var timing: SyncManager<C>.Timing {
        .init(settle: .milliseconds(settings.configuration.settleMilliseconds),
              maxDelay: .milliseconds(settings.configuration.maxDelayMilliseconds),
              verifyInterval: settings.configuration.verifyIntervalSeconds > 0
                ? .seconds(settings.configuration.verifyIntervalSeconds) : nil)
    }

    /// Runs until `signals` says terminate or interrupt; returns the exit code.
    public func run<S: AsyncSequence & Sendable>(signals: S) async throws -> ExitCode
        where S.Element == AgentSignal, S.Failure == Never {
        let watchdog = notifier.watchdogInterval.map { interval in
            let dog = Watchdog(heartbeat: heartbeat, ping: { [notifier] in notifier.watchdog() },
                               probe: { await self.answerProbe() })
            // Twice per interval: one tick that finds no beat leaves a gap of half of it.
            return host.repeating(every: interval / 2) { dog.tick() }
        }
        defer { watchdog?.cancel() }
        // Both trees are read from the disk while the records load (on 1M entries, 1.6 s).
        let stopReading = host.readAhead(settings)
        let prepared: PreparedRecords
        do {
            defer { stopReading() }
            prepared = try host.prepare(settings, logger: logger, heartbeat: heartbeat, pausingForMirror: true) { _, message in
                writeStatus(state: .refused(reason: message), snapshot: nil, extraErrors: [(".", message)], force: true)
            }
        }
        defer { prepared.release() }
        let store = prepared.store
        var records = prepared.records
        records.root = FileIdentity(device: prepared.root.device, inode: prepared.root.inode)
        rootIdentity = records.root
        link = MirrorLink(store: store, root: records.mirror)
        try store.apply([.setRoot(records.root!)])
        // Signals are messages to the actor, each handled in a task of its own: a SIGTERM
        // must not wait for a reload held by a busy manager.
        let signalTask = Task {
            for await signal in signals {
                Task { await self.handle(signal) }
            }
        }
        defer { signalTask.cancel() }
        let statusTask = Task { await self.statusLoop() }
        defer { statusTask.cancel() }

        // A mirror away at start (a USB disk not plugged in yet) is waited for, as one
        // that goes while the agent runs.
        rootProblem = prepared.mirrorAway
        while !stopRequested {
            if rootProblem == nil {
                try await runGeneration(store: store, records: records)
            }
            if stopRequested { break }
            guard let problem = rootProblem else { break }
            // The root vanished or was replaced: wait for the recorded one to come back.
            state = .paused(reason: problem)
            writeStatus(state: state, snapshot: nil, extraErrors: [(".", problem)], force: true)
            // Paused from the start, the service has started all the same: it waits.
            if status.readySent { status.notify(StatusLine.paused(problem)) } else { status.ready(StatusLine.paused(problem)) }
            logger.error("\(problem); mirroring paused until it is back")
            // A write the stopped manager still holds must not land after the next one's;
            // then its trees go, so that nothing holds an unplugged disk's file system.
            if let manager { await manager.drainRecords() }
            link?.manager = nil
            while !stopRequested, checkRoot(recordedEntries: 1, identity: records.root) != nil {
                try? await clock.sleep(for: .milliseconds(500))
            }
            if stopRequested { break }
            logger.info(problem.hasPrefix("mirror") ? "mirror \(settings.mirrorName) is back; resuming with a full resync"
                        : "source \(settings.sourceName) is back; resuming with a full resync")
            rootProblem = nil
            records = try store.load()
        }
        statusTask.cancel()
        await statusTask.value
        if let manager { try? await manager.compactRecords() }
        if !stopRequested { notifier.stopping() }
        state = .stopped
        await writeStatusNow(force: true)
        if let snapshot = await manager?.snapshot() {
            let elapsed = startedAt.duration(to: clock.now).components.seconds
            logger.info("stopped after \(elapsed)s: \(snapshot.copiedFiles) files copied (\(ByteSize.human(snapshot.copiedBytes))), mirror holds \(snapshot.files) files, \(snapshot.errors.count) errors")
        } else {
            logger.info("stopped")
        }
        return .success
    }

    /// One watcher + manager lifetime, until stop or a lost root.
    func runGeneration(store: any AgentRecordStore, records: RecordSet) async throws {
        let trees = try host.openTrees(settings, limits: records.mirror?.limits ?? .none, cancellation: cancellation, live: true)
        let copies = host.copies
        let engine = SyncEngine(source: trees.source, mirror: trees.mirror, store: store, records: records,
                                options: settings.options, logger: logger,
                                recordScheduler: copies.executor.recordScheduler ?? .serialQueue())
        engine.scanIO = copies.scanIO
        engine.heartbeat = heartbeat
        let host = self.host, settings = self.settings, identity = records.root, mirror = records.mirror
        let manager = SyncManager(engine: engine, clock: clock,
                                  timing: timing, executor: copies.executor, logger: logger, io: copies.io,
                                  rootCheck: { entries in
                                      Agent.rootProblem(host: host, settings: settings, identity: identity,
                                                        recordedEntries: entries, mirror: mirror)
                                  })
        link?.manager = manager
        let watcher = host.makeWatcher(settings, logger: logger, heartbeat: heartbeat, cancellation: cancellation)
        self.watcher = watcher
        // The watcher's walk is sequential (watch, then list): readers ahead of it fill
        // the cache from a cold disk many directories at a time.
        let stopWarming = host.warmDirectories(settings)
        let events: AsyncStream<WatchEvent>
        do {
            events = try await start(watcher)
            stopWarming()
        } catch {
            stopWarming()
            throw error
        }
        consumer = Task { await SyncManager.feed(events, to: [manager]) }
        state = .syncing
        settings.warnIfSourceHoldsVersions(trees.source, logger: logger)
        // Versions past retention go in the background, at start and hourly.
        let thinner = settings.versions.flatMap { versions in
            VersionStore.of(trees.mirror).map { VersionThinner(store: $0.store, keep: versions.keepSeconds, now: $0.now, logger: logger) }
        }
        defer { thinner?.stop() }
        // status.json's "versions", counted once a minute; the last count outlives the generation.
        if settings.versions != nil, let kept = VersionStore.of(trees.mirror) {
            versionCounter = VersionCounter(store: kept.store)
        }
        let counter = versionCounter
        defer { counter?.stop() }
        await manager.requestFullResync()
        await manager.run()
        // The current watcher: a reload may have replaced the one started here.
        self.watcher?.stop()
        consumer?.cancel()
        rootProblem = await manager.rootLost
    }

    func checkRoot(recordedEntries: Int, identity: FileIdentity?) -> String? {
        Agent.rootProblem(host: host, settings: settings, identity: identity, recordedEntries: recordedEntries,
                          mirror: link?.root)
    }

    /// Why the source root cannot be trusted now, or the mirror root not written, or nil.
    static func rootProblem(host: any AgentHost, settings: Settings, identity: FileIdentity?, recordedEntries: Int,
                            mirror: MirrorRoot?) -> String? {
        let path = settings.source
        if let problem = SourceRootCheck.problem(name: settings.sourceName, stat: host.sourceRootStat(path), identity: identity,
                                                 recordedEntries: recordedEntries, isEmpty: { host.sourceRootIsEmpty(path) }) {
            return problem
        }
        // The mirror root checked at start is the one written to, whatever the records hold.
        // One that cannot be asked now (its host is away) is asked at the next pass.
        guard let mirror else { return nil }
        let current: MirrorRoot?
        do { current = try host.mirrorRoot(settings.mirror) } catch { return nil }
        return MirrorSafety.problem(name: settings.mirrorName, recorded: mirror, recordedEntries: 1, rootRecordInode: nil,
                                    current: current)
    }

    /// Starts `watcher`: its walk runs on a thread of its own while the actor stays free
    /// for a SIGTERM, which stops it (the stream then comes back finished).
    func start(_ watcher: any WatcherProviding) async throws -> AsyncStream<WatchEvent> {
        startsMade += 1
        let token = startsMade
        starting[token] = watcher
        defer { starting[token] = nil }
        // Stopping already: no walk (`handle` ends the generation).
        if cancellation.isSet { return AsyncStream { $0.finish() } }
        let excludes = settings.excludes
        return try await withCheckedThrowingContinuation { done in
            DispatchQueue(label: "keepsync.walk").async {
                done.resume(with: Result { try watcher.start(excluding: excludes) })
            }
        }
    }

    // MARK: Signals

    func handle(_ signal: AgentSignal) async {
        switch signal {
        case .resync:
            logger.info("SIGUSR1: full resync")
            await manager?.requestFullResync()
        case .hangup:
            logger.info("SIGHUP: reloading the configuration")
            await reloadConfiguration()
        case .terminate, .interrupt:
            logger.info("\(signal.name): stopping")
            // Copies and a walk under way give up at once.
            cancellation.set()
            for walking in starting.values { walking.stop() }
            stopRequested = true
            notifier.stopping()
            watcher?.stop()
            await manager?.stop()
        }
    }

    func reloadConfiguration() async {
        guard !stopRequested else { return }
        // Before the first READY=1 the service manager is still starting us: no reload to
        // announce. A SIGTERM that lands meanwhile wins: no READY=1 after STOPPING=1, no
        // new watcher.
        let announce = status.readySent
        if announce { notifier.reloading() }
        defer { if announce && !stopRequested { notifier.ready(status: nil) } }
        let fresh: Settings
        do { fresh = try reload() } catch {
            logger.error("configuration not reloaded, keeping the old one: \((error as? KeepSyncError)?.description ?? "\(error)")")
            return
        }
        if fresh.source != settings.source || fresh.mirror != settings.mirror || fresh.state != settings.state {
            logger.warning("source, mirror and state take effect on restart; keeping the current ones")
        }
        var next = fresh
        next.source = settings.source
        next.mirror = settings.mirror
        next.remote = settings.remote
        next.state = settings.state
        settings = next
        guard let manager else { return }
        await manager.reconfigure(timing: timing, options: settings.options)
        // Stopping, or the root was lost meanwhile (its generation has ended): no watcher.
        guard manager === self.manager, await !manager.hasStopped, !stopRequested, rootProblem == nil else { return }
        // A new watcher with the new excludes; the full resync covers the switch-over.
        let old = watcher
        // A walk still under way follows the old excludes: it ends, and this one replaces it.
        for walking in starting.values { walking.stop() }
        let watcher = host.makeWatcher(settings, logger: logger, heartbeat: heartbeat, cancellation: cancellation)
        do {
            let events = try await start(watcher)
            self.watcher = watcher
            consumer = Task { await SyncManager.feed(events, to: [manager]) }
            old?.stop()
        } catch {
            logger.error("cannot restart watching: \(error)")
        }
        await manager.requestFullResync()
    }

    /// Returns once the agent and its manager are free to answer (a watchdog probe).
    func answerProbe() async {
        if let manager { _ = await manager.hasStopped }
    }

    // MARK: Status

    func statusLoop() async {
        var ticks = 0
        while !Task.isCancelled {
            await writeStatusNow(force: false)
            ticks += 1
            if ticks % 4 == 0 {
                await watchRoot()
                await compactIfLogIsLong()
            }
            try? await clock.sleep(for: .milliseconds(250))
        }
    }

    /// Once a second: a source root that vanished or was replaced without an inotify
    /// event reaching us (a lazy unmount) stops mirroring through the full pass's check.
    func watchRoot() async {
        guard let manager, !state.isError, rootProblem == nil,
              checkRoot(recordedEntries: 0, identity: rootIdentity) != nil else { return }
        await manager.requestFullResync()
    }

    /// Once a second: a records log longer than the snapshot (and 1 MiB) is folded into a
    /// new snapshot, so that neither the disk nor the next start pays for every change
    /// since the agent started. Until one is written, asked again only after 30 s.
    func compactIfLogIsLong() async {
        guard let manager, let store = link?.store, !stopRequested, rootProblem == nil, !state.isError, store.needsCompaction else { return }
        let now = clock.now
        if let asked = link?.compactionAsked, asked.snapshot == store.snapshotLength, asked.at.duration(to: now) < .seconds(30) {
            return
        }
        link?.compactionAsked = (now, store.snapshotLength)
        logger.debug("records log \(store.logLength) bytes, snapshot \(store.snapshotLength): compacting")
        await manager.compactRecordsInBackground()
    }

    func writeStatusNow(force: Bool) async {
        guard let manager else {
            // Stopped while paused: status says so.
            if state == .stopped { writeStatus(state: state, snapshot: nil, extraErrors: [], force: force) }
            return
        }
        let snapshot = await manager.snapshot()
        if snapshot.fullPasses > seenPasses {
            seenPasses = snapshot.fullPasses
            lastFullSync = host.timestamp()
        }
        if state == .syncing, !status.readySent, progress.isActive, snapshot.passPlanned.files > 0 {
            progress.update(ByteSize.progress(
                files: snapshot.passCopied.files, totalFiles: snapshot.passPlanned.files, bytes: snapshot.passCopied.bytes,
                totalBytes: snapshot.passPlanned.bytes, seconds: ByteSize.seconds(startedAt.duration(to: clock.now))))
        }
        // A full pass's memory (one step per path) is freed when it ends; once its copies
        // are done too, it goes back to the system.
        if snapshot.pending == 0, seenPasses > releasedAfterPasses {
            releasedAfterPasses = seenPasses
            host.releaseMemory()
        }
        if state == .syncing, seenPasses > 0, snapshot.pending == 0 {
            state = .watching
            progress.finish(nil)
            logger.info("initial sync done: \(snapshot.files) file\(snapshot.files == 1 ? "" : "s"), watching")
        }
        let current = state == .watching && snapshot.resyncing ? AgentState.syncing : state
        var extra: [(String, String)] = []
        let unwatched = current == .stopped ? 0 : watcher?.unwatchedDirectories ?? 0
        let period = watcher?.pollPeriod
        if unwatched > 0 {
            let every = period.map { " (polled every \(Int(ByteSize.seconds($0).rounded())) s)" } ?? ""
            extra.append((".", "watch limit reached: \(unwatched) directories are not watched\(every); raise it with sysctl fs.inotify.max_user_watches=N"))
        }
        let since = noteUnreachable(snapshot.unreachable)
        writeStatus(state: current, snapshot: snapshot, extraErrors: extra, force: force,
                    unwatched: (unwatched, period))
        var line = StatusLine.text(state: current, snapshot: snapshot, readySent: status.readySent)
        if let since { line = "remote unreachable since \(since), " + line }
        // After STOPPING=1 (a SIGTERM during the initial sync) no READY=1. A host that
        // cannot be reached does not hold READY back: the agent watches and waits for it.
        if (current == .watching || link?.unreachableSince != nil) && !status.readySent && !stopRequested {
            status.ready(line)
        } else {
            status.notify(line)
        }
    }

    /// Notes when the mirror's host stopped answering (logged once per outage); returns
    /// that time while it lasts.
    func noteUnreachable(_ message: String?) -> String? {
        guard let message else {
            link?.unreachableSince = nil
            return nil
        }
        if link?.unreachableSince == nil {
            let since = host.timestamp()
            link?.unreachableSince = since
            logger.warning("remote unreachable since \(since): \(message); changes wait, retrying")
        }
        return link?.unreachableSince
    }

    func writeStatus(state: AgentState, snapshot: SyncManager<C>.Snapshot?, extraErrors: [(String, String)], force: Bool,
                     unwatched: (count: Int, period: Duration?) = (0, nil)) {
        let errors = extraErrors.map { (path: $0.0, message: $0.1) }
            + (snapshot?.errors ?? [:]).sorted { $0.key < $1.key }.map { (path: $0.key.escaped, message: $0.value) }
        let report = StatusReport(state: state.name, pid: host.processID, source: settings.sourceName,
                                  mirror: settings.mirrorName, files: snapshot?.files ?? 0,
                                  bytes: snapshot?.bytes ?? 0, pending: snapshot?.pending ?? 0,
                                  lastFullSync: lastFullSync, heldDeletes: snapshot?.heldDeletes ?? 0, errors: errors)
        var withLimits = report
        withLimits.mirrorLimits = snapshot?.mirrorLimits
        withLimits.skipped = (snapshot?.skipped ?? []).map(\.escaped)
        withLimits.unwatchedDirectories = unwatched.count
        withLimits.pollSeconds = unwatched.period.map(ByteSize.seconds)
        withLimits.versions = versionCounter?.summary
        if let remote = settings.remote {
            withLimits.remote = remote.host
            withLimits.lagSeconds = (snapshot?.lag).map { (ByteSize.seconds($0) * 10).rounded() / 10 } ?? 0
            if let since = link?.unreachableSince, let message = snapshot?.unreachable,
               let at = withLimits.errors.firstIndex(where: { $0.path == "." && $0.message == message }) {
                withLimits.errors[at].message = "remote unreachable since \(since): " + withLimits.errors[at].message
            }
        }
        status.write(withLimits, force: force, now: clock.now)
    }
}
