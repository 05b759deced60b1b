import KeepSyncCore
import Synchronization

/// A watcher the test drives: `publish` hands an event to whoever consumes the stream.
public final class FakeWatcher: WatcherProviding {
    private let state = Mutex<(continuation: AsyncStream<WatchEvent>.Continuation?, started: Bool, stopped: Bool,
                               excludes: ExcludeMatcher?, unwatched: Int, pollPeriod: Duration)>(
                                   (nil, false, false, nil, 0, .seconds(10)))

    /// A watcher not started yet.
    public init() {}

    /// Starts; the stream ends on `stop`.
    public func start(excluding excludes: ExcludeMatcher) throws -> AsyncStream<WatchEvent> {
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
