import KeepSyncCore
#if canImport(Glibc)
import Glibc
#endif

/// Waits until `condition` holds (true) or `timeout` of real time passes (false),
/// trying again every `interval`; an interval of zero yields, then looks again after a
/// millisecond (a spinning waiter would take a core from the work it waits for). The
/// deadline only bounds a failure: generous, for a loaded machine.
public func eventually(timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(10),
                       _ condition: () async throws -> Bool) async rethrows -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try await condition() { return true }
        if clock.now >= deadline { return false }
        if interval == .zero {
            await Task.yield()
            if try await condition() { return true }
            try? await Task.sleep(for: .milliseconds(1))
        } else {
            try? await Task.sleep(for: interval)
        }
    }
}

/// The blocking form of `eventually`, for teardown paths that cannot await and for
/// moments that must not wait for a busy task pool to resume the test.
public func eventuallyBlocking(timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(10),
                               _ condition: () throws -> Bool) rethrows -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try condition() { return true }
        if clock.now >= deadline { return false }
        let (seconds, attoseconds) = interval.components
        usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
    }
}

/// Runs a test's blocking work (ssh, subprocesses) on a thread of its own, not on Swift's
/// cooperative pool: that pool has one thread per core (two here), and sync tests that
/// block for seconds starved every async test of a full run (timeouts in AgentTests and
/// UnreachableMirrorTests while the remote suites ran).
public func offThePool<T>(_ body: () throws -> T) async throws -> T {
    let thread = ManagerThread(label: "keepsync.test.blocking")
    defer { thread.close() }
    return try await withTaskExecutorPreference(thread) { try body() }
}

/// `offThePool` for async work: what it runs between its awaits stays on a thread of its own.
public func offThePool<T>(_ body: () async throws -> T) async throws -> T {
    let thread = ManagerThread(label: "keepsync.test.blocking")
    defer { thread.close() }
    return try await withTaskExecutorPreference(thread) { try await body() }
}
