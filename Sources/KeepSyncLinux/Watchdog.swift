import Dispatch
import Synchronization
import KeepSyncCore

/// systemd's watchdog, on a Dispatch timer of its own (not the concurrency pool, whose
/// threads a scan may hold): `WATCHDOG=1` every `interval` while `heartbeat` beats.
/// Each tick sends a probe through the agent and its manager, which beats when it gets
/// through; long work holding them beats as it goes. A hang stops both, and the pings.
// @unchecked: the timer is created in init and only cancelled after; Dispatch sources
// are thread-safe but not annotated Sendable.
final class Watchdog: @unchecked Sendable {
    private let timer: any DispatchSourceTimer

    /// Starts ticking now: the first tick pings.
    init(interval: Duration, heartbeat: Heartbeat, ping: @escaping @Sendable () -> Void,
         probe: @escaping @Sendable () async -> Void) {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "keepsync.watchdog"))
        let seen = Mutex<UInt64?>(nil)
        let (seconds, attoseconds) = interval.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        timer.schedule(deadline: .now(), repeating: .nanoseconds(nanoseconds), leeway: .milliseconds(1))
        timer.setEventHandler {
            let beats = heartbeat.beats
            if seen.withLock({ last in defer { last = beats }; return last != beats }) { ping() }
            heartbeat.probe(probe)
        }
        timer.resume()
    }

    /// Stops the pings.
    func cancel() { timer.cancel() }
}
