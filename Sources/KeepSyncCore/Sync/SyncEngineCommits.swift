/// The engine's side of a group commit: its batched copies go to the mirror's
/// `beginInstall` in groups, each group's barrier overlapping the staging of the next,
/// then recorded, then the directory finishes that waited for them run.
extension SyncEngine {
    /// Stages the batched copies and commits the group before them (a lone copy commits at once),
    /// records them, then runs the directory finishes that waited for them.
    func commitBatch(_ summary: inout SyncSummary) {
        let paths = batch
        batch.removeAll(keepingCapacity: true)
        batchBytes = 0
        // Each group's barrier overlaps the staging of the next (on `io`'s side thread;
        // in order on the caller with `.serial`).
        guard paths.count > 1 else {
            finishInFlight(&summary)
            if !paths.isEmpty {
                let results = mirror.install(paths, from: source, io: io, logger: logger)
                note(results.map { ($0.path, $0.result) }, &summary)
            }
            let finishes = waitingFinishes
            waitingFinishes.removeAll()
            for f in finishes { finish(f.path, source: f.source, entriesChanged: f.dirty, summary: &summary) }
            return
        }
        let group = mirror.beginInstall(paths, from: source, io: io, logger: logger)
        finishInFlight(&summary)
        group.commit()
        inFlight = (group, waitingFinishes)
        waitingFinishes.removeAll()
    }

    /// Waits for the in-flight group's barrier, publishes and records it, runs its finishes.
    func finishInFlight(_ summary: inout SyncSummary) {
        guard let pending = inFlight else { return }
        inFlight = nil
        note(pending.group.finish().map { ($0.path, $0.result) }, &summary)
        for f in pending.finishes { finish(f.path, source: f.source, entriesChanged: f.dirty, summary: &summary) }
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
