/// Status: each mirror's status.json, one `STATUS=` line for all, READY=1 once every
/// mirror has settled; the once-a-second checks of the roots and the records' length.
extension Agent {
    /// What one link says in a status round: its state now (`syncing` while a resync
    /// runs), its manager's numbers (nil without one) and since when its host is away.
    struct LinkLine {
        var name: String
        var state: AgentState
        var snapshot: SyncManager<C>.Snapshot?
        var unreachableSince: String?

        /// Watching, paused, or waiting for its host: READY=1 does not wait for it.
        var settled: Bool {
            if case .paused = state { return true }
            return state == .watching || unreachableSince != nil
        }
    }

    func statusLoop() async {
        var ticks = 0
        while !Task.isCancelled {
            await writeStatusNow(force: false)
            ticks += 1
            if ticks % 4 == 0 {
                for i in links.indices {
                    await watchRoot(i)
                    await compactIfLogIsLong(i)
                }
            }
            try? await clock.sleep(for: .milliseconds(250))
        }
    }

    /// Once a second: a root that vanished or was replaced without an inotify event
    /// reaching us (a lazy unmount) stops link `i`'s mirroring through its full pass's check.
    func watchRoot(_ i: Int) async {
        guard let manager = links[i].manager, !links[i].state.isError, sourceProblem == nil, linkProblem(i) != nil else { return }
        await manager.requestFullResync()
    }

    /// Once a second: a records log longer than the snapshot (and 1 MiB) is folded into a
    /// new snapshot, so that neither the disk nor the next start pays for every change
    /// since the agent started. Until one is written, asked again only after 30 s.
    func compactIfLogIsLong(_ i: Int) async {
        let store = links[i].store
        guard let manager = links[i].manager, !stopRequested, sourceProblem == nil, !links[i].state.isError,
              store.needsCompaction else { return }
        let now = clock.now
        if let asked = links[i].compactionAsked, asked.snapshot == store.snapshotLength, asked.at.duration(to: now) < .seconds(30) {
            return
        }
        links[i].compactionAsked = (now, store.snapshotLength)
        logger(for: links[i].settings).debug("records log \(store.logLength) bytes, snapshot \(store.snapshotLength): compacting")
        await manager.compactRecordsInBackground()
    }

    /// Writes every link's status.json (when it changed) and the `STATUS=` line.
    func writeStatusNow(force: Bool) async {
        var lines: [LinkLine] = []
        for i in links.indices { lines.append(await writeLinkStatus(i, force: force)) }
        showProgress(lines)
        // A full pass's memory (one step per path) is freed when it ends; once its copies
        // are done too, it goes back to the system.
        let passes = lines.reduce(0) { $0 + ($1.snapshot?.fullPasses ?? 0) }
        if lines.allSatisfy({ ($0.snapshot?.pending ?? 0) == 0 }), passes > releasedAfterPasses {
            releasedAfterPasses = passes
            host.releaseMemory()
        }
        publishLine(lines)
    }

    /// Link `i`'s status round: its state moves on, its status.json is written; returns
    /// what the `STATUS=` line says of it.
    func writeLinkStatus(_ i: Int, force: Bool) async -> LinkLine {
        guard let manager = links[i].manager else {
            // Starting (the watcher walks), or stopped while paused: status says so (a pause
            // wrote its own, with its reason).
            if links[i].state == .starting || links[i].state == .stopped {
                writeStatus(i, snapshot: nil, extraErrors: [], force: force)
            }
            return LinkLine(name: links[i].name, state: links[i].state, snapshot: nil, unreachableSince: links[i].unreachableSince)
        }
        let snapshot = await manager.snapshot()
        if snapshot.fullPasses > links[i].seenPasses {
            links[i].seenPasses = snapshot.fullPasses
            links[i].lastFullSync = links[i].host.timestamp()
        }
        if links[i].state == .syncing, links[i].seenPasses > 0, snapshot.pending == 0 {
            links[i].state = .watching
            if links.allSatisfy({ $0.state != .syncing }) { progress.finish(nil) }
            let files = "\(snapshot.files) file\(snapshot.files == 1 ? "" : "s")"
            logger(for: links[i].settings).info(links[i].hasWatched ? "caught up: \(files), watching" : "initial sync done: \(files), watching")
            links[i].hasWatched = true
        }
        let state = links[i].state
        let current = state == .watching && snapshot.resyncing ? AgentState.syncing : state
        var extra: [(String, String)] = []
        let unwatched = current == .stopped ? 0 : watcher?.unwatchedDirectories ?? 0
        let period = watcher?.pollPeriod
        if unwatched > 0 {
            let every = period.map { " (polled every \(Int(ByteSize.seconds($0).rounded())) s)" } ?? ""
            extra.append((".", "watch limit reached: \(unwatched) directories are not watched\(every); raise it with sysctl fs.inotify.max_user_watches=N"))
        }
        let since = noteUnreachable(i, snapshot.unreachable)
        writeStatus(i, snapshot: snapshot, state: current, extraErrors: extra, force: force, unwatched: (unwatched, period))
        return LinkLine(name: links[i].name, state: current, snapshot: snapshot, unreachableSince: since)
    }

