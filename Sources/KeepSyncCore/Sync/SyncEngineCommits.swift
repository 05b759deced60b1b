/// The engine's side of a group commit: its batched copies go to the mirror's
/// `beginInstall` in groups, each going on beside the walk and the groups before it
/// (up to the mirror's `passGroups` at once where `io` runs them beside, else
/// `concurrentGroups`), then recorded, then the directory finishes that waited for them run.
extension SyncEngine {
    /// Stages the batched copies and commits the group before them (a lone copy commits at once),
    /// records them, then runs the directory finishes that waited for them.
    func commitBatch(_ pass: inout PassApplication) {
        let paths = pass.batch
        pass.batch.removeAll(keepingCapacity: true)
        pass.batchBytes = 0
        guard paths.count > 1 else {
            finishInFlight(&pass)
            if !paths.isEmpty { note(copyJob(paths, io: io).run(), &pass) }
            let finishes = pass.waitingFinishes
            pass.waitingFinishes.removeAll()
            finishLanded(finishes, &pass)
            return
        }
        let group = copyJob(paths, io: io).begin()
        // At most `passGroups` (or `concurrentGroups`) at once: this one, and the ones before it.
        // It starts as soon as one landed; that one's records and finishes (round trips on a
        // remote mirror) go on meanwhile. No finish waits on it: its directories' entries
        // are all in the groups before.
        var landed: [(results: [(path: RelativePath, result: Result<CopyResult?, any Error>)], finishes: [Finish])] = []
        while pass.inFlight.count >= max(1, (io.runsBeside ? mirror.passGroups : mirror.concurrentGroups) - 1) {
            let oldest = pass.inFlight.removeFirst()
            landed.append((oldest.group.finish(), oldest.finishes))
        }
        group.commit()
        pass.inFlight.append((group, pass.waitingFinishes))
        pass.waitingFinishes.removeAll()
        for (results, finishes) in landed {
            note(results, &pass)
            finishLanded(finishes, &pass)
        }
    }

    /// Finishes every group in flight, oldest first.
    func finishInFlight(_ pass: inout PassApplication) {
        while !pass.inFlight.isEmpty { finishOldest(&pass) }
    }

    /// Waits for the oldest group's barrier, publishes and records it, runs its finishes
    /// (a directory's finish waits with the last group committed before it, so with every
    /// group holding its files).
    func finishOldest(_ pass: inout PassApplication) {
        guard !pass.inFlight.isEmpty else { return }
        let pending = pass.inFlight.removeFirst()
        note(pending.group.finish(), &pass)
        finishLanded(pending.finishes, &pass)
    }

    /// Finishes the directories whose copies landed: at the end of the stretch of steps
    /// under way on a batching mirror (with its own finishes: one stat and one attribute
    /// call, where each group cost two), at once otherwise. No step of a stretch moves or
    /// removes anything, so none changes them meanwhile.
    func finishLanded(_ finishes: [Finish], _ pass: inout PassApplication) {
        guard !finishes.isEmpty else { return }
        if pass.stretchFinishes != nil {
            pass.stretchFinishes! += finishes
        } else {
            finishAll(finishes, &pass)
        }
    }

    /// Records the copies that landed and reports the ones that failed.
    private func note(_ results: CopyResults, _ pass: inout PassApplication) {
        for (path, result) in results {
            switch result {
            case .success(let copied?):
                recordCopy(copied, &pass)
                pass.summary.copiedFiles += 1
                pass.summary.copiedBytes += copied.installed.size
                pass.progress.copied.files += 1
                pass.progress.copied.bytes += copied.installed.size
                onCopy?(pass.progress)
            case .success(nil):
                break
            case .failure(let error as KeepSyncError) where error.code == .tooLarge:
                skipTooLarge(path, size: (try? source.stat(path))??.size ?? 0)
                pass.summary.skippedUnholdable += 1
            case .failure(let error):
                report(error, path: path, into: &pass.summary)
            }
        }
    }
}
