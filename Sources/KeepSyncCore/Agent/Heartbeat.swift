import Synchronization

/// Signs of life for the service watchdog. Long work on an actor (a scan, a pass's
/// steps, the watcher's walk) beats once per directory or step; a probe that got
/// through the agent and its manager beats when it returns. The watchdog pings
/// systemd only while beats come, so a hang is caught and a long pass is not.
public final class Heartbeat: Sendable {
    private let count = Atomic<UInt64>(0)
    private let probing = Atomic<Bool>(false)

    /// A heartbeat that has not beaten yet.
    public init() {}

    /// One more sign of life.
    @inline(__always)
    public func beat() { count.wrappingAdd(1, ordering: .relaxed) }

    /// Beats so far.
    public var beats: UInt64 { count.load(ordering: .relaxed) }

    /// Runs `probe` on a new task unless the last one is still out, then beats.
    public func probe(_ probe: @escaping @Sendable () async -> Void) {
        guard probing.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        Task {
            await probe()
            self.beat()
            self.probing.store(false, ordering: .releasing)
        }
    }
}
