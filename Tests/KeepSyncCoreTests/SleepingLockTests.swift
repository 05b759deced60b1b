import Dispatch
import Glibc
import Synchronization
import Testing
@testable import KeepSyncCore

/// `SleepingLock`: the lock the cold start's readers share (issue 17).
@Suite("SleepingLock")
struct SleepingLockTests {
    @Test("bodies never overlap and no update is lost, with more threads than cores", .timeLimit(.minutes(1)))
    func excludes() {
        let threads = 8, rounds = 20_000
        let lock = SleepingLock((count: 0, inside: false))
        let overlaps = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<rounds {
                lock.withLock { s in
                    if s.inside { overlaps.add(1, ordering: .relaxed) }
                    s.inside = true
                    // A read-modify-write split by a yield: lost without the lock.
                    let seen = s.count
                    if seen % 64 == 0 { sched_yield() }
                    s.count = seen + 1
                    s.inside = false
                }
            }
        }
        #expect(overlaps.load(ordering: .relaxed) == 0)
        #expect(lock.withLock { $0.count } == threads * rounds)
    }

    @Test("a throwing body releases the lock", .timeLimit(.minutes(1)))
    func throwingBodyReleases() {
        struct Failure: Error {}
        let lock = SleepingLock(0)
        #expect(throws: Failure.self) { try lock.withLock { _ in throw Failure() } }
        lock.withLock { $0 += 1 }
        #expect(lock.withLock { $0 } == 1)
    }
}
