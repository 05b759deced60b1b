import Dispatch

/// Where a sync manager's actor runs: a serial Dispatch queue, whose thread comes from
/// Dispatch and not from Swift's cooperative pool. Scans, directory listings and the
/// prefetcher's semaphores block that thread while the manager works; the pool's threads
/// (as many as cores, two here) stay free for everything else.
public final class ManagerExecutor: SerialExecutor {
    private static let key = DispatchSpecificKey<Bool>()
    private let queue: DispatchQueue

    /// An executor on a serial queue of its own.
    public init(label: String = "keepsync.manager") {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: Self.key, value: true)
    }

    /// Runs `job` on the queue, in the order enqueued.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }

    /// True when the caller runs on a manager's queue (not on the cooperative pool).
    public static var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == true }
}
