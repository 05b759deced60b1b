import Dispatch
import Synchronization

/// Group commit (moved verbatim from SyncEngine.swift): copies staged in groups, one
/// barrier per group overlapping the staging of the next, then published and recorded.
extension SyncEngine {
    /// What a barrier on another thread said.
    final class BarrierOutcome: Sendable {
        let error = Mutex<(any Error)?>(nil)
    }

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
                let results = SyncEngine.copyFiles(paths, source: source, mirror: mirror, logger: logger, io: io)
                note(results.map { ($0.path, $0.result) }, &summary)
            }
            let finishes = waitingFinishes
            waitingFinishes.removeAll()
            for f in finishes { finish(f.path, source: f.source, entriesChanged: f.dirty, summary: &summary) }
            return
        }
        let group = SyncEngine.stage(paths, source: source, mirror: mirror, io: io)
        finishInFlight(&summary)
        let outcome = BarrierOutcome()
        let mirror = self.mirror
        let barrier = group.staged.isEmpty ? DispatchGroup() : io.start {
            do { try mirror.barrier() } catch { outcome.error.withLock { $0 = error } }
        }
        inFlight = (group, barrier, outcome, waitingFinishes)
        waitingFinishes.removeAll()
    }

    /// Waits for the in-flight group's barrier, publishes and records it, runs its finishes.
    func finishInFlight(_ summary: inout SyncSummary) {
        guard var pending = inFlight else { return }
        inFlight = nil
        pending.barrier.wait()
        SyncEngine.publish(&pending.group, barrierError: pending.error.error.withLock { $0 }, source: source, mirror: mirror, logger: logger)
        note(pending.group.paths.map { ($0, pending.group.results[$0] ?? .success(nil)) }, &summary)
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
                onCopy?(copied.installed.size)
            case .success(nil):
                break
            case .failure(let error):
                report(error, path: path, into: &summary)
            }
        }
    }

    /// What a copy did: the source version copied and the installed mirror file.
    public struct CopyResult: Sendable, Equatable {
        /// The path.
        public var path: RelativePath
        /// The source's stat when it was opened (the version copied).
        public var source: FileStat
        /// The mirror file's stat after the rename.
        public var installed: FileStat
    }

    /// Copies one file, again when it changed during the copy; nil when the source
    /// vanished (not an error). Touches no engine state: safe on any thread.
    public static func copyFile(_ path: RelativePath, source: any FileSystemProviding, mirror: any FileAccessorProviding,
                                logger: Logger, attempts: Int = 5) throws -> CopyResult? {
        var attempt = 0
        while true {
            attempt += 1
            let file: any SourceFile
            do { file = try source.open(path) } catch let error as KeepSyncError where error.code == .notFound {
                logger.debug("\(path.escaped) vanished before it was copied")
                return nil
            }
            defer { file.close() }
            do {
                let installed = try mirror.install(path, from: file)
                logger.debug("copied \(path.escaped) (\(installed.size) bytes)")
                return CopyResult(path: path, source: file.stat, installed: installed)
            } catch let error as KeepSyncError where error.code == .sourceChanged && attempt < attempts {
                logger.debug("\(path.escaped) changed during copy; copying again")
            }
        }
    }

    /// The outcome of each copy, by path.
    public typealias CopyResults = [RelativePath: Result<CopyResult?, any Error>]

    /// Copies several files with one group commit: stage each, one barrier, then
    /// rename each whose source is still the version copied; a changed one is copied
    /// again on its own. A single file takes the plain `install` path. Touches no engine
    /// state: safe on any thread. Results are in the order of `paths`.
    public static func copyFiles(_ paths: [RelativePath], source: any FileSystemProviding, mirror: any FileAccessorProviding,
                                 logger: Logger, io: ParallelIO = .serial) -> [(path: RelativePath, result: Result<CopyResult?, any Error>)] {
        if paths.count == 1 {
            return [(paths[0], Result { try copyFile(paths[0], source: source, mirror: mirror, logger: logger) })]
        }
        var group = stage(paths, source: source, mirror: mirror, io: io)
        var barrierError: (any Error)?
        if !group.staged.isEmpty {
            do { try mirror.barrier() } catch { barrierError = error }
        }
        publish(&group, barrierError: barrierError, source: source, mirror: mirror, logger: logger)
        return paths.map { ($0, group.results[$0] ?? .success(nil)) }
    }

    /// Files written to temp files, waiting for their barrier.
    public struct StagedGroup: Sendable {
        /// The paths, in order.
        public var paths: [RelativePath]
        /// Staged copies, in path order.
        public var staged: [StagedFile]
        /// Outcomes known so far (failed or vanished before staging; all after `publish`).
        public var results: CopyResults
    }

    /// Group commit, step 1: opens and stages every file, `io.width` at a time.
    public static func stage(_ paths: [RelativePath], source: any FileSystemProviding, mirror: any FileAccessorProviding,
                             io: ParallelIO) -> StagedGroup {
        let slots = Mutex<[Result<StagedFile?, any Error>?]>(Array(repeating: nil, count: paths.count))
        io.forEach(paths.count) { i in
            let path = paths[i]
            let outcome: Result<StagedFile?, any Error> = Result {
                let file: any SourceFile
                do { file = try source.open(path) } catch let error as KeepSyncError where error.code == .notFound {
                    return nil
                }
                defer { file.close() }
                return try mirror.stage(path, from: file, durable: false)
            }
            slots.withLock { $0[i] = outcome }
        }
        var group = StagedGroup(paths: paths, staged: [], results: [:])
        for (i, slot) in slots.withLock({ $0 }).enumerated() {
            switch slot {
            case .success(let staged?): group.staged.append(staged)
            case .success(nil), nil: group.results[paths[i]] = .success(nil)
            case .failure(let error): group.results[paths[i]] = .failure(error)
            }
        }
        return group
    }

    /// Group commit, step 2 (after the barrier): renames each staged file whose source is
    /// still the version copied; one that changed is copied again on its own. A failed
    /// barrier publishes nothing: every staged file is discarded and fails.
    public static func publish(_ group: inout StagedGroup, barrierError: (any Error)?, source: any FileSystemProviding,
                               mirror: any FileAccessorProviding, logger: Logger) {
        if let barrierError {
            for s in group.staged {
                mirror.discard(s)
                group.results[s.path] = .failure(barrierError)
            }
            return
        }
        for s in group.staged {
            let now = try? source.currentVersion(s.path)
            guard let now, now.sameVersion(as: s.source) else {
                mirror.discard(s)
                group.results[s.path] = Result { try copyFile(s.path, source: source, mirror: mirror, logger: logger) }
                continue
            }
            group.results[s.path] = Result {
                let installed = try mirror.publish(s)
                logger.debug("copied \(s.path.escaped) (\(installed.size) bytes)")
                return CopyResult(path: s.path, source: s.source, installed: installed)
            }
        }
    }
}
