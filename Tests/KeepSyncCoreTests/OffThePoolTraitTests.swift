import Synchronization
import Testing
import KeepSyncCore
import KeepSyncTestSupport

/// The trait end-to-end suites carry: their blocking bodies must leave Swift's cooperative
/// pool to the async tests' timers (a full run once starved a 20 ms settle for 30 s).
@Suite("OffThePoolTrait", .offThePool)
struct OffThePoolTraitTests {
    static let inside = Atomic<Int>(0)
    static let most = Atomic<Int>(0)

    @Test("a synchronous test body runs on a thread of its own, not on the pool")
    func syncBodyRunsOffThePool() {
        #expect(ManagerThread.isCurrent)
    }

    @Test("each case of a parameterized test is off the pool; at most the gate's width at once", arguments: 0..<6)
    func casesAreGated(_ n: Int) {
        #expect(ManagerThread.isCurrent, "case \(n)")
        let now = Self.inside.add(1, ordering: .relaxed).newValue
        Self.most.max(now, ordering: .relaxed)
        // Long enough for the other cases to pile up at the gate.
        _ = eventuallyBlocking(timeout: .milliseconds(30)) { false }
        Self.inside.subtract(1, ordering: .relaxed)
        let most = Self.most.load(ordering: .relaxed)
        #expect(most <= OffThePoolTrait.width, "\(most) at once")
    }
}

@Suite("TestGate")
struct TestGateTests {
    @Test("a full gate holds the next caller until one leaves, then lets it in")
    func fullGateHoldsTheNext() async {
        let gate = TestGate(width: 1)
        await gate.enter()
        let entered = Atomic<Bool>(false)
        let second = Task {
            await gate.enter()
            entered.store(true, ordering: .relaxed)
        }
        // Nothing to wait on for "still outside": give it many chances to get in wrongly.
        for _ in 0..<50 { await Task.yield() }
        let early = entered.load(ordering: .relaxed)
        #expect(!early)
        await gate.leave()
        await second.value
        let late = entered.load(ordering: .relaxed)
        #expect(late)
    }
}
