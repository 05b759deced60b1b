/// One mirror's life within a watcher's generation: its managers, its pauses.
extension Agent {
    /// Runs link `i`'s managers until stop or a lost source (which ends every link's).
    /// When its own mirror is away (missing, replaced: a disk unplugged) it pauses alone:
    /// out of the fan-out, nothing queued (a full pass on return covers what it missed),
    /// its trees closed; the others go on.
    /// `first`: its first manager, made with the others' (their passes share a walk).
    func runLink(_ i: Int, first: LinkRun? = nil) async throws {
        var next = first
        // Whether the reason to wait was logged (by the manager that found it).
        var logged = false
        while !stopRequested, sourceProblem == nil {
            if let away = links[i].away {
                try await waitForMirror(i, away, logged: logged)
                guard !stopRequested, sourceProblem == nil else { return }
            }
            let run = try next ?? makeManager(i)
            next = nil
            let manager = await drive(i, run)
            guard !stopRequested, let problem = await manager.rootLost else { return }
            if MirrorSafety.isMirrorProblem(problem) {
                links[i].away = problem
                logged = true
                // A write the stopped manager still holds must not land after the next one's;
                // then its trees go, so that nothing holds an unplugged disk's file system.
                await manager.drainRecords()
                links[i].manager = nil
                continue
            }
            // The source: every mirror stops and waits for it (`run`).
            if sourceProblem == nil {
                sourceProblem = problem
                for other in links where other.manager !== manager { await other.manager?.stop() }
            }
            return
        }
    }

    /// Pauses link `i` (`away` says why) until its recorded mirror is back, the agent stops
    /// or the source is lost.
    func waitForMirror(_ i: Int, _ away: String, logged: Bool) async throws {
        links[i].state = .paused(reason: away)
        writeStatus(i, snapshot: nil, extraErrors: [(".", away)], force: true)
        publishLine(await currentLines())
        // The reason names the mirror.
        if logged { logger.info("mirror \(links[i].name) paused until it is back") } else { logger.error("\(away); paused until it is back") }
        while !stopRequested, sourceProblem == nil, linkProblem(i) != nil {
            try? await clock.sleep(for: .milliseconds(500))
        }
        guard !stopRequested, sourceProblem == nil else { return }
        logger.info("mirror \(links[i].name) is back; resuming with a full resync")
        links[i].away = nil
        links[i].records = try links[i].store.load()
    }

    /// Why link `i`'s roots cannot be used now, or nil.
    func linkProblem(_ i: Int) -> String? {
        let link = links[i]
        return Agent.rootProblem(host: link.host, settings: link.settings, identity: link.identity, recordedEntries: 1,
                                 mirror: link.root)
    }

    /// A manager of link `i` and the trees it works on.
    struct LinkRun {
        let manager: SyncManager<C>
        let source: any FileSystemProviding
        let mirror: any MirrorProviding
    }

    /// A manager of link `i` over newly opened trees, fed by the watcher from now on (before
    /// its full pass).
    func makeManager(_ i: Int) throws -> LinkRun {
        let link = links[i], settings = link.settings, log = logger(for: settings)
        let trees = try link.host.openTrees(settings, limits: link.records.mirror?.limits ?? .none,
                                            cancellation: cancellation, live: true)
        let copies = link.host.copies
        // With several mirrors, one walk of the source serves the passes that run together.
        let source = links.count > 1 ? SharedListingTree(base: trees.source, listings: listings, member: i) : trees.source
        let engine = SyncEngine(source: source, mirror: trees.mirror, store: link.store, records: link.records,
                                options: settings.options, logger: log,
                                recordScheduler: copies.executor.recordScheduler ?? .serialQueue())
        engine.scanIO = copies.scanIO
        engine.heartbeat = heartbeat
        let host = link.host, identity = link.identity, mirror = link.records.mirror
        let manager = SyncManager(engine: engine, clock: clock,
                                  timing: timing(settings), executor: copies.executor, logger: log, io: copies.io,
                                  rootCheck: { entries in
                                      Agent.rootProblem(host: host, settings: settings, identity: identity,
                                                        recordedEntries: entries, mirror: mirror)
                                  })
        links[i].manager = manager
        links[i].state = .syncing
        links[i].seenPasses = 0
        fanout.add(manager)
        return LinkRun(manager: manager, source: trees.source, mirror: trees.mirror)
    }

    /// Runs `run`'s manager from its full pass until it stops or finds a root lost; returns it.
    func drive(_ i: Int, _ run: LinkRun) async -> SyncManager<C> {
        let manager = run.manager, settings = links[i].settings, log = logger(for: settings)
        defer { fanout.remove(manager) }
        settings.warnIfSourceHoldsVersions(run.source, logger: log)
        // Versions past retention go in the background, at start and hourly.
        let thinner = settings.versions.flatMap { versions in
            VersionStore.of(run.mirror).map { VersionThinner(store: $0.store, keep: versions.keepSeconds, now: $0.now, logger: log) }
        }
        defer { thinner?.stop() }
        // status.json's "versions", counted once a minute; the last count outlives the manager.
        if settings.versions != nil, let kept = VersionStore.of(run.mirror) {
            links[i].versionCounter = VersionCounter(store: kept.store)
        }
        let counter = links[i].versionCounter
        defer { counter?.stop() }
        // Its pass takes the listings other passes make from now on (it is fed since).
        listings.begin(i)
        defer { listings.end(i) }
        await manager.requestFullResync()
        await manager.run()
        return manager
    }

    /// Full passes of every mirror that mirrors now; each shares what the others list once
    /// it has begun. Not begun here: a running manager may take events before its pass
    /// starts, and a listing made before that is not its pass's.
    func requestFullResyncs() async {
        for link in links { await link.manager?.requestFullResync() }
    }
}
