import Dispatch

/// `keepsync run`: the long-running agent. Takes each mirror's lock and records, starts
/// one watcher of the source (watch first, then each mirror's initial full pass, so
/// nothing falls in between), hands its events to every mirror's manager, reports status,
/// and handles signals. A mirror that is away pauses alone (`Agent+Link`); a source root
/// that vanishes stops every mirror until the recorded one is back. Reads time only
/// through `clock`; everything of the machine comes through the hosts (one per mirror:
/// a remote mirror's connection is its own; the first also watches the source).
public actor Agent<C: Clock> where C.Duration == Duration {
    /// One per mirror, in order; the source, excludes, settle and max-delay are the same in each.
    var mirrors: [Settings]
    let reload: @Sendable () throws -> [Settings]
    let hosts: [any AgentHost]
    let writers: [any StatusWriter]
    let logger: Logger
    let notifier: any Notifier
    let progress: any ProgressDisplay
    let clock: C
    let startedAt: C.Instant
    var status: StatusPublisher
    /// Set on SIGTERM: copies in progress give up.
    public nonisolated let cancellation = CancellationFlag()
    /// The mirrors, from their records' preparation to the stop.
    var links: [MirrorLink<C>] = []
    /// The managers the watcher's events go to.
    let fanout = WatchFanout<C>()
    /// The source's listings, shared by the mirrors' passes that run together.
    public nonisolated let listings = SourceListings()
    /// The current watcher (a reload replaces it) and the task feeding its events.
    var watcher: (any WatcherProviding)?
    /// Watchers whose `start` (a walk of the tree: 10 s on 200,000 directories) is under
    /// way, off the actor, by a number of their own: a SIGTERM, or a reload's new watcher,
    /// stops them.
    var starting: [Int: any WatcherProviding] = [:]
    var startsMade = 0
    var consumer: Task<Void, Never>?
    var stopRequested = false
    /// Why the source cannot be trusted now: every mirror waits for it, no watcher runs.
    var sourceProblem: String?
    /// The full passes (all mirrors together) whose memory was given back.
    var releasedAfterPasses = 0
    /// What the watchdog listens to (see `Watchdog`).
    public nonisolated let heartbeat = Heartbeat()
    /// The actor's thread, as the manager has one: the agent's blocking steps (the records'
    /// load, the trees' open) hold it, never a thread of Swift's cooperative pool.
    nonisolated let thread = ManagerThread(label: "keepsync.agent")

    /// The actor's executor: its thread.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { thread.asUnownedSerialExecutor() }

    deinit { thread.close() }

    /// An agent for one mirror: `settings`; `reload` resolves them again on SIGHUP.
    public init(settings: Settings, host: any AgentHost, notifier: any Notifier, statusWriter: any StatusWriter,
                progress: any ProgressDisplay, clock: C, logger: Logger,
                reload: @escaping @Sendable () throws -> Settings) {
        self.init(mirrors: [settings], hosts: [host], notifier: notifier, statusWriters: [statusWriter],
                  progress: progress, clock: clock, logger: logger, reload: { [try reload()] })
    }

    /// An agent for several mirrors of one source (SPEC "Several mirrors"): `mirrors[i]`
    /// on `hosts[i]`, its status.json through `statusWriters[i]`; `reload` resolves them
    /// again on SIGHUP.
    public init(mirrors: [Settings], hosts: [any AgentHost], notifier: any Notifier, statusWriters: [any StatusWriter],
                progress: any ProgressDisplay, clock: C, logger: Logger,
                reload: @escaping @Sendable () throws -> [Settings]) {
        precondition(!mirrors.isEmpty && mirrors.count == hosts.count && hosts.count == statusWriters.count)
        self.mirrors = mirrors
        self.hosts = hosts
        writers = statusWriters
        self.notifier = notifier
        self.progress = progress
        self.clock = clock
        self.logger = logger
        self.reload = reload
        startedAt = clock.now
        status = StatusPublisher(notifier: notifier)
    }

    /// The source's settings (the first mirror's).
    var settings: Settings { mirrors[0] }
    /// The source's machine: the watcher, the timers, the process.
    var host: any AgentHost { hosts[0] }
    /// Each mirror's lines name it when there are several.
    func logger(for settings: Settings) -> Logger {
        mirrors.count > 1 ? logger.prefixed("mirror \(settings.mirrorLabel): ") : logger
    }

    /// A manager's timing under `settings` (its own verify interval).
    func timing(_ settings: Settings) -> SyncManager<C>.Timing {
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
        defer { for link in links { link.release() } }
        try prepareLinks()
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

        while !stopRequested {
            try await runGeneration()
            if stopRequested { break }
            guard let problem = sourceProblem else { break }
            // The source vanished or was replaced: every mirror waits for the recorded one.
            // A write a stopped manager still holds must not land after the next one's; then
            // its trees go.
            for i in links.indices {
                if let manager = links[i].manager { await manager.drainRecords() }
                links[i].manager = nil
                links[i].state = .paused(reason: problem)
            }
            for i in links.indices { writeStatus(i, snapshot: nil, extraErrors: [(".", problem)], force: true) }
            status.notify(StatusLine.paused(problem))
            logger.error("\(problem); mirroring paused until it is back")
            while !stopRequested, sourceCheck(identity: links[0].identity) != nil {
                try? await clock.sleep(for: .milliseconds(500))
            }
            if stopRequested { break }
            logger.info("source \(settings.sourceName) is back; resuming with a full resync")
            sourceProblem = nil
            for i in links.indices {
                links[i].records = try links[i].store.load()
                links[i].state = .syncing
            }
        }
        statusTask.cancel()
        await statusTask.value
        for link in links { if let manager = link.manager { try? await manager.compactRecords() } }
        if !stopRequested { notifier.stopping() }
        for i in links.indices { links[i].state = .stopped }
        await writeStatusNow(force: true)
        for link in links {
            let log = logger(for: link.settings)
            if let snapshot = await link.manager?.snapshot() {
                let elapsed = startedAt.duration(to: clock.now).components.seconds
                log.info("stopped after \(elapsed)s: \(snapshot.copiedFiles) files copied (\(ByteSize.human(snapshot.copiedBytes))), mirror holds \(snapshot.files) files, \(snapshot.errors.count) errors")
            } else {
                log.info("stopped")
            }
        }
        return .success
    }

    /// Takes each mirror's lock and records (both trees read ahead meanwhile); a refusal
    /// of any (the source, a held lock) ends the run, the others' locks released.
    func prepareLinks() throws {
        for (i, settings) in mirrors.enumerated() {
            // Both trees are read from the disk while the records load (on 1M entries, 1.6 s).
            let stopReading = hosts[i].readAhead(settings)
            defer { stopReading() }
            let writer = writers[i], processID = host.processID, clock = clock
            let prepared = try hosts[i].prepare(settings, logger: logger(for: settings), heartbeat: heartbeat,
                                                pausingForMirror: true) { _, message in
                var file = StatusFile<C>(writer: writer)
                file.write(Self.report(settings, processID: processID, state: .refused(reason: message), snapshot: nil,
                                       errors: [(".", message)], lastFullSync: nil), force: true, now: clock.now)
            }
            let link = MirrorLink<C>(settings: settings, host: hosts[i], prepared: prepared, writer: writers[i])
            links.append(link)
            try link.store.apply([.setRoot(link.identity!)])
        }
    }

    /// One watcher's lifetime, every mirror fed by it, until stop or a lost source.
    func runGeneration() async throws {
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
        let fanout = self.fanout
        consumer = Task { await SyncManager.feed(events, to: fanout) }
        // Every manager first, each fed from now on: their passes start together and share
        // one walk of the source.
        var first: [Int: LinkRun] = [:]
        for i in links.indices where links[i].away == nil { first[i] = try makeManager(i) }
        for i in first.keys { listings.begin(i) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in links.indices {
                let run = first[i]
                group.addTask { try await self.runLink(i, first: run) }
            }
            try await group.waitForAll()
        }
        // The current watcher: a reload may have replaced the one started here.
        self.watcher?.stop()
        self.watcher = nil
        consumer?.cancel()
    }

    /// Why the source root cannot be trusted now (against the recorded `identity`), or nil.
    func sourceCheck(identity: FileIdentity?) -> String? {
        let path = settings.source, host = self.host
        return SourceRootCheck.problem(name: settings.sourceName, stat: host.sourceRootStat(path), identity: identity,
                                       recordedEntries: 1, isEmpty: { host.sourceRootIsEmpty(path) })
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
            await requestFullResyncs()
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
            for link in links { await link.manager?.stop() }
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
        let fresh: [Settings]
        do { fresh = try reload() } catch {
            logger.error("configuration not reloaded, keeping the old one: \((error as? KeepSyncError)?.description ?? "\(error)")")
            return
        }
        let kept = fresh.count == mirrors.count && zip(fresh, mirrors).allSatisfy {
            $0.source == $1.source && $0.mirror == $1.mirror && $0.state == $1.state
        }
        if !kept {
            logger.warning("source, mirrors and state take effect on restart; keeping the current ones")
        }
        for i in mirrors.indices {
            var next = kept ? fresh[i] : (fresh.first { $0.mirror == mirrors[i].mirror } ?? fresh[0])
            next.source = mirrors[i].source
            next.mirror = mirrors[i].mirror
            next.remote = mirrors[i].remote
            next.state = mirrors[i].state
            mirrors[i] = next
            links[i].settings = next
            await links[i].manager?.reconfigure(timing: timing(next), options: next.options)
        }
        // Stopping, or the source lost (its generation has ended): no watcher.
        guard !stopRequested, sourceProblem == nil, watcher != nil else { return }
        // A new watcher with the new excludes; the full resync covers the switch-over.
        let old = watcher
        // A walk still under way follows the old excludes: it ends, and this one replaces it.
        for walking in starting.values { walking.stop() }
        let watcher = host.makeWatcher(settings, logger: logger, heartbeat: heartbeat, cancellation: cancellation)
        do {
            let events = try await start(watcher)
            // Stopped or the source lost while it walked: this one goes too.
            guard !stopRequested, sourceProblem == nil else { return watcher.stop() }
            self.watcher = watcher
            let fanout = self.fanout
            consumer = Task { await SyncManager.feed(events, to: fanout) }
            old?.stop()
        } catch {
            logger.error("cannot restart watching: \(error)")
        }
        await requestFullResyncs()
    }

    /// Returns once the agent and its managers are free to answer (a watchdog probe).
    func answerProbe() async {
        for link in links { if let manager = link.manager { _ = await manager.hasStopped } }
    }
}
