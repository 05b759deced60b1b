import Dispatch
import Synchronization

/// A serial executor with a thread of its own, and a task executor for that thread: a sync
/// manager's actor runs there, with its blocking scans and listings, so that they never
/// hold a thread of Swift's cooperative pool; tasks preferring it resume there too. A job
/// enqueued while the thread sleeps wakes it directly (a semaphore), not a pool. The thread
/// is taken from Dispatch once, like the inotify session's, and kept until `close`.
public final class ManagerThread: SerialExecutor, TaskExecutor {
    private struct State {
        var jobs: [UnownedJob] = []
        var sleeping = false
        var closed = false
    }

    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    private let ended = DispatchGroup()
    private static let isCurrentKey = DispatchSpecificKey<Bool>()

    /// Starts the thread; it holds the executor until `close`.
    public init(label: String = "keepsync.manager") {
        let queue = DispatchQueue(label: label)
        queue.setSpecific(key: Self.isCurrentKey, value: true)
        ended.enter()
        queue.async { [self] in
            run()
            ended.leave()
        }
    }

    /// Queues `job` behind the others; wakes the thread when it sleeps.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let sleeping = state.withLock { s in
            s.jobs.append(job)
            defer { s.sleeping = false }
            return s.sleeping
        }
        if sleeping { wake.signal() }
    }

    /// Ends the thread once the jobs queued so far ran; returns at once.
    public func close() {
        let sleeping = state.withLock { s in
            s.closed = true
            defer { s.sleeping = false }
            return s.sleeping
        }
        if sleeping { wake.signal() }
    }

    /// `close`, then waits for the thread to end (never call it from the thread).
    public func stop() {
        close()
        ended.wait()
    }

    /// True on a manager thread.
    public static var isCurrent: Bool { DispatchQueue.getSpecific(key: isCurrentKey) == true }

    private func run() {
        let serial = asUnownedSerialExecutor(), task = asUnownedTaskExecutor()
        var batch: [UnownedJob] = []
        while true {
            enum Next { case run, sleep, end }
            let next = state.withLock { s -> Next in
                guard s.jobs.isEmpty else {
                    swap(&batch, &s.jobs)
                    return .run
                }
                if s.closed { return .end }
                s.sleeping = true
                return .sleep
            }
            switch next {
            case .end: return
            case .sleep: wake.wait()
            case .run:
                for job in batch { job.runSynchronously(isolatedTo: serial, taskExecutor: task) }
                batch.removeAll(keepingCapacity: true)
            }
        }
    }
}
