import Synchronization

/// A clock that moves only when told: deterministic time for settle logic.
public final class ManualClock: Clock, Sendable {
    /// An instant: time since the clock's start.
    public struct Instant: InstantProtocol, Hashable, Sendable {
        /// Offset from the start.
        public var offset: Duration

        /// An instant at `offset`.
        public init(offset: Duration) { self.offset = offset }

        /// This instant moved by `duration`.
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }

        /// The duration from this instant to `other`.
        public func duration(to other: Instant) -> Duration { other.offset - offset }

        /// Orders instants.
        public static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
    }

    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private let state = Mutex((now: Instant(offset: .zero), sleepers: [Int: Sleeper](), next: 0))

    /// A clock at offset zero.
    public init() {}

    /// The current instant.
    public var now: Instant { state.withLock { $0.now } }

    /// One nanosecond.
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// Moves time forward, waking sleepers whose deadline passed.
    public func advance(by duration: Duration) {
        let due: [CheckedContinuation<Void, any Error>] = state.withLock { s in
            s.now = s.now.advanced(by: duration)
            let ready = s.sleepers.filter { $0.value.deadline <= s.now }
            for key in ready.keys { s.sleepers[key] = nil }
            return ready.values.map(\.continuation)
        }
        for c in due { c.resume() }
    }

    /// Suspends until `advance` reaches the deadline; throws when cancelled.
    public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        let id = state.withLock { s -> Int in
            s.next += 1
            return s.next
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLock { s -> Bool in
                    if deadline <= s.now { return true }
                    s.sleepers[id] = Sleeper(deadline: deadline, continuation: c)
                    return false
                }
                if resumeNow { return c.resume() }
                // A cancellation that came before the sleeper was stored found nothing to wake.
                if Task.isCancelled, let c = state.withLock({ s in
                    defer { s.sleepers[id] = nil }
                    return s.sleepers[id]?.continuation
                }) {
                    c.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let c = state.withLock { s -> CheckedContinuation<Void, any Error>? in
                defer { s.sleepers[id] = nil }
                return s.sleepers[id]?.continuation
            }
            c?.resume(throwing: CancellationError())
        }
    }
}
