import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// The settle queue alone: deadlines, coalescing, the max delay, renames, what is due.
@Suite("SettleQueue")
struct SettleQueueTests {
    static func at(_ ms: Int) -> Duration { .milliseconds(ms) }
    static func p(_ s: String) -> RelativePath { RelativePath(s) }
    static func queue() -> SettleQueue { SettleQueue(settle: .milliseconds(20), maxDelay: .milliseconds(100)) }

    @Test("a path is due a settle time after its event, not before")
    func settles() {
        var q = Self.queue()
        q.add(Self.p("a"), now: Self.at(0), immediately: false)
        #expect(q.nextDeadline == Self.at(20))
        #expect(q.takeDue(now: Self.at(19)).paths == [])
        #expect(q.takeDue(now: Self.at(20)).paths == [Self.p("a")])
        #expect(q.isEmpty)
        #expect(q.nextDeadline == nil)
    }

    @Test("events on a waiting path coalesce and push its deadline, up to the max delay")
    func coalescesUpToMaxDelay() {
        var q = Self.queue()
        for ms in stride(from: 0, through: 150, by: 10) { q.add(Self.p("a"), now: Self.at(ms), immediately: false) }
        #expect(q.paths.count == 1)
        #expect(q.nextDeadline == Self.at(100), "capped at first + max delay")
    }

    @Test("a close-after-write is due at once")
    func immediately() {
        var q = Self.queue()
        q.add(Self.p("a"), now: Self.at(0), immediately: false)
        q.add(Self.p("a"), now: Self.at(5), immediately: true)
        #expect(q.nextDeadline == Self.at(5))
    }

    @Test("due paths come out sorted, with the live removals among them")
    func takeDueSortedWithRemovals() {
        var q = Self.queue()
        q.add(Self.p("b"), now: Self.at(0), immediately: false)
        q.add(Self.p("a"), now: Self.at(0), immediately: false, removal: true)
        q.add(Self.p("c"), now: Self.at(50), immediately: false)
        let due = q.takeDue(now: Self.at(20))
        #expect(due.paths == [Self.p("a"), Self.p("b")])
        #expect(due.removals == [Self.p("a")])
        #expect(q.contains(Self.p("c")))
    }

    @Test("a rename moves what waits below the old name, merging removals")
    func moveBelow() {
        var q = Self.queue()
        q.add(Self.p("d"), now: Self.at(0), immediately: false)
        q.add(Self.p("d/x"), now: Self.at(0), immediately: false, removal: true)
        q.add(Self.p("e/x"), now: Self.at(0), immediately: false)
        q.move(below: Self.p("d"), to: Self.p("e"))
        #expect(Set(q.paths) == [Self.p("d"), Self.p("e/x")])
        #expect(q.takeDue(now: Self.at(20)).removals == [Self.p("e/x")])
    }

    @Test("a retry joins only when the path does not wait already; replace resets it")
    func retryAndReplace() {
        var q = Self.queue()
        q.add(Self.p("a"), now: Self.at(0), immediately: false)
        q.addIfAbsent(Self.p("a"), at: Self.at(5))
        #expect(q.nextDeadline == Self.at(20))
        q.replace(Self.p("a"), at: Self.at(40))
        #expect(q.nextDeadline == Self.at(40))
        q.addIfAbsent(Self.p("b"), at: Self.at(1))
        #expect(q.nextDeadline == Self.at(1))
    }
}
