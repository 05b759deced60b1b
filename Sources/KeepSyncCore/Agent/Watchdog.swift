import Synchronization

/// The service watchdog's decision, one tick at a time (the host's timer ticks twice per
/// `$WATCHDOG_USEC`, off the concurrency pool): `WATCHDOG=1` on every tick that finds
/// the heartbeat beaten since the last, then a probe through the agent and its manager,
/// which beats when it gets through. Long work holding them beats as it goes; a hang
/// stops both, and the pings.
public final class Watchdog: Sendable {
    private let heartbeat: Heartbeat
    private let ping: @Sendable () -> Void
    private let probe: @Sendable () async -> Void
    private let seen = Mutex<UInt64?>(nil)

    /// A watchdog pinging through `ping`, probing through `probe`. The first tick pings.
    public init(heartbeat: Heartbeat, ping: @escaping @Sendable () -> Void, probe: @escaping @Sendable () async -> Void) {
        self.heartbeat = heartbeat
        self.ping = ping
        self.probe = probe
    }

    /// One tick of the timer.
    public func tick() {
        let beats = heartbeat.beats
        if seen.withLock({ last in defer { last = beats }; return last != beats }) { ping() }
        heartbeat.probe(probe)
    }
}
