import Synchronization
import Testing
@testable import KeepSyncCore

@Suite("Watchdog")
struct WatchdogTests {
    @Test func aTickPingsOnlyAfterABeatAndTheFirstAlways() async throws {
        let heartbeat = Heartbeat()
        let pings = Atomic(0)
        let release = AsyncStream.makeStream(of: Void.self)
        // The probe hangs until released: the agent is stuck.
        let dog = Watchdog(heartbeat: heartbeat, ping: { pings.add(1, ordering: .relaxed) },
                           probe: { for await _ in release.stream { return } })
        dog.tick()
        #expect(pings.load(ordering: .relaxed) == 1)
        dog.tick()
        dog.tick()
        #expect(pings.load(ordering: .relaxed) == 1, "no beat, no ping")
        heartbeat.beat()
        dog.tick()
        #expect(pings.load(ordering: .relaxed) == 2)
        // The probe gets through: it beats, so the next tick pings.
        let before = heartbeat.beats
        release.continuation.yield()
        let deadline = ContinuousClock.now + .seconds(10)
        while heartbeat.beats == before {
            try #require(ContinuousClock.now < deadline, "the probe's beat")
            await Task.yield()
        }
        dog.tick()
        #expect(pings.load(ordering: .relaxed) == 3)
    }
}
