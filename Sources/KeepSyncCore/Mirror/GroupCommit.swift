import Dispatch
import Synchronization

/// A local group commit in flight: a staged group whose barrier runs on `io`'s side
/// thread (in order on the caller with `.serial`) while the caller stages the next
/// group; `finish` waits for it and publishes.
final class GroupCommit: PendingInstall {
    private var group: StagedGroup
    private let mirror: LocalMirror
    private let source: any FileSystemProviding
    private let io: ParallelIO
    private let logger: Logger
    private var barrier: DispatchGroup?
    private let outcome = BarrierOutcome()

    /// What a barrier on another thread said.
    private final class BarrierOutcome: Sendable {
        let error = Mutex<(any Error)?>(nil)
    }

    init(_ group: StagedGroup, mirror: LocalMirror, source: any FileSystemProviding, io: ParallelIO, logger: Logger) {
        self.group = group
        self.mirror = mirror
        self.source = source
        self.io = io
        self.logger = logger
    }

    /// Starts the barrier (none when nothing was staged).
    func commit() {
        guard barrier == nil else { return }
        let steps = mirror.steps, outcome = self.outcome
        barrier = group.staged.isEmpty ? DispatchGroup() : io.start {
            do { try steps.barrier() } catch { outcome.error.withLock { $0 = error } }
        }
    }

    /// Waits for the barrier, then publishes.
    func finish() -> [(path: RelativePath, result: Result<CopyResult?, any Error>)] {
        commit()
        barrier?.wait()
        group.publish(barrierError: outcome.error.withLock { $0 }, from: source, into: mirror, logger: logger)
        return group.orderedResults
    }
}
