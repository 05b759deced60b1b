/// The manager's copies: dispatch in groups, completions, hard-linked names, the end of a round.
extension SyncManager {
    // MARK: Copies

    func queueCopy(_ path: RelativePath) {
        copies.add(path)
    }

    /// Starts copy work while workers are free. A lone file with nothing else copying is
    /// installed on its own (the latency path); otherwise what queued goes out in groups
    /// of up to the mirror's `groupFiles` (one group commit each), shared among at most its
    /// `concurrentGroups` at once, so a burst shares a few barriers instead of paying one
    /// per file.
    func startCopies() {
        if holdingCopies { return }
        let shape = engine.copyShape
        while !stopping, !health.isHostLost, let group = copies.next(limit: executor.limit, shape: shape) {
            let job = engine.copyJob(group, io: io)
            executor.run { self.hand(job.run()) }
        }
    }

    func copiesFinished(_ results: [(path: RelativePath, result: Result<CopyResult?, any Error>)]) {
        copies.itemEnded(count: results.count)
        for (path, result) in results { copyFinished(path, result) }
        startCopies()
        if copies.isEmpty {
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
        while !copies.isEmpty {
            // Asked again inside: see `waitForSignal`.
            await withCheckedContinuation { c in
                if copies.isEmpty { c.resume() } else { copyWaiters.append(c) }
            }
        }
    }

    /// Copies in a row that a writer no event showed may overtake before the path counts
    /// as failing (its error shown, retried with backoff, as any other).
    static var changedCopySettles: Int { 3 }

    func copyFinished(_ path: RelativePath, _ result: Result<CopyResult?, any Error>) {
        let changedAgain = copies.ended(path)
        let changedBefore = changedDuringCopy.removeValue(forKey: path) ?? 0
        switch result {
        case .success(let copied):
            errors[path] = nil
            clearFailures(within: path)
            if let copied {
                if copied.source.links > 1 {
                    let key = FileIdentity(device: copied.source.device, inode: copied.source.inode)
                    hardLinks.known.insert(key)
                    hardLinks.noteChange(key, at: copied.path, now: now)
                }
                engine.recordCopy(copied)
                copiedFiles += 1
                copiedBytes += copied.installed.size
                passCopied.files += 1
                passCopied.bytes += copied.installed.size
                unflushed += 1
            }
        case .failure(let error):
            let current = engine.sourceStat(path)
            if stopping {
                logger.debug("\(path.escaped): copy abandoned on stop")
            } else if let e = error as? KeepSyncError, e.code == .unreachable {
                // Sent again once the host answers: waits in the queue until then.
                errors[path] = nil
                enqueue(path, now: now, immediately: false)
                blockMirror(e)
            } else if let e = error as? KeepSyncError, e.code == .tooLarge {
                errors[path] = nil
                engine.skipTooLarge(path, size: current?.size ?? 0)
            } else if let e = error as? KeepSyncError, e.code == .sourceChanged,
                      changedAgain || pending.contains(path) || changedBefore < Self.changedCopySettles {
                // A writer is at work: copied once it is done (its close-after-write or a
                // settle), not at once between two of its writes. An event during the copy
                // queued it already (a close: at once). Overtaken with no event seen (a
                // writer the watcher cannot see): past a few in a row, the error and backoff below.
                let seen = changedAgain || pending.contains(path)
                changedDuringCopy[path] = seen ? nil : changedBefore + 1
                errors[path] = nil
                logger.debug("\(path.escaped): changed during copy; waiting for it to settle")
                if !pending.contains(path) { enqueue(path, now: now, immediately: false) }
            } else if current == nil || current?.kind != .regular {
                // Vanished or replaced by another kind while copied: its events follow.
                errors[path] = nil
                enqueue(path, now: now, immediately: false)
            } else {
                let message = (error as? KeepSyncError)?.message ?? "\(error)"
                errors[path] = message
                // A full or read-only mirror says so once an episode (`blockMirror`'s
                // warning); its files' failures then go to debug, not again at every probe.
                if let e = error as? KeepSyncError, health.isRecentBlock(e.code, now: now) {
                    logger.debug("\(path.escaped): \(message)")
                } else {
                    logger.error("\(path.escaped): \(message)")
                }
                scheduleRetry(path, error)
            }
        }
        if let parent = path.parent { directoriesToFix.insert(parent) }
        // Not over an entry queued during the copy (a close-after-write's, due at once).
        if changedAgain && !pending.contains(path) { enqueue(path, now: now, immediately: false) }
        if unflushed >= 256 { flushRecords() }
    }

    /// A hard-linked file whose mode or mtime changed through one name changed under its
    /// other names too (IN_ATTRIB comes for the name used only): like a write, it has them
    /// looked for (a copy's completion does the same for content).
    func noteLinkedChanges(_ scan: SyncScan) {
        for step in scan.steps {
            guard case .path(let state, let actions, _) = step, let s = state.source, s.kind == .regular, s.links > 1,
                  actions.contains(where: { if case .setAttributes = $0 { return true }; return false }) else { continue }
            hardLinks.noteChange(FileIdentity(device: s.device, inode: s.inode), at: state.path, now: now)
        }
    }

    /// A name of a hard-linked file that goes (removed, replaced, or below a directory that
    /// goes) may have been written through just before, and its events name only it: its
    /// other names are looked at, as after a copy. Called before the scan is applied, while
    /// the records below a removed directory are still there.
    func noteLinkedNamesGoing(_ scan: SyncScan) {
        guard !hardLinks.known.isEmpty else { return }
        let table = engine.records.table
        for step in scan.steps {
            guard case .path(let state, let actions, _) = step, actions.contains(where: \.isDeletion) else { continue }
            for slot in table.slots(within: state.path) {
                guard let (path, record) = table.entry(atSlot: slot), record.kind == .regular else { continue }
                let key = FileIdentity(device: record.device, inode: record.inode)
                guard hardLinks.known.contains(key) else { continue }
                hardLinks.noteChange(key, at: path, now: now)
            }
        }
    }

    /// A hard-linked file written through one name changed under its other names too
    /// (inotify reports only the name written through): queue those, for every linked
    /// file copied since the last look, in one walk of the records. Done when the copies
    /// end, or once the first waited the max delay while they go on: a walk per copy
    /// made a pass over n hard-linked names O(n²).
    func queueOtherLinks() {
        guard !hardLinks.changed.isEmpty else { return }
        let copied = hardLinks.takeChanged()
        for (path, r) in engine.records.table {
            if let last = copied[FileIdentity(device: r.device, inode: r.inode)], last != path {
                enqueue(path, now: now, immediately: false)
            }
        }
    }

    /// Once the copies end: queues the other names of linked copies and fixes directory
    /// attributes. Appends records, wakes idle waiters.
    func finishRound() {
        if copies.isEmpty {
            queueOtherLinks()
            let dirs = directoriesToFix.sorted(by: { $0.depth != $1.depth ? $0.depth > $1.depth : $0 < $1 })
            do {
                if !dirs.isEmpty { try engine.beginRound(trees: [], stats: dirs) }
                for error in engine.fixDirectories(dirs) { logger.debug("\(error.path?.escaped ?? "."): \(error)") }
                directoriesToFix.removeAll()
            } catch {
                // Its host is away: the full pass at its return fixes them.
                blockMirror((error as? KeepSyncError) ?? KeepSyncError(.unreachable, "\(error)"))
            }
            if !dirs.isEmpty { engine.endRound() }
            // A big pass's queues keep their capacity when emptied: let it go with them.
            copies.shrinkIfEmpty()
        }
        flushRecords()
        noteIfIdle()
        if isIdle {
            let waiters = idleWaiters
            idleWaiters.removeAll()
            for w in waiters { w.resume() }
        }
    }
}
