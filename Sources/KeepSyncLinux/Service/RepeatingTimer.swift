import Dispatch
import KeepSyncCore

/// A Dispatch timer on a queue of its own (not the concurrency pool, whose threads a
/// scan may hold): the watchdog's ticks keep coming while the pool is busy.
// @unchecked: the timer is created in init and only cancelled after; Dispatch sources
// are thread-safe but not annotated Sendable.
final class RepeatingTimer: TimerHandle, @unchecked Sendable {
    private let timer: any DispatchSourceTimer

    /// Starts ticking now, then every `interval`.
    init(label: String, every interval: Duration, _ tick: @escaping @Sendable () -> Void) {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: label))
        let (seconds, attoseconds) = interval.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        timer.schedule(deadline: .now(), repeating: .nanoseconds(nanoseconds), leeway: .milliseconds(1))
        timer.setEventHandler(handler: tick)
        timer.resume()
    }

    /// Stops the ticks.
    func cancel() { timer.cancel() }
}
