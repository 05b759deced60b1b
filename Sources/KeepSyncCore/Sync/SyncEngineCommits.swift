/// The engine's side of a group commit: its batched copies go to the mirror's
/// `beginInstall` in groups, each going on beside the walk and the groups before it
/// (up to the mirror's `passGroups` at once where `io` runs them beside, else
/// `concurrentGroups`), then recorded, then the directory finishes that waited for them run.
extension SyncEngine {
    /// Stages the batched copies and commits the group before them (a lone copy commits at once),
    /// records them, then runs the directory finishes that waited for them.
    func commitBatch(_ summary: inout SyncSummary) {
        let paths = batch
        batch.removeAll(keepingCapacity: true)
        batchBytes = 0
        guard paths.count > 1 else {
            finishInFlight(&summary)
            if !paths.isEmpty {
                let results = mirror.install(paths, from: source, io: io, logger: logger)
                note(results.map { ($0.path, $0.result) }, &summary)
            }
            let finishes = waitingFinishes
            waitingFinishes.removeAll()
            finishLanded(finishes, &summary)
            return
        }
        let group = mirror.beginInstall(paths, from: source, io: io, logger: logger)
        // At most `passGroups` (or `concurrentGroups`) at once: this one, and the ones before it.
        // It starts as soon as one landed; that one's records and finishes (round trips on a
        // remote mirror) go on meanwhile. No finish waits on it: its directories' entries
        // are all in the groups before.
        var landed: [(results: [(path: RelativePath, result: Result<CopyResult?, any Error>)], finishes: [Finish])] = []
        while inFlight.count >= max(1, (io.runsBeside ? mirror.passGroups : mirror.concurrentGroups) - 1) {
            let oldest = inFlight.removeFirst()
            landed.append((oldest.group.finish(), oldest.finishes))
        }
        group.commit()
        inFlight.append((group, waitingFinishes))
        waitingFinishes.removeAll()
        for (results, finishes) in landed {
            note(results.map { ($0.path, $0.result) }, &summary)
            finishLanded(finishes, &summary)
        }
    }

    /// Finishes every group in flight, oldest first.
    func finishInFlight(_ summary: inout SyncSummary) {
        while !inFlight.isEmpty { finishOldest(&summary) }
    }

    /// Waits for the oldest group's barrier, publishes and records it, runs its finishes
    /// (a directory's finish waits with the last group committed before it, so with every
    /// group holding its files).
    func finishOldest(_ summary: inout SyncSummary) {
        guard !inFlight.isEmpty else { return }
        let pending = inFlight.removeFirst()
        note(pending.group.finish().map { ($0.path, $0.result) }, &summary)
        finishLanded(pending.finishes, &summary)
    }

    /// Finishes the directories whose copies landed: at the end of the stretch of steps
    /// under way on a batching mirror (with its own finishes: one stat and one attribute
    /// call, where each group cost two), at once otherwise. No step of a stretch moves or
    /// removes anything, so none changes them meanwhile.
    func finishLanded(_ finishes: [Finish], _ summary: inout SyncSummary) {
        guard !finishes.isEmpty else { return }
        if stretchFinishes != nil {
            stretchFinishes! += finishes
        } else {
            finishAll(finishes, summary: &summary)
        }
    }

    /// Records the copies that landed and reports the ones that failed.
    private func note(_ results: [(RelativePath, Result<CopyResult?, any Error>)], _ summary: inout SyncSummary) {
        for (path, result) in results {
            switch result {
            case .success(let copied?):
                recordCopy(copied)
                summary.copiedFiles += 1
                summary.copiedBytes += copied.installed.size
                progress.copied.files += 1
                progress.copied.bytes += copied.installed.size
                onCopy?(progress)
            case .success(nil):
                break
            case .failure(let error as KeepSyncError) where error.code == .tooLarge:
                skipTooLarge(path, size: (try? source.stat(path))??.size ?? 0)
                summary.skippedUnholdable += 1
            case .failure(let error):
                report(error, path: path, into: &summary)
            }
        }
    }
}
