import Glibc

/// A task executor with one thread of its own: the simulation's seeds, the manager's
/// actor jobs and its own tasks (copy completions, record reports) all run there, in the
/// order they were enqueued. Seeds then neither wait for the concurrency pool (two threads
/// on two cores, which end-to-end tests hold while a child process runs) nor depend on
/// how other work interleaves with theirs.
final class SimulationThread: TaskExecutor, @unchecked Sendable {
    // Guarded by `mutex`.
    private var jobs: [UnownedJob] = []
    private var head = 0
    private var stopped = false
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var thread = pthread_t()

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
        let box = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(&thread, nil, { raw in
            Unmanaged<SimulationThread>.fromOpaque(raw!).takeRetainedValue().loop()
            return nil
        }, box)
        precondition(rc == 0, "pthread_create: \(rc)")
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        pthread_mutex_lock(mutex)
        jobs.append(unowned)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Ends the thread once the jobs queued so far ran.
    func stop() {
        pthread_mutex_lock(mutex)
        stopped = true
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
        pthread_join(thread, nil)
    }

    private func next() -> UnownedJob? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while head == jobs.count {
            if stopped { return nil }
            pthread_cond_wait(condition, mutex)
        }
        let job = jobs[head]
        head += 1
        if head == jobs.count {
            jobs.removeAll(keepingCapacity: true)
            head = 0
        }
        return job
    }

    private func loop() {
        while let job = next() { job.runSynchronously(on: asUnownedTaskExecutor()) }
    }
}
