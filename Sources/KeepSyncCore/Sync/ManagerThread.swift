import Dispatch
import Synchronization

/// A serial executor with a thread of its own, and a task executor for that thread: a sync
/// manager's actor runs there, with its blocking scans and listings, so that they never
/// hold a thread of Swift's cooperative pool; tasks preferring it resume there too. A job
/// enqueued while the thread waits wakes it directly (a semaphore), not a pool. The thread
/// is taken from Dispatch (a serial queue's work item, like the inotify session's) and given
/// back after `idle` without work, so that managers that wait hold none of Dispatch's
/// limited threads; the next job takes one again.
public final class ManagerThread: SerialExecutor, TaskExecutor {
    private struct State {
        var jobs: [UnownedJob] = []
        /// The loop runs (or is about to).
        var running = false
        /// The loop waits on `wake`; whoever clears it signals once.
        var sleeping = false
        var closed = false
    }

    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    private let queue: DispatchQueue
    private let idle: Duration
    private let ended = DispatchGroup()
    private static let isCurrentKey = DispatchSpecificKey<Bool>()

    /// An executor whose thread is given back after `idle` without work.
    public init(label: String = "keepsync.manager", idle: Duration = .seconds(2)) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: Self.isCurrentKey, value: true)
        self.idle = idle
    }

    /// Queues `job` behind the others: wakes the waiting thread, or takes one.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        enum Action { case none, signal, start }
        let action = state.withLock { s -> Action in
            s.jobs.append(job)
            if s.sleeping {
                s.sleeping = false
                return .signal
            }
            if s.running { return .none }
            s.running = true
            return .start
        }
        switch action {
        case .none: break
        case .signal: wake.signal()
        case .start: start()
        }
    }

    /// Gives the thread back as soon as no job waits (a later job takes one again).
    public func close() {
        let sleeping = state.withLock { s in
            s.closed = true
            defer { s.sleeping = false }
            return s.sleeping
        }
        if sleeping { wake.signal() }
    }

    /// `close`, then waits until the thread is given back (never call it from the thread).
    public func stop() {
        close()
        ended.wait()
    }

    /// True while the executor holds a thread.
    var holdsThread: Bool { state.withLock { $0.running } }

    /// True on a manager thread.
    public static var isCurrent: Bool { DispatchQueue.getSpecific(key: isCurrentKey) == true }

    private func start() {
        ended.enter()
        // The work item holds the executor until the loop ends.
        queue.async { [self] in
            run()
            ended.leave()
        }
    }

    private func run() {
        let serial = asUnownedSerialExecutor(), task = asUnownedTaskExecutor()
        let timeout = Int(idle / .milliseconds(1))
        var batch: [UnownedJob] = []
        while true {
            enum Next { case run, sleep, end }
            let next = state.withLock { s -> Next in
                guard s.jobs.isEmpty else {
                    swap(&batch, &s.jobs)
                    return .run
                }
                if s.closed {
                    s.running = false
                    return .end
                }
                s.sleeping = true
                return .sleep
            }
            switch next {
            case .end: return
            case .run:
                for job in batch { job.runSynchronously(isolatedTo: serial, taskExecutor: task) }
                batch.removeAll(keepingCapacity: true)
            case .sleep:
                guard wake.wait(timeout: .now() + .milliseconds(timeout)) == .timedOut else { continue }
                let done = state.withLock { s -> Bool in
                    // Still asleep with nothing queued: give the thread back.
                    guard s.sleeping else { return false }
                    s.sleeping = false
                    s.running = false
                    return true
                }
                if done { return }
                // Someone cleared `sleeping` and signalled meanwhile: take that signal.
                wake.wait()
            }
        }
    }
}
