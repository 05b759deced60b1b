import Glibc
import Dispatch
import Synchronization
import KeepSyncCore

/// `keepsync run`: the long-running agent. Takes the lock, starts watching (watch
/// first, then the initial full pass, so nothing falls in between), feeds events to
/// the SyncManager, writes status, and handles signals. When the source root vanishes
/// it stops mirroring, reports, and resumes with a full resync when the root is back.
actor Agent {
    var settings: CommandRunner.Settings
    let reload: @Sendable () throws -> CommandRunner.Settings
    let makeWatcher: @Sendable ([UInt8], Logger, Heartbeat) -> any WatcherProviding
    let logger: Logger
    let notifier: SystemdNotifier
    let progress: TerminalProgress
    let startedAt = ContinuousClock.now
    var readySent = false
    var lastNotifiedStatus = ""
    let cancellation = CancellationFlag()
    var manager: SyncManager<ContinuousClock>?
    /// The current watcher (a reload replaces it) and the task feeding its events.
    var watcher: (any WatcherProviding)?
    var consumer: Task<Void, Never>?
    var stopRequested = false
    var state = "starting"
    var lastFullSync: String?
    var seenPasses = 0
    var lastStatus = ""
    /// Set when the last status write failed (a full disk, EIO): the same report is then
    /// written again, else status.json would stay stale until something changed.
    let statusWriteFailed = Atomic<Bool>(false)
    var lastStatusWrite = ContinuousClock.now - .seconds(10)
    var rootProblem: String?
    /// The source root's recorded identity.
    var rootIdentity: RootIdentity?
    /// The records on disk, while running.
    var store: JournalBookmarkStore?
    /// When a rewrite of the records was last asked for, and the snapshot's size then.
    var compactionAsked: (at: ContinuousClock.Instant, snapshot: UInt64)?
    /// What the watchdog listens to (see `Watchdog`).
    let heartbeat = Heartbeat()

    init(settings: CommandRunner.Settings, logger: Logger, notifier: SystemdNotifier, progress: TerminalProgress,
         reload: @escaping @Sendable () throws -> CommandRunner.Settings,
         makeWatcher: @escaping @Sendable ([UInt8], Logger, Heartbeat) -> any WatcherProviding) {
        self.settings = settings
        self.logger = logger
        self.notifier = notifier
        self.progress = progress
        self.reload = reload
        self.makeWatcher = makeWatcher
    }

    var timing: SyncManager<ContinuousClock>.Timing {
        .init(settle: .milliseconds(settings.configuration.settleMilliseconds),
              maxDelay: .milliseconds(settings.configuration.maxDelayMilliseconds),
              verifyInterval: settings.configuration.verifyIntervalSeconds > 0
                ? .seconds(settings.configuration.verifyIntervalSeconds) : nil)
    }

    /// Runs until SIGTERM/SIGINT; returns the exit code.
    func run() async throws -> ExitCode {
        SignalSource.ignoreAll()
        let watchdog = notifier.watchdogInterval.map { interval in
            Watchdog(interval: interval, heartbeat: heartbeat, ping: { [notifier] in notifier.watchdog() },
                     probe: { await self.answerProbe() })
        }
        defer { watchdog?.cancel() }
        let prepared = try PreparedState(settings, logger: logger, heartbeat: heartbeat) { _, message in
            writeStatus(state: "error", snapshot: nil, extraErrors: [(".", message)], force: true)
        }
        defer { prepared.lock.release() }
        let store = prepared.store
        self.store = store
        var records = prepared.records
        let sourceName = HostPaths.display(settings.source)
        records.root = RootIdentity(device: prepared.root.device, inode: prepared.root.inode)
        rootIdentity = records.root
        try store.apply([.setRoot(records.root!)])
        let signals = SignalSource { number in Task { await self.handle(signal: number) } }
        defer { signals.cancel() }
        let statusTask = Task { await self.statusLoop() }

        while !stopRequested {
            try await runGeneration(store: store, records: records)
            if stopRequested { break }
            guard let problem = rootProblem else { break }
            // The root vanished or was replaced: wait for the recorded one to come back.
            state = "error"
            writeStatus(state: "error", snapshot: nil, extraErrors: [(".", problem)], force: true)
            notify(status: "paused: \(problem)")
            logger.error("\(problem); mirroring paused until it is back")
            while !stopRequested, checkRoot(recordedEntries: 1, identity: records.root) != nil {
                try? await Task.sleep(for: .milliseconds(500))
            }
            if stopRequested { break }
            logger.info("source \(sourceName) is back; resuming with a full resync")
            rootProblem = nil
            // A write the stopped manager still holds must not land after the next one's.
            if let manager { await manager.drainRecords() }
            records = try store.load()
        }
        statusTask.cancel()
        await statusTask.value
        if let manager { try? await manager.compactRecords() }
        if !stopRequested { notifier.stopping() }
        state = "stopped"
        await writeStatusNow(force: true)
        if let snapshot = await manager?.snapshot() {
            let elapsed = (ContinuousClock.now - startedAt).components.seconds
            logger.info("stopped after \(elapsed)s: \(snapshot.copiedFiles) files copied (\(StatusText.humanBytes(snapshot.copiedBytes))), mirror holds \(snapshot.files) files, \(snapshot.errors.count) errors")
        } else {
            logger.info("stopped")
        }
        return .success
    }

    /// One watcher + manager lifetime, until stop or a lost root.
    func runGeneration(store: JournalBookmarkStore, records: RecordSet) async throws {
        let sourceTree = try PosixFileSystem(rootPath: settings.source)
        let mirrorTree = LocalMirror(try AtomicFileAccessor(rootPath: settings.mirror, cancellation: cancellation))
        let engine = SyncEngine(source: sourceTree, mirror: mirrorTree, store: store, records: records,
                                options: settings.options, logger: logger)
        engine.scanIO = CommandRunner.scanIO
        engine.heartbeat = heartbeat
        let sourcePath = settings.source
        let identity = records.root
        let manager = SyncManager(engine: engine, source: sourceTree, mirror: mirrorTree, clock: ContinuousClock(),
                                  timing: timing, executor: .dispatch(limit: 4), logger: logger, io: CommandRunner.copyIO,
                                  rootCheck: { entries in Agent.rootProblem(sourcePath, identity: identity, recordedEntries: entries) })
        self.manager = manager
        let watcher = makeWatcher(settings.source, logger, heartbeat)
        self.watcher = watcher
        // The watcher's walk is sequential (watch, then list): readers ahead of it fill
        // the cache from a cold disk many directories at a time.
        let warmer = DirectoryWarmer(root: settings.source, excludes: settings.excludes, width: 8)
        let events: AsyncStream<WatchEvent>
        do {
            events = try watcher.start(excluding: settings.excludes)
            warmer.stop()
        } catch {
            warmer.stop()
            throw error
        }
        consumer = Task { await manager.consume(events) }
        state = "syncing"
        await manager.requestFullResync()
        await manager.run()
        // The current watcher: a reload may have replaced the one started here.
        self.watcher?.stop()
        consumer?.cancel()
        rootProblem = await manager.rootLost
    }

    func checkRoot(recordedEntries: Int, identity: RootIdentity?) -> String? {
        Agent.rootProblem(settings.source, identity: identity, recordedEntries: recordedEntries)
    }

    /// Why the source root cannot be trusted now, or nil.
    static func rootProblem(_ path: [UInt8], identity: RootIdentity?, recordedEntries: Int) -> String? {
        let name = HostPaths.display(path)
        guard let st = HostPaths.stat(path), st.kind == .directory else {
            return "source \(name) is missing; nothing is deleted (is a disk unmounted?)"
        }
        if let identity, identity != RootIdentity(device: st.device, inode: st.inode) {
            return "source \(name) was replaced by a different directory; nothing is deleted"
        }
        if recordedEntries > 0, let list = try? Sys.readDirectoryPath(path), list.isEmpty {
            return "source \(name) is empty but the records list \(recordedEntries) entries; nothing is deleted"
        }
        return nil
    }

    // MARK: Signals

    func handle(signal number: Int32) async {
        switch number {
        case SIGUSR1:
            logger.info("SIGUSR1: full resync")
            await manager?.requestFullResync()
        case SIGHUP:
            logger.info("SIGHUP: reloading the configuration")
            await reloadConfiguration()
        case SIGTERM, SIGINT:
            logger.info("\(number == SIGTERM ? "SIGTERM" : "SIGINT"): stopping")
            stopRequested = true
            notifier.stopping()
            cancellation.set()
            watcher?.stop()
            await manager?.stop()
        default:
            break
        }
    }

    func reloadConfiguration() async {
        guard !stopRequested else { return }
        // Before the first READY=1 systemd is still starting us: no reload to announce. A
        // SIGTERM that lands meanwhile wins: no READY=1 after STOPPING=1, no new watcher.
        let announce = readySent
        if announce { notifier.reloading() }
        defer { if announce && !stopRequested { notifier.ready() } }
        let fresh: CommandRunner.Settings
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
        next.state = settings.state
        settings = next
        guard let manager else { return }
        await manager.reconfigure(timing: timing, options: settings.options)
        // Stopping, or the root was lost meanwhile (its generation has ended): no watcher.
        guard manager === self.manager, await !manager.hasStopped, !stopRequested, rootProblem == nil else { return }
        // A new watcher with the new excludes; the full resync covers the switch-over.
        let old = watcher
        let watcher = makeWatcher(settings.source, logger, heartbeat)
        do {
            let events = try watcher.start(excluding: settings.excludes)
            self.watcher = watcher
            consumer = Task { await manager.consume(events) }
            old?.stop()
        } catch {
            logger.error("cannot restart watching: \(error)")
        }
        await manager.requestFullResync()
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
            try? await Task.sleep(for: .milliseconds(250))
        }
    }

    /// Once a second: a source root that vanished or was replaced without an inotify
    /// event reaching us (a lazy unmount) stops mirroring through the full pass's check.
    func watchRoot() async {
        guard let manager, state != "error", rootProblem == nil,
              checkRoot(recordedEntries: 0, identity: rootIdentity) != nil else { return }
        await manager.requestFullResync()
    }

    /// Once a second: a records log longer than the snapshot (and 1 MiB) is folded into a
    /// new snapshot, so that neither the disk nor the next start pays for every change
    /// since the agent started. Until one is written, asked again only after 30 s.
    func compactIfLogIsLong() async {
        guard let manager, let store, !stopRequested, rootProblem == nil, state != "error", store.needsCompaction else { return }
        let now = ContinuousClock.now
        if let asked = compactionAsked, asked.snapshot == store.snapshotLength, now - asked.at < .seconds(30) { return }
        compactionAsked = (now, store.snapshotLength)
        logger.debug("records log \(store.logLength) bytes, snapshot \(store.snapshotLength): compacting")
        await manager.compactRecordsInBackground()
    }

    func writeStatusNow(force: Bool) async {
        guard let manager else { return }
        let snapshot = await manager.snapshot()
        if snapshot.fullPasses > seenPasses {
            seenPasses = snapshot.fullPasses
            lastFullSync = LogSink.utcTimestamp()
        }
        if state == "syncing", !readySent, progress.isActive, snapshot.passPlanned.files > 0 {
            let elapsed = ContinuousClock.now - startedAt
            progress.update(TerminalProgress.describe(
                files: snapshot.passCopied.files, totalFiles: snapshot.passPlanned.files, bytes: snapshot.passCopied.bytes,
                totalBytes: snapshot.passPlanned.bytes,
                seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18))
        }
        if state == "syncing", seenPasses > 0, snapshot.pending == 0 {
            state = "watching"
            progress.finish()
            logger.info("initial sync done: \(snapshot.files) file\(snapshot.files == 1 ? "" : "s"), watching")
        }
        let current = state == "watching" && snapshot.resyncing ? "syncing" : state
        var extra: [(String, String)] = []
        if let unwatched = watcher?.unwatchedDirectories, unwatched > 0 {
            extra.append((".", "watch limit reached: \(unwatched) directories are not watched (rescanned every 30 s); raise it with sysctl fs.inotify.max_user_watches=N"))
        }
        writeStatus(state: current, snapshot: snapshot, extraErrors: extra, force: force)
        var line: String
        switch current {
        case "watching": line = "watching \(Agent.grouped(snapshot.files)) file\(snapshot.files == 1 ? "" : "s"), \(snapshot.pending) pending"
        case "syncing": line = !readySent ? "initial sync: \(Agent.grouped(snapshot.copiedFiles)) files copied, \(snapshot.pending) pending" : "resyncing, \(snapshot.pending) pending"
        default: line = current
        }
        if !snapshot.errors.isEmpty { line += ", \(snapshot.errors.count) errors" }
        if snapshot.heldDeletes > 0 { line += ", \(snapshot.heldDeletes) deletions held" }
        if current == "watching" && !readySent {
            readySent = true
            lastNotifiedStatus = line
            notifier.ready(status: line)
        } else {
            notify(status: line)
        }
    }

    func notify(status line: String) {
        guard line != lastNotifiedStatus else { return }
        lastNotifiedStatus = line
        notifier.status(line)
    }

    /// 12,345 style numbers.
    static func grouped(_ n: Int) -> String {
        let digits = Array(String(n))
        var out = ""
        for (i, d) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(d)
        }
        return out
    }

    /// Returns once the agent and its manager are free to answer (a watchdog probe).
    func answerProbe() async {
        if let manager { _ = await manager.hasStopped }
    }

    func writeStatus(state: String, snapshot: SyncManager<ContinuousClock>.Snapshot?, extraErrors: [(String, String)], force: Bool) {
        let errors = extraErrors.map { (path: $0.0, message: $0.1) }
            + (snapshot?.errors ?? [:]).sorted { $0.key < $1.key }.map { (path: $0.key.escaped, message: $0.value) }
        let report = StatusReport(state: state, pid: Int(getpid()), source: HostPaths.display(settings.source),
                                  mirror: HostPaths.display(settings.mirror), files: snapshot?.files ?? 0,
                                  bytes: snapshot?.bytes ?? 0, pending: snapshot?.pending ?? 0,
                                  lastFullSync: lastFullSync, heldDeletes: snapshot?.heldDeletes ?? 0, errors: errors)
        let json = report.json
        let now = ContinuousClock.now
        guard json != lastStatus || statusWriteFailed.load(ordering: .acquiring),
              force || now - lastStatusWrite >= .seconds(1) else { return }
        lastStatus = json
        lastStatusWrite = now
        statusWriteFailed.store(false, ordering: .releasing)
        let path = settings.state + Array("/status.json".utf8), bytes = Array(json.utf8)
        let write: @Sendable () -> Void = { [self] in
            do { try HostPaths.writeAtomically(path, bytes) } catch { self.statusWriteFailed.store(true, ordering: .releasing) }
        }
        // Its fsync must not hold a thread of the concurrency pool (two on two cores) while
        // a copy waits for the manager; a forced write (exit, error) is done on return.
        if force { Agent.statusQueue.sync(execute: write) } else { Agent.statusQueue.async(execute: write) }
    }

    /// Writes status.json, in order, off the concurrency pool.
    static let statusQueue = DispatchQueue(label: "keepsync.status")
}
