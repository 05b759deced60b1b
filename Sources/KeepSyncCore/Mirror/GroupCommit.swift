import Dispatch
import Synchronization

/// A local group commit in flight, each step in its lane of `io` (see `ParallelIO.Lane`):
/// staged from the start, its barrier once the staging ended, its renames once the
/// barrier did; the caller goes on with its walk meanwhile, and `finish` waits for the
/// results. With `.serial` the steps run in order on the caller, the renames at `finish`.
final class GroupCommit: PendingInstall {
    typealias Results = [(path: RelativePath, result: Result<CopyResult?, any Error>)]
    private let shared = Shared()
    private let staging: DispatchGroup
    private let mirror: LocalMirror
    private let source: any FileSystemProviding
    private let io: ParallelIO
    private let logger: Logger
    private var published: DispatchGroup?
    private var finished = false

    /// What the lanes hand over.
    private final class Shared: Sendable {
        let staged = Mutex<StagedGroup?>(nil)
        let barrierError = Mutex<(any Error)?>(nil)
        let results = Mutex<Results?>(nil)
        /// Set when the group is let go of unfinished: its renames discard instead.
        let abandoned = Atomic<Bool>(false)
    }

    /// Starts staging `paths`, and the rest once it ended.
    init(_ paths: [RelativePath], mirror: LocalMirror, source: any FileSystemProviding, io: ParallelIO, logger: Logger) {
        self.mirror = mirror
        self.source = source
        self.io = io
        self.logger = logger
        let shared = self.shared, steps = mirror.steps
        staging = io.start(.stage) {
            let group = StagedGroup(staging: paths, from: source, into: steps, io: io)
            shared.staged.withLock { $0 = group }
        }
        commit()
    }

    /// Starts the barrier once the staging ended (none when nothing was staged), then the
    /// renames (beside the caller only).
    func commit() {
        guard published == nil else { return }
        let steps = mirror.steps, shared = self.shared, staging = self.staging
        let barrier = io.start(.barrier) {
            staging.wait()
            guard shared.staged.withLock({ $0?.staged.isEmpty == false }) else { return }
            do { try steps.barrier() } catch { shared.barrierError.withLock { $0 = error } }
        }
        guard io.runsBeside else {
            published = barrier
            return
        }
        let mirror = self.mirror, source = self.source, logger = self.logger
        published = io.start(.publish) {
            barrier.wait()
            Self.publish(shared, from: source, into: mirror, logger: logger)
        }
    }

    deinit {
        if !finished { shared.abandoned.store(true, ordering: .relaxed) }
    }

    /// Waits for the renames (serial: does them), then returns the results.
    func finish() -> Results {
        if finished { return shared.results.withLock { $0 } ?? [] }
        finished = true
        commit()
        published?.wait()
        if !io.runsBeside { Self.publish(shared, from: source, into: mirror, logger: logger) }
        return shared.results.withLock { $0 } ?? []
    }

    /// Publishes the staged group after its barrier and keeps the results.
    private static func publish(_ shared: Shared, from source: any FileSystemProviding, into mirror: LocalMirror,
                                logger: Logger) {
        guard var group = shared.staged.withLock({ $0 }) else { return }
        if shared.abandoned.load(ordering: .relaxed) {
            for s in group.staged { mirror.steps.discard(s) }
            return
        }
        group.publish(barrierError: shared.barrierError.withLock { $0 }, from: source, into: mirror, logger: logger)
        let results = group.orderedResults
        shared.results.withLock { $0 = results }
    }
}