    /// The initial copy's progress line on a terminal, every mirror's together.
    func showProgress(_ lines: [LinkLine]) {
        guard !status.readySent, progress.isActive, lines.contains(where: { $0.state == .syncing }) else { return }
        let snapshots = lines.compactMap(\.snapshot)
        let planned = snapshots.reduce(0) { $0 + $1.passPlanned.files }
        guard planned > 0 else { return }
        progress.update(ByteSize.progress(
            files: snapshots.reduce(0) { $0 + $1.passCopied.files }, totalFiles: planned,
            bytes: snapshots.reduce(0) { $0 + $1.passCopied.bytes }, totalBytes: snapshots.reduce(0) { $0 + $1.passPlanned.bytes },
            seconds: ByteSize.seconds(startedAt.duration(to: clock.now))))
    }

    /// Each link's line as it stands, without writing anything (a pause's own report).
    func currentLines() async -> [LinkLine] {
        var lines: [LinkLine] = []
        for link in links {
            lines.append(LinkLine(name: link.name, state: link.state, snapshot: await link.manager?.snapshot(),
                                  unreachableSince: link.unreachableSince))
        }
        return lines
    }

    /// Sends the `STATUS=` line for `lines`; READY=1 with it once every mirror settled.
    /// After STOPPING=1 (a SIGTERM during the initial sync) no READY=1. A host that cannot
    /// be reached, or a mirror that is away, does not hold READY back: the agent watches
    /// and waits for it.
    func publishLine(_ lines: [LinkLine]) {
        let line = StatusLine.summary(lines.map { ($0.name, $0.state, $0.snapshot, $0.unreachableSince) },
                                      readySent: status.readySent)
        if lines.allSatisfy(\.settled) && !status.readySent && !stopRequested {
            status.ready(line)
        } else {
            status.notify(line)
        }
    }

    /// Notes when link `i`'s host stopped answering (logged once per outage); returns that
    /// time while it lasts.
    func noteUnreachable(_ i: Int, _ message: String?) -> String? {
        guard let message else {
            links[i].unreachableSince = nil
            return nil
        }
        if links[i].unreachableSince == nil {
            let since = host.timestamp()
            links[i].unreachableSince = since
            logger(for: links[i].settings).warning("remote unreachable since \(since): \(message); changes wait, retrying")
        }
        return links[i].unreachableSince
    }

    /// Writes link `i`'s status.json: `state` (its own by default), `snapshot`'s numbers.
    func writeStatus(_ i: Int, snapshot: SyncManager<C>.Snapshot?, state: AgentState? = nil, extraErrors: [(String, String)],
                     force: Bool, unwatched: (count: Int, period: Duration?) = (0, nil)) {
        let link = links[i], settings = link.settings
        var report = Self.report(settings, processID: host.processID, state: state ?? link.state, snapshot: snapshot,
                                 errors: extraErrors, lastFullSync: link.lastFullSync)
        report.unwatchedDirectories = unwatched.count
        report.pollSeconds = unwatched.period.map(ByteSize.seconds)
        report.versions = link.versionCounter?.summary
        if let since = link.unreachableSince, let message = snapshot?.unreachable, settings.remote != nil,
           let at = report.errors.firstIndex(where: { $0.path == "." && $0.message == message }) {
            report.errors[at].message = "remote unreachable since \(since): " + report.errors[at].message
        }
        links[i].statusFile.write(report, force: force, now: clock.now)
    }

    /// status.json for `settings` in `state`: `snapshot`'s numbers and errors after `errors`.
    static func report(_ settings: Settings, processID: Int, state: AgentState, snapshot: SyncManager<C>.Snapshot?,
                       errors extra: [(String, String)], lastFullSync: String?) -> StatusReport {
        let errors = extra.map { (path: $0.0, message: $0.1) }
            + (snapshot?.errors ?? [:]).sorted { $0.key < $1.key }.map { (path: $0.key.escaped, message: $0.value) }
        var report = StatusReport(state: state.name, pid: processID, source: settings.sourceName,
                                  mirror: settings.mirrorName, files: snapshot?.files ?? 0,
                                  bytes: snapshot?.bytes ?? 0, pending: snapshot?.pending ?? 0,
                                  lastFullSync: lastFullSync, heldDeletes: snapshot?.heldDeletes ?? 0, errors: errors)
        report.mirrorLimits = snapshot?.mirrorLimits
        report.skipped = (snapshot?.skipped ?? []).map(\.escaped)
        if let remote = settings.remote {
            report.remote = remote.host
            report.lagSeconds = (snapshot?.lag).map { (ByteSize.seconds($0) * 10).rounded() / 10 } ?? 0
        }
        return report
    }
}
