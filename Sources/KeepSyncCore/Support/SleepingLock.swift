import Dispatch

/// A lock whose waiters sleep at once (a futex, through a dispatch semaphore) instead of
/// spinning. For state that many more threads than cores take often (the readers of a
/// cold start): there `Mutex` spins while the holder waits for a core, and its
/// priority-inheritance futex costs a trip through the kernel's rt_mutex; on 2 cores the
/// spinning alone took a fifth of a cold start's CPU.
public final class SleepingLock<Value: Sendable>: @unchecked Sendable {
    private var value: Value
    private let gate = DispatchSemaphore(value: 0)

    /// A lock holding `value`.
    public init(_ value: Value) {
        self.value = value
        // Made with 0 and raised: libdispatch traps when a semaphore is freed below the
        // value it was made with.
        gate.signal()
    }

    /// Runs `body` on the value, holding the lock.
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        gate.wait()
        defer { gate.signal() }
        return try body(&value)
    }
}
