import Dispatch
import Synchronization

/// Lists the directories a scan is about to visit, source and mirror side, on several
/// threads ahead of it: while the scan plans one directory, the next ones are read (a
/// cold disk serves many requests at once). Workers always take the pending directory
/// that comes first in the scan's order (path order is depth-first preorder), and at most
/// `window` finished listings wait; the scan runs a job itself when no worker has started
/// it, so it never waits on the order.
final class ScanPrefetcher: Sendable {
    /// Both sides of one directory.
    struct Listing: Sendable {
        var source: Result<[DirectoryEntry], any Error>
        /// nil when the mirror holds no directory there.
        var mirror: [DirectoryEntry]?
    }

    final class Job: Sendable {
        let path: RelativePath
        let mirrorIsDirectory: Bool
        let done = DispatchSemaphore(value: 0)
        /// Written once by whoever runs the job, before `done` is signalled.
        let result = Mutex<Listing?>(nil)

        init(path: RelativePath, mirrorIsDirectory: Bool) {
            self.path = path
            self.mirrorIsDirectory = mirrorIsDirectory
        }
    }

    struct State {
        /// Pending jobs, a min-heap by path.
        var heap: [Job] = []
        var queued: [RelativePath: Job] = [:]
        var running: [RelativePath: Job] = [:]
        var finished: [RelativePath: Job] = [:]
        var stopped = false
    }

    let source: any FileSystemProviding
    let mirror: any FileSystemProviding
    let excludes: ExcludeMatcher
    let state = SleepingLock(State())
    /// One signal per job pushed (and `width` more on stop).
    let available = DispatchSemaphore(value: 0)
    /// Free places for finished, not yet taken listings.
    let window: DispatchSemaphore
    let io: ParallelIO
    let group = DispatchGroup()
    private let listed = Atomic<Int>(0)

    /// Directories listed so far, by the workers and by the scan (each one once).
    var listings: Int { listed.load(ordering: .relaxed) }

    init(source: any FileSystemProviding, mirror: any FileSystemProviding, excludes: ExcludeMatcher, io: ParallelIO,
         window: Int = 96) {
        self.source = source
        self.mirror = mirror
        self.excludes = excludes
        self.io = io
        // Made with 0 and raised: libdispatch traps when a semaphore is freed below the
        // value it was made with.
        self.window = DispatchSemaphore(value: 0)
        for _ in 0..<window { self.window.signal() }
    }

    /// Starts the workers at `scope`.
    func start(_ scope: RelativePath, mirrorIsDirectory: Bool) {
        push([Job(path: scope, mirrorIsDirectory: mirrorIsDirectory)])
        for queue in io.queues {
            queue.async(group: group) { self.work() }
        }
    }

    /// Stops the workers and waits for them (listings not taken are dropped).
    func stop() {
        state.withLock { $0.stopped = true }
        for _ in io.queues { available.signal() }
        // Workers waiting for a window place must see the stop too.
        for _ in io.queues { window.signal() }
        group.wait()
    }

    private func push(_ jobs: [Job]) {
        state.withLock { s in
            for job in jobs {
                s.heap.append(job)
                var i = s.heap.count - 1
                while i > 0 {
                    let parent = (i - 1) / 2
                    guard s.heap[i].path < s.heap[parent].path else { break }
                    s.heap.swapAt(i, parent)
                    i = parent
                }
                s.queued[job.path] = job
            }
        }
        for _ in jobs { available.signal() }
    }

    /// Takes the first pending job in path order.
    private static func popFirst(_ s: inout State) -> Job? {
        guard !s.heap.isEmpty else { return nil }
        let first = s.heap[0]
        let last = s.heap.removeLast()
        if !s.heap.isEmpty {
            s.heap[0] = last
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var smallest = i
                if l < s.heap.count, s.heap[l].path < s.heap[smallest].path { smallest = l }
                if r < s.heap.count, s.heap[r].path < s.heap[smallest].path { smallest = r }
                if smallest == i { break }
                s.heap.swapAt(i, smallest)
                i = smallest
            }
        }
        return first
    }

    private func work() {
        while true {
            available.wait()
            window.wait()
            let job: Job? = state.withLock { s in
                if s.stopped { return nil }
                // A job the scan ran itself is still in the heap: skip it.
                while let job = ScanPrefetcher.popFirst(&s) {
                    guard s.queued[job.path] === job else { continue }
                    s.queued[job.path] = nil
                    s.running[job.path] = job
                    return job
                }
                return nil
            }
            guard let job else {
                window.signal()
                if state.withLock({ $0.stopped }) { return }
                continue
            }
            // The subdirectories are queued before the listing is handed over: a scan that
            // took the listing first found them nowhere, listed them itself, and the late
            // jobs were listed again and held read-ahead places to the end of the scan
            // (96 of them stopped every worker; the scan then queued a job per directory
            // that nobody took: 50 MiB more on a 1M-file tree, and no read-ahead).
            let children = run(job)
            push(children)
            state.withLock { s in
                s.running[job.path] = nil
                s.finished[job.path] = job
            }
            job.done.signal()
        }
    }

    /// Lists both sides; returns the jobs for the subdirectories the scan will enter.
    private func run(_ job: Job) -> [Job] {
        listed.add(1, ordering: .relaxed)
        let listing = Listing(source: Result { try source.list(job.path) },
                              mirror: job.mirrorIsDirectory ? ((try? mirror.list(job.path)) ?? []) : nil)
        job.result.withLock { $0 = listing }
        guard case .success(let entries) = listing.source else { return [] }
        var mirrorDirectories: Set<[UInt8]> = []
        for e in listing.mirror ?? [] where e.stat.kind == .directory { mirrorDirectories.insert(e.name) }
        return entries.filter { $0.stat.kind == .directory && !excludes.matches(job.path.appending($0.name), isDirectory: true) }
            .sorted { RelativePath(bytes: $0.name) < RelativePath(bytes: $1.name) }
            .map { Job(path: job.path.appending($0.name), mirrorIsDirectory: mirrorDirectories.contains($0.name)) }
    }

    /// The listing of `path`: prefetched, waited for, or made now.
    func take(_ path: RelativePath, mirrorIsDirectory: Bool) -> Listing {
        enum Found { case finished(Job), running(Job), none }
        let found: Found = state.withLock { s in
            if let job = s.finished.removeValue(forKey: path) { return .finished(job) }
            if let job = s.running[path] { return .running(job) }
            // A queued job stays in the heap; the worker that pops it skips it.
            s.queued[path] = nil
            return .none
        }
        switch found {
        case .finished(let job):
            window.signal()
            if job.mirrorIsDirectory == mirrorIsDirectory, let listing = job.result.withLock({ $0 }) { return listing }
        case .running(let job):
            job.done.wait()
            _ = state.withLock { $0.finished.removeValue(forKey: path) }
            window.signal()
            if job.mirrorIsDirectory == mirrorIsDirectory, let listing = job.result.withLock({ $0 }) { return listing }
        case .none:
            break
        }
        // Not prefetched (or for another view of the mirror): list here; the children
        // still get prefetched.
        let job = Job(path: path, mirrorIsDirectory: mirrorIsDirectory)
        let children = run(job)
        push(children)
        return job.result.withLock { $0 }!
    }
}
