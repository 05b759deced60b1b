import Synchronization

/// Files of a local group commit written to temp files, waiting for their barrier.
struct StagedGroup: Sendable {
    /// The paths, in order.
    var paths: [RelativePath]
    /// Staged copies, in path order.
    var staged: [StagedFile]
    /// Outcomes known so far (failed or vanished before staging; all after `publish`).
    var results: [RelativePath: Result<CopyResult?, any Error>]

    /// The outcomes in path order (a path without one: nothing to copy).
    var orderedResults: [(path: RelativePath, result: Result<CopyResult?, any Error>)] {
        paths.map { ($0, results[$0] ?? .success(nil)) }
    }

    /// Group commit, step 1: opens and stages every file, `io.width` at a time.
    init(staging paths: [RelativePath], from source: any FileSystemProviding, into steps: any FileAccessorProviding,
                io: ParallelIO) {
        let slots = Mutex<[Result<StagedFile?, any Error>?]>(Array(repeating: nil, count: paths.count))
        io.forEach(paths.count) { i in
            let path = paths[i]
            let outcome: Result<StagedFile?, any Error> = Result {
                let file: any SourceFile
                do { file = try source.open(path) } catch let error as KeepSyncError where error.code == .notFound {
                    return nil
                }
                defer { file.close() }
                return try steps.stage(path, from: file, durable: false)
            }
            slots.withLock { $0[i] = outcome }
        }
        self.paths = paths
        staged = []
        results = [:]
        for (i, slot) in slots.withLock({ $0 }).enumerated() {
            switch slot {
            case .success(let file?): staged.append(file)
            case .success(nil), nil: results[paths[i]] = .success(nil)
            case .failure(let error): results[paths[i]] = .failure(error)
            }
        }
    }

    /// Group commit, step 2 (after the barrier): renames each staged file whose source is
    /// still the version copied; one that changed is copied again on its own. A failed
    /// barrier publishes nothing: every staged file is discarded and fails.
    mutating func publish(barrierError: (any Error)?, from source: any FileSystemProviding, into mirror: LocalMirror,
                                 logger: Logger) {
        let steps = mirror.steps
        if let barrierError {
            for s in staged {
                steps.discard(s)
                results[s.path] = .failure(barrierError)
            }
            return
        }
        for s in staged {
            let now = try? source.currentVersion(s.path)
            guard let now, now.sameVersion(as: s.source) else {
                steps.discard(s)
                results[s.path] = Result { try mirror.copyFile(s.path, from: source, logger: logger) }
                continue
            }
            results[s.path] = Result {
                let installed = try steps.publish(s)
                logger.debug("copied \(s.path.escaped) (\(installed.size) bytes)")
                return CopyResult(path: s.path, source: s.source, installed: installed)
            }
        }
    }
}
