import KeepSyncCore
import Testing

/// Runs each test of a suite on a thread of its own (`offThePool`), at most `width` at once.
/// End-to-end tests block for seconds (child processes, big trees, strace logs): run on
/// Swift's cooperative pool (two threads here) they held it, and every async test's timers
/// and sleeps, which resume through that pool, waited behind them (a 20 ms settle took 30 s).
public struct OffThePoolTrait: TestTrait, SuiteTrait, TestScoping {
    /// How many such tests run at once across the whole run: the pool's width on 2 cores.
    public static let width = 2
    private static let gate = TestGate(width: width)

    /// Applies to every test in the suite.
    public var isRecursive: Bool { true }

    /// A scope for each test case, none for the suite itself.
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase == nil ? nil : self
    }

    /// Waits for a free place, then runs the test on a thread of its own.
    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        await Self.gate.enter()
        do {
            try await KeepSyncTestSupport.offThePool { try await function() }
        } catch {
            await Self.gate.leave()
            throw error
        }
        await Self.gate.leave()
    }
}

extension Trait where Self == OffThePoolTrait {
    /// Each test runs on a thread of its own, a bounded number at once (`OffThePoolTrait`).
    public static var offThePool: Self { OffThePoolTrait() }
}

/// Lets at most `width` callers between `enter` and `leave`; the others wait, in order,
/// without holding a thread.
public actor TestGate {
    private let width: Int
    private var inside = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// A gate for `width` callers at once.
    public init(width: Int) { self.width = width }

    /// Returns once the caller is one of at most `width` inside.
    public func enter() async {
        if inside < width {
            inside += 1
            return
        }
        // Asked again inside: a `leave` may run before the body does.
        await withCheckedContinuation { c in
            if inside < width {
                inside += 1
                c.resume()
            } else {
                waiting.append(c)
            }
        }
    }

    /// Lets the next waiter in (it takes the caller's place).
    public func leave() {
        if waiting.isEmpty {
            inside -= 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}
