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

    /// Group commit, step 1: opens every file and asks for its data ahead (the group's
    /// small files then come from the disk together, not one read after another; asking
    /// 64 at a time made a cold copy of 100,000 small files 20% slower), then stages
    /// them, `io.width` runs at a time: a run is files of one directory, at most
    /// `runFiles` and about `runBytes`, so that two threads rarely create files in one
    /// directory at once (each create holds the directory's lock, and the others spun on
    /// it: 12% of a cold 100k-file copy's samples).
    init(staging paths: [RelativePath], from source: any FileSystemProviding, into steps: any FileAccessorProviding,
                io: ParallelIO) {
        let opened = OpenedFiles(count: paths.count)
        let slots = Mutex<[Result<StagedFile?, any Error>?]>(Array(repeating: nil, count: paths.count))
        io.forEach(paths.count) { i in
            opened.set(i, Result {
                let file: any SourceFile
                do { file = try source.open(paths[i]) } catch let error as KeepSyncError where error.code == .notFound {
                    return nil
                }
                file.willRead()
                return file
            })
        }
        let runs = Self.runs(paths, size: opened.size)
        io.forEach(runs.count) { r in
            for i in runs[r] {
                let outcome: Result<StagedFile?, any Error> = opened.take(i).flatMap { file in
                    guard let file else { return .success(nil) }
                    defer { file.close() }
                    return Result { try steps.stage(paths[i], from: file, durable: false) }
                }
                slots.withLock { $0[i] = outcome }
            }
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

    static let runFiles = 16
    static let runBytes: UInt64 = 1 << 20

    /// Splits `paths` into runs of neighbours in one directory (see `init`).
    static func runs(_ paths: [RelativePath], size: (Int) -> UInt64) -> [Range<Int>] {
        var runs: [Range<Int>] = []
        var start = 0, bytes: UInt64 = 0
        for i in paths.indices {
            if i > start && (i - start >= runFiles || bytes >= runBytes || paths[i].parent != paths[start].parent) {
                runs.append(start..<i)
                start = i
                bytes = 0
            }
            bytes += size(i)
        }
        if start < paths.count { runs.append(start..<paths.count) }
        return runs
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
        var unchanged: [StagedFile] = []
        for s in staged {
            let now = try? source.currentVersion(s.path)
            guard let now, now.sameVersion(as: s.source) else {
                steps.discard(s)
                results[s.path] = mirror.changedCopyRetries == 0
                    ? .failure(KeepSyncError(.sourceChanged, "source changed during copy", path: s.path))
                    : Result { try mirror.copyFile(s.path, from: source, logger: logger, attempts: mirror.changedCopyRetries) }
                continue
            }
            unchanged.append(s)
        }
        for (s, installed) in zip(unchanged, steps.publishAll(unchanged)) {
            results[s.path] = installed.map { installed in
                logger.debug("copied \(s.path.escaped) (\(installed.size) bytes)")
                return CopyResult(path: s.path, source: s.source, installed: installed)
            }
        }
    }
}

/// A group's opened source files between its two steps: slot `i` is written by the one
/// thread that opened file `i`, then read by the one that stages it, after the first
/// `forEach` returned (its wait orders the two). A raw buffer, not an array: threads write
/// distinct slots at once, which an array's copy-on-write check would race on.
private final class OpenedFiles: @unchecked Sendable {
    private let slots: UnsafeMutableBufferPointer<Result<(any SourceFile)?, any Error>>

    init(count: Int) {
        slots = .allocate(capacity: count)
        slots.initialize(repeating: .success(nil))
    }

    deinit {
        for file in slots { if case .success(let file?) = file { file.close() } }
        slots.deinitialize()
        slots.deallocate()
    }

    func set(_ i: Int, _ file: Result<(any SourceFile)?, any Error>) { slots[i] = file }

    /// The size of file `i` when opened (0 for none).
    func size(_ i: Int) -> UInt64 {
        if case .success(let file?) = slots[i] { return file.stat.size }
        return 0
    }

    /// The file of slot `i`, now the caller's to close.
    func take(_ i: Int) -> Result<(any SourceFile)?, any Error> {
        defer { slots[i] = .success(nil) }
        return slots[i]
    }
}
