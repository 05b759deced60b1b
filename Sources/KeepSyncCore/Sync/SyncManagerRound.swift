/// A round of the manager: what is due now is planned into scopes, each scope scanned,
/// the scans applied and their copies queued. A mirror that stops answering mid-round
/// ends it, in one place: what the round did not apply waits for the mirror's host.
extension SyncManager {
    /// The paths of one round and how far it got.
    struct Round {
        /// The due paths, sorted.
        let due: [RelativePath]
        /// The due paths that carry a live removal (never braked).
        let liveRemovals: [RelativePath]
        /// `liveRemovals` as a set.
        let removals: Set<RelativePath>
        /// The first due path not looked at yet.
        var next = 0
        /// The scope being scanned, if any.
        var scanning: RelativePath?
        /// Scans not applied yet, and their steps.
        var scans: [ScopeScan] = []
        var steps = 0
        /// Every scope this round scanned.
        var scopes: Set<RelativePath> = []
        /// The last due path taken (a directory's scan covers the due paths below it).
        var last: RelativePath?

        init(due: [RelativePath], liveRemovals: [RelativePath]) {
            self.due = due
            self.liveRemovals = liveRemovals
            removals = Set(liveRemovals)
        }
    }

    /// The mirror's host went away during a round: the round stops there.
    struct MirrorAway: Error {}

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
        var round = takeRound()
        guard !round.due.isEmpty else { return finishRound() }
        holdingCopies = true
        defer {
            holdingCopies = false
            startCopies()
        }
        do {
            // The mirror reads what the round looks at at once (a remote one: one round trip).
            do { try engine.beginRound(trees: round.due.filter { !$0.isRoot }) } catch {
                blockMirror((error as? KeepSyncError) ?? KeepSyncError(.unreachable, "\(error)"))
                throw MirrorAway()
            }
            defer { engine.endRound() }
            try scanAndApply(&round)
        } catch {
            holdForMirror(round)
        }
        logger.debug("round: \(round.due.count) due (\(round.due[0].escaped)), \(copies.waitingCount) copies queued, \(copies.runningCount) in flight, \(Self.seconds(now - start))")
        finishRound()
    }

    /// The due paths, less those with copies under way below them: a removal's scan would
    /// race them. Those wait a settle time, and the mirror is not asked about them
    /// meanwhile (a remote burst re-read the same subtree every settle while it copied).
    func takeRound() -> Round {
        var (due, liveRemovals) = pending.takeDue(now: now)
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
        return Round(due: due, liveRemovals: liveRemovals)
    }

    /// Scans the round's scopes and applies them. The scopes are all scanned before any is
    /// applied (up to `roundScanSteps`), so a batching mirror makes their new directories
    /// in one call. Not where the mirror folds case: two scopes may name one place there
    /// (a case-only rename), and each scan must see what the one before it changed.
    /// Throws `MirrorAway` once the mirror's host is lost.
    func scanAndApply(_ round: inout Round) throws {
        let holdsScans = !engine.limits.foldsCase
        while round.next < round.due.count {
            if health.isHostLost { throw MirrorAway() }
            let path = round.due[round.next]
            // A due directory's scan covers the due paths below it.
            if let last = round.last, path != last, path.isWithin(last), engine.sourceKind(last) == .directory {
                round.next += 1
                continue
            }
            // A file whose copy is queued or under way: that copy takes it (one under way goes
            // again once it ends). Looking at it now would only ask the mirror again.
            if copies.holds(path), engine.sourceKind(path) == .regular {
                copies.markChanged(path)
                round.next += 1
                continue
            }
            let scope = engine.nearestMirrorScope(path)
            if scope.isRoot {
                // The whole tree: a full pass, with its root check, after the scopes before it.
                applyHeld(&round)
                if health.isHostLost { throw MirrorAway() }
                round.last = path
                round.next += 1
                fullResync(exempt: round.removals)
                continue
            }
            round.last = path
            // Within a scope already scanned (the mirror lacked its parent too): covered.
            if scope.isWithin(anyOf: round.scopes) {
                round.next += 1
                continue
            }
            round.scopes.insert(scope)
            round.scanning = scope
            let scan = try scanScope(scope, liveRemovals: round.liveRemovals)
            round.scanning = nil
            round.next += 1
            guard let scan else { continue }
            round.scans.append(scan)
            round.steps += scan.scan.steps.count
            if !holdsScans || round.steps >= Self.roundScanSteps { applyHeld(&round) }
        }
        if health.isHostLost { throw MirrorAway() }
        applyHeld(&round)
    }

    /// Applies the scans the round holds.
    func applyHeld(_ round: inout Round) {
        applyScans(round.scans)
        round.scans = []
        round.steps = 0
    }

    /// What waits for a host lost mid-round: the scope being scanned and the scopes
    /// scanned and not applied, the live removals below them (their brakes' exemptions;
    /// the paths were covered by a scope), and the due paths not looked at yet.
    func holdForMirror(_ round: Round) {
        let scopes = (round.scanning.map { [$0] } ?? []) + round.scans.map(\.scope)
        let held = Set(scopes)
        for scope in scopes { enqueue(scope, now: now, immediately: false) }
        for removal in round.liveRemovals where removal.isWithin(anyOf: held) {
            enqueue(removal, now: now, immediately: false, removal: true)
        }
        let rest = round.due[(round.scanning == nil ? round.next : round.next + 1)...]
        for p in rest { enqueue(p, now: now, immediately: false, removal: round.removals.contains(p)) }
    }

    /// Scans `scope` (never the root); nil when it cannot be now, its error handled: the
    /// scope waits for the source to settle, or is retried later. Throws `MirrorAway`
    /// when the mirror's host is lost.
    func scanScope(_ scope: RelativePath, liveRemovals: [RelativePath]) throws -> ScopeScan? {
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
            blockMirror(error)
            throw MirrorAway()
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
}
