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
