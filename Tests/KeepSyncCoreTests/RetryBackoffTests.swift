import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// The per-path retry schedule alone.
@Suite("RetryBackoff")
struct RetryBackoffTests {
    static func p(_ s: String) -> RelativePath { RelativePath(s) }
    static let zero = Duration.zero

    @Test("the wait doubles from 1 s and stops at 60 s")
    func doubles() {
        var b = RetryBackoff()
        var waits: [Duration] = []
        for _ in 0..<9 {
            b.schedule(Self.p("a"), now: Self.zero)
            waits.append(b.nextDeadline! - Self.zero)
        }
        #expect(waits == [1, 2, 4, 8, 16, 32, 60, 60, 60].map { Duration.seconds($0) })
    }

    @Test("what is due comes out sorted and only once")
    func takeDue() {
        var b = RetryBackoff()
        b.schedule(Self.p("b"), now: Self.zero)
        b.schedule(Self.p("a"), now: Self.zero)
        #expect(b.takeDue(now: Self.zero + .milliseconds(999)) == [])
        #expect(b.takeDue(now: Self.zero + .seconds(1)) == [Self.p("a"), Self.p("b")])
        #expect(b.nextDeadline == nil)
        #expect(b.attempts(Self.p("a")) == 1, "taking a retry keeps its count")
    }

    @Test("clearing a scope forgets its failures, but a kept path keeps its count")
    func clear() {
        var b = RetryBackoff()
        for path in ["d/x", "d/y", "e"] { b.schedule(Self.p(path), now: Self.zero) }
        b.clear(within: Self.p("d"), keep: [Self.p("d/y")])
        #expect(!b.isScheduled(Self.p("d/x")) && !b.isScheduled(Self.p("d/y")))
        #expect(b.attempts(Self.p("d/x")) == 0)
        #expect(b.attempts(Self.p("d/y")) == 1)
        #expect(b.isScheduled(Self.p("e")))
    }
}
