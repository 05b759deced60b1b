import Dispatch
import Synchronization
import KeepSyncCore

/// systemd's watchdog, on a Dispatch timer of its own (not the concurrency pool, whose
/// threads a scan may hold): `WATCHDOG=1` on every tick, twice per `interval` (half of
/// `$WATCHDOG_USEC`), that finds `heartbeat` beaten since the last. Each tick sends a
/// probe through the agent and its manager, which beats when it gets through; long work
/// holding them beats as it goes. A hang stops both, and the pings. Ticking twice as
/// often as asked means one tick that finds no beat (the machine busy elsewhere) leaves
/// a gap of half `$WATCHDOG_USEC`, not all of it.
// @unchecked: the timer is created in init and only cancelled after; Dispatch sources
// are thread-safe but not annotated Sendable.
final class Watchdog: @unchecked Sendable {
    private let timer: any DispatchSourceTimer

    /// Starts ticking now: the first tick pings.
    init(interval: Duration, heartbeat: Heartbeat, ping: @escaping @Sendable () -> Void,
         probe: @escaping @Sendable () async -> Void) {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "keepsync.watchdog"))
        let seen = Mutex<UInt64?>(nil)
        let (seconds, attoseconds) = (interval / 2).components
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
