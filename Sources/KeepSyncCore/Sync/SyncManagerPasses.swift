/// The manager's passes: what is due, full and scoped passes, failures and the mirror probe.
extension SyncManager {
    // MARK: Processing

    /// The earliest moment something is due, nil when nothing waits.
    public func nextDeadline() -> C.Instant? { nextDue().map { origin.advanced(by: $0) } }

    /// `nextDeadline` in the manager's time.
    func nextDue() -> Duration? {
        // Nothing but the probe while the mirror's host cannot be reached.
        if health.isHostLost { return health.probeAt }
        if fullResyncRequested { return now }
        if !directoriesToFix.isEmpty && copies.isEmpty { return now }
        var next = pending.nextDeadline
        let linked = hardLinks.since.map { $0 + timing.maxDelay }
        for at in [retries.nextDeadline, health.probeAt, linked, verifyAt].compactMap({ $0 }) { next = min(next ?? at, at) }
        if recordWriter.hasBacklog, let at = lastAppendAt {
            let retry = at + recordRetryDelay
            next = min(next ?? retry, retry)
        }
        return next
    }

    /// How long after a failed record append it is tried again when nothing else comes:
    /// 1 s, doubling up to 30 s.
    var recordRetryDelay: Duration {
        .seconds(min(30, 1 << min(5, max(0, recordWriter.failures - 1))))
    }

    /// Processes a requested full resync and every path whose deadline has passed.
    public func processDue() {
        takeEvents()
        let start = now
        if let at = health.probeAt, at <= start { probeMirror(now: start) }
        // While the host is away changes wait (`enqueue` bounds them); only the probe runs.
        if health.isHostLost { return }
        if let since = hardLinks.since, since + timing.maxDelay <= start { queueOtherLinks() }
        for path in retries.takeDue(now: start) { pending.addIfAbsent(path, at: start) }
        let verify = !fullResyncRequested && verifyAt.map { $0 <= start } == true
        if fullResyncRequested || verify {
            fullResyncRequested = false
            // Removals seen live and still waiting (the host was away, or their settle) are
            // not held by this pass's brake either.
            fullResync(exempt: pending.removals, label: verify ? "verify" : "full pass")
        }
        var (due, liveRemovals) = pending.takeDue(now: now)
        // Copies still running below a path would race its scan (a removal): it waits for
        // them, and the mirror is not asked about it meanwhile (a remote burst re-read the
        // same directory's subtree every settle while its copies ran).
        if !copies.nothingRunning {
            // The directories above copies under way, each once: a lookup per due path, not
            // a pass over every copy (a burst has thousands of both).
            var above: Set<RelativePath> = []
            for copy in copies.runningPaths {
                var next = copy.parent
                while let directory = next, above.insert(directory).inserted { next = directory.parent }
            }
            let waiting = due.filter(above.contains)
            if !waiting.isEmpty {
                let later = now + timing.settle
                for path in waiting { pending.replace(path, at: later) }
                let held = Set(waiting)
                due.removeAll { held.contains($0) }
            }
        }
        guard !due.isEmpty else { return finishRound() }
        var last: RelativePath?
        holdingCopies = true
        defer {
            holdingCopies = false
            startCopies()
        }
        // The mirror reads what the round looks at at once (a remote one: one round trip).
        do { try engine.beginRound(trees: due.filter { !$0.isRoot }) } catch {
            // Its host is away: the round waits for it.
            let removals = Set(liveRemovals)
            for path in due { enqueue(path, now: start, immediately: false, removal: removals.contains(path)) }
            blockMirror((error as? KeepSyncError) ?? KeepSyncError(.unreachable, "\(error)"))
            return finishRound()
        }
        defer { engine.endRound() }
        // The scopes are all scanned before any is applied (up to `roundScanSteps`), so a
        // batching mirror makes their new directories in one call. Not where the mirror
        // folds case: two scopes may name one place there (a case-only rename), and each
        // scan must see what the one before it changed.
        let holdsScans = !engine.limits.foldsCase
        var scans: [ScopeScan] = [], steps = 0
        var scopes: Set<RelativePath> = []
        let removals = Set(liveRemovals)
        func applyHeld() {
            applyScans(scans)
            scans = []
            steps = 0
        }
        for (i, path) in due.enumerated() {
            if health.isHostLost {
                holdForHost(scans.map(\.scope), rest: due[i...], removals: removals)
                scans = []
                break
            }
            // A due directory's scan covers the due paths below it.
            if let last, path != last, path.isWithin(last), engine.sourceKind(last) == .directory { continue }
            // A file whose copy is queued or under way: that copy takes it (one under way goes
            // again once it ends). Looking at it now would only ask the mirror again.
            if copies.holds(path), engine.sourceKind(path) == .regular {
                copies.markChanged(path)
                continue
            }
            last = path
            let scope = engine.nearestMirrorScope(path)
            if scope.isRoot {
                // The whole tree: a full pass, with its root check, after the scopes before it.
                applyHeld()
                if health.isHostLost {
                    holdForHost([], rest: due[i...], removals: removals)
                    break
                }
                fullResync(exempt: Set(liveRemovals))
                continue
            }
            // Within a scope already scanned (the mirror lacked its parent too): covered.
            if scope.isWithin(anyOf: scopes) { continue }
            scopes.insert(scope)
            guard let scan = scanScope(scope, liveRemovals: liveRemovals) else { continue }
            scans.append(scan)
            steps += scan.scan.steps.count
            if !holdsScans || steps >= Self.roundScanSteps { applyHeld() }
        }
        if health.isHostLost {
            holdForHost(scans.map(\.scope), rest: [], removals: removals)
            scans = []
        }
        applyHeld()
        logger.debug("round: \(due.count) due (\(due[0].escaped)), \(copies.waitingCount) copies queued, \(copies.runningCount) in flight, \(Self.seconds(now - start))")
        finishRound()
    }

