import Dispatch
import KeepSyncCore
import Synchronization

/// A watcher the test drives: `publish` hands an event to whoever consumes the stream.
public final class FakeWatcher: WatcherProviding {
    private let state = Mutex<(continuation: AsyncStream<WatchEvent>.Continuation?, started: Bool, stopped: Bool,
                               excludes: ExcludeMatcher?, unwatched: Int, pollPeriod: Duration)>(
                                   (nil, false, false, nil, 0, .seconds(10)))

    /// With `walksUntilStopped`, `start` blocks its caller until `stop`, as
    /// `InotifyWatcher.start` does while it walks a big tree, and then returns an ended
    /// stream, as that one does when stopped during its walk.
    private let walksUntilStopped: Bool
    private let walkEnded = DispatchSemaphore(value: 0)
    private let walking = Mutex(false)

    /// A watcher not started yet.
    public init(walksUntilStopped: Bool = false) {
        self.walksUntilStopped = walksUntilStopped
    }

    /// True while `start` is walking (`walksUntilStopped`).
    public var isWalking: Bool { walking.withLock { $0 } }

    /// Starts; the stream ends on `stop`.
    public func start(excluding excludes: ExcludeMatcher) throws -> AsyncStream<WatchEvent> {
        if walksUntilStopped {
            walking.withLock { $0 = true }
            walkEnded.wait()
            walking.withLock { $0 = false }
            state.withLock { $0.stopped = true }
            return AsyncStream { $0.finish() }
        }
        let (stream, continuation) = AsyncStream.makeStream(of: WatchEvent.self)
        state.withLock { s in
            s.continuation = continuation
            s.started = true
            s.excludes = excludes
        }
        return stream
    }

    /// Stops and ends the stream.
    public func stop() {
        if walksUntilStopped { walkEnded.signal() }
        let c = state.withLock { s in
            s.stopped = true
            defer { s.continuation = nil }
            return s.continuation
        }
        c?.finish()
    }

    /// The poll period reported while directories are unwatched.
    public var pollPeriod: Duration? {
        get { state.withLock { $0.unwatched > 0 ? $0.pollPeriod : nil } }
        set { state.withLock { $0.pollPeriod = newValue ?? .seconds(10) } }
    }

    /// Directories reported as unwatched.
    public var unwatchedDirectories: Int {
        get { state.withLock { $0.unwatched } }
        set { state.withLock { $0.unwatched = newValue } }
    }

    /// Delivers an event; false when the watcher is not running.
    @discardableResult
    public func publish(_ event: WatchEvent) -> Bool {
        guard let c = state.withLock({ $0.continuation }) else { return false }
        if case .enqueued = c.yield(event) { return true }
        return false
    }

    /// True once started and until stopped.
    public var isRunning: Bool { state.withLock { $0.started && !$0.stopped } }

    /// True once stopped.
    public var isStopped: Bool { state.withLock { $0.stopped } }

    /// The excludes it was started with.
    public var excludes: ExcludeMatcher? { state.withLock { $0.excludes } }
}
