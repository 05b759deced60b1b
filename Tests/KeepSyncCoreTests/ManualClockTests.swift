import KeepSyncTestSupport
import Synchronization
import Testing

@Suite("ManualClock")
struct ManualClockTests {
    @Test func aSleepStartedByAnAlreadyCancelledTaskThrowsWithoutTheClockMoving() async throws {
        let clock = ManualClock()
        let outcome = Mutex<Bool?>(nil)
        let task = Task {
            // Cancelled before the sleep begins: its cancellation handler runs at once,
            // before the sleeper is stored.
            while !Task.isCancelled { await Task.yield() }
            do {
                try await clock.sleep(until: clock.now.advanced(by: .seconds(1)), tolerance: nil)
                outcome.withLock { $0 = false }
            } catch {
                outcome.withLock { $0 = true }
            }
        }
        task.cancel()
        let ended = await eventually(timeout: .seconds(10)) { outcome.withLock { $0 } != nil }
        #expect(ended, "the cancelled sleep never returned")
        #expect(outcome.withLock { $0 } == true)
        #expect(clock.now == ManualClock.Instant(offset: .zero))
        if !ended { clock.advance(by: .seconds(1)) }
    }
}