    /// A full pass: scan everything, brake on, apply, copy. Logs what it changes in the
    /// mirror under `label` (at debug level when nothing).
    public func fullResync(exempt: Set<RelativePath> = [], label: String = "full pass") {
        let start = now
        defer { lastFullPassAt = now }
        if let problem = rootCheck?(engine.records.table.count - (engine.records.table[.root] == nil ? 0 : 1)) {
            rootLost = problem
            rootError = .rootLost(problem)
            logger.error(problem)
            stopping = true
            return
        }
        resyncing = true
        defer { resyncing = false }
        let options = engine.options
        do {
            let (scan, summary) = try engine.fullPass(deferCopies: true, brake: MassDeleteBrake(options, exempt: exempt))
            hardLinks.known = scan.hardLinked
            passPlanned = scan.plannedCopies
            passCopied = (0, 0)
            held = summary.heldByDirectory
            if summary.heldDeletes > 0 {
                logger.warning("held \(summary.heldDeletes) deletions: more than \(options.maxDeletePercent)% of the mirror's \(scan.mirrorEntries) entries; send SIGUSR1 after checking, or restart with --allow-mass-delete")
            }
            // A copy it queued again keeps its error until that copy ends.
            let queuedAgain = Set(summary.deferredCopies)
            errors = errors.filter { queuedAgain.contains($0.key) }
            rootError = nil
            clearFailures(within: .root, except: summary.deferredCopies)
            // A pass that wrote without meeting a full or read-only mirror ends that state.
            health.passWrote()
            note(summary)
            for path in summary.deferredCopies { queueCopy(path) }
            directoriesToFix.formUnion(summary.deferredFinishes)
            retryCompaction(now: true)
            fullPasses += 1
            let took = Self.seconds(now - start)
            if summary.mirrorChanges == 0 {
                logger.debug("\(label): nothing to repair (\(scan.mirrorEntries) mirror entries checked in \(took))")
            } else {
                logger.info("\(label): \(summary.changeList) in \(took)")
            }
        } catch let error as KeepSyncError where error.code == .unreachable {
            blockMirror(error)
        } catch {
            rootError = .pass("\(error)")
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

    /// Plans another attempt at a failed path: a probe of the mirror when it is full or
    /// read-only, else the path alone after its backoff.
    func scheduleRetry(_ path: RelativePath, _ error: any Error) {
        if let e = error as? KeepSyncError, MirrorHealth.blocks(e.code) { return blockMirror(e) }
        retries.schedule(path, now: now)
    }

    /// Forgets the failures of `scope` and below (they synced or vanished); paths whose
    /// copy is still to come keep their count, so that their backoff keeps growing.
    func clearFailures(within scope: RelativePath, except copies: [RelativePath] = []) {
        retries.clear(within: scope, keep: Set(copies))
    }

    /// The mirror takes no writes (full, read-only, or its host lost): reported once an
    /// episode, then only the probe runs for it.
    func blockMirror(_ error: KeepSyncError) {
        if error.code == .unreachable { return loseHost(error) }
        guard health.block(error.code, now: now) else { return }
        let what = error.code == .noSpace ? "full" : "read-only"
        logger.warning("the mirror is \(what) (\(error.message)); waiting until it takes writes again")
        rootError = .mirrorBlocked("the mirror is \(what): \(error.message)")
    }

    /// The mirror's host cannot be reached (or refuses the login): nothing more is tried
    /// until a probe reaches it, after 1 s, doubling to 60 s.
    func loseHost(_ error: KeepSyncError) {
        guard health.loseHost(error.message, now: now) else { return }
        if oldestWaiting == nil { oldestWaiting = now }
        rootError = .mirrorBlocked(error.message)
        logger.debug("\(error.message); changes wait, trying again in 1 s, then up to every 60 s")
        // Queued copies wait with the other changes (none starts until the host answers).
        for path in copies.takeWaiting() { enqueue(path, now: now, immediately: false) }
    }

    func probeMirror(now: Duration) {
        do { try engine.probeMirror() } catch {
            let e = error as? KeepSyncError
            switch health.probeFailed(e?.code, message: e?.message, now: now) {
            case .hostBackButBlocked:
                // Reached, but it takes no writes: wait as for a full mirror.
                logger.info("the mirror's host answers again, but \(e!.message)")
                rootError = .mirrorBlocked("the mirror takes no writes: \(e!.message)")
            case .stillLost:
                if let e { rootError = .mirrorBlocked(e.message) }
            case .stillBlocked:
                break
            }
            logger.debug("the mirror still takes no writes: \(error)")
            return
        }
        if case .mirrorBlocked = rootError { rootError = nil }
        if let lost = health.probeSucceeded() {
            logger.info("the mirror's host answers again after \(Self.seconds(now - lost.since)): full resync")
        } else {
            logger.info("the mirror takes writes again: full resync")
        }
        fullResyncRequested = true
    }

    /// A due scope's scan and the brake its deletions answer to, kept until the round
    /// applies it (`applyScans`).
    struct ScopeScan {
        let scope: RelativePath
        let brake: MassDeleteBrake
        let scan: SyncScan
    }

    /// The most steps a round's scans hold before they are applied: its memory stays
    /// bounded when one round meets many big new directories.
    static var roundScanSteps: Int { 8192 }

    /// Scans `scope` (never the root); nil when it cannot be, its error handled: the
    /// scope waits for its host, or for the source to settle, or is retried later.
    func scanScope(_ scope: RelativePath, liveRemovals: [RelativePath]) -> ScopeScan? {
        // Deletions seen live by inotify are not braked: a path that is gone, and the
        // removal events at or below the scope. Deletions a scan of an existing
        // directory infers on its own are, like a full pass's.
        var brake = MassDeleteBrake(engine.options, exempt: Set(liveRemovals.filter { $0.isWithin(scope) }))
        if engine.sourceKind(scope) != .directory { brake.lifted = true }
        do {
            let scan = try engine.scan(scope)
            hardLinks.known.formUnion(scan.hardLinked)
            return ScopeScan(scope: scope, brake: brake, scan: scan)
        } catch let error as KeepSyncError where error.code == .unreachable {
            holdForHost([scope], rest: [], removals: Set(liveRemovals))
            blockMirror(error)
        } catch {
            if engine.sourceStat(scope) == nil || (error as? KeepSyncError)?.code == .notFound {
                // Changing under our feet: try again once it settles.
                logger.debug("\(scope.escaped): \(error); retrying")
                enqueue(scope, now: now, immediately: false)
            } else {
                errors[scope] = "\(error)"
                logger.error("\(scope.escaped): \(error)")
                scheduleRetry(scope, error)
            }
        }
        return nil
    }

    /// What waits for a host lost mid-round: the scopes scanned (or being scanned) and not
    /// applied, the live removals below them (their brakes' exemptions; the paths were
    /// covered by a scope), and the due paths not looked at yet.
    func holdForHost(_ scopes: [RelativePath], rest: ArraySlice<RelativePath>, removals: Set<RelativePath>) {
        let held = Set(scopes)
        for scope in scopes { enqueue(scope, now: now, immediately: false) }
        for removal in removals where removal.isWithin(anyOf: held) {
            enqueue(removal, now: now, immediately: false, removal: true)
        }
        for p in rest { enqueue(p, now: now, immediately: false, removal: removals.contains(p)) }
    }

    /// Applies a round's scans (disjoint scopes, in path order) and queues their copies.
    func applyScans(_ scans: [ScopeScan]) {
        guard !scans.isEmpty else { return }
        for s in scans { noteLinkedNamesGoing(s.scan) }
        let summaries = engine.apply(scans.map { ($0.scan, $0.brake) }, deferCopies: true)
        for (s, summary) in zip(scans, summaries) {
            let scope = s.scope
            noteLinkedChanges(s.scan)
            let queuedAgain = Set(summary.deferredCopies)
            for key in errors.keys where key.isWithin(scope) && !queuedAgain.contains(key) { errors[key] = nil }
            clearFailures(within: scope, except: summary.deferredCopies)
            held = held.filter { !$0.key.isWithin(scope) }.merging(summary.heldByDirectory, uniquingKeysWith: +)
            if summary.heldDeletes > 0 {
                logger.warning("held \(summary.heldDeletes) deletions below \(scope.escaped): more than \(s.brake.maxDeletePercent)% of its entries")
            }
            // A deletion the brake passed (seen live, or its scope gone) that the host's loss
            // stopped waits as a removal, not as a path a full pass would brake.
            for e in summary.errors where e.code == .unreachable {
                if let path = e.path, s.brake.lifted || s.brake.exempt.contains(path) {
                    enqueue(path, now: now, immediately: false, removal: true)
                }
            }
            note(summary)
            for copy in summary.deferredCopies { queueCopy(copy) }
            directoriesToFix.formUnion(summary.deferredFinishes)
            if let parent = scope.parent { directoriesToFix.insert(parent) }
        }
        startCopies()
    }

    func note(_ summary: SyncSummary) {
        for e in summary.errors {
            if e.code == .unreachable {
                if let path = e.path { enqueue(path, now: now, immediately: false) }
                blockMirror(e)
                continue
            }
            if let path = e.path, !path.isRoot { errors[path] = e.message } else { rootError = .pass(e.message) }
            scheduleRetry(e.path ?? .root, e)
        }
        copiedFiles += summary.copiedFiles
        copiedBytes += summary.copiedBytes
    }
}
