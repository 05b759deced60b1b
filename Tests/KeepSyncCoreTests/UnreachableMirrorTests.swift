@testable import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// A mirror whose host cannot be reached (issue 18, SPEC "Unreachable remote"): changes
/// wait in bounded memory, only a probe is tried (1 s doubling to 60 s), and the host's
/// return brings the mirror level with one full pass. The in-memory mirror fails every
/// write, listing, barrier and probe with `.unreachable` while the host is "away".
@Suite("Unreachable mirror")
struct UnreachableMirrorTests {
    static func p(_ text: String) -> RelativePath { RelativePath(text) }
    static func b(_ text: String) -> [UInt8] { Array(text.utf8) }

    static func away(_ h: ManagerHarness) {
        h.failMirror { op, path in
            op == .open ? nil : KeepSyncError(.unreachable, "mirror.example: unreachable: ssh: connect to host mirror.example port 22: Connection refused", path: path)
        }
    }

    /// Advances the clock to the manager's next deadline and processes; returns the gap.
    static func nextRound(_ h: ManagerHarness) async -> Duration? {
        guard let next = await h.manager.nextDeadline() else { return nil }
        let gap = h.clock.now.duration(to: next)
        h.clock.advance(by: gap)
        await h.process()
        return gap
    }

    @Test("changes wait while the host is away, only the probe is tried (1 s, 2 s, 4 s), and its return levels the mirror", .timeLimit(.minutes(1)))
    func changesWaitAndCatchUp() async {
        let h = ManagerHarness()
        // On the manager's thread throughout: the test pool (two threads here) is held by
        // blocking tests in a full run, and every hop through it waited seconds.
        await withTaskExecutorPreference(h.manager.thread) { await changesWaitAndCatchUp(h) }
    }

    func changesWaitAndCatchUp(_ h: ManagerHarness) async {
        h.source.writeFile(Self.p("old.txt"), Self.b("old"))
        await h.fullSync()
        Self.away(h)
        h.source.writeFile(Self.p("a.txt"), Self.b("a"))
        await h.receive(.closedAfterWrite(Self.p("a.txt")))
        await h.settleAndProcess()
        let attempts = h.installs
        #expect(attempts == 2, "one install was tried and met the unreachable host: \(attempts)")
        var snapshot = await h.manager.snapshot()
        #expect(snapshot.unreachable?.contains("unreachable") == true)
        #expect(snapshot.errors[.root]?.contains("mirror.example") == true, "status names the host: \(snapshot.errors)")
        #expect(snapshot.errors.count == 1, "no per-path error for a host that is away: \(snapshot.errors)")
        #expect(snapshot.pending == 1, "the failed copy waits: \(snapshot.pending)")
        #expect(snapshot.lag != nil)

        // More changes meanwhile: none is tried.
        h.source.writeFile(Self.p("b.txt"), Self.b("b"))
        h.source.delete(Self.p("old.txt"))
        await h.receive(.closedAfterWrite(Self.p("b.txt")), .removed(Self.p("old.txt")))
        await h.settleAndProcess()
        var gaps: [Duration] = []
        for _ in 0..<3 {
            guard let gap = await Self.nextRound(h) else { Issue.record("no probe planned"); return }
            gaps.append(gap)
        }
        // The first counts from the failed copy, a settle time before the round ended.
        #expect(gaps[0] > .milliseconds(900) && gaps[0] <= .seconds(1) && Array(gaps.dropFirst()) == [.seconds(2), .seconds(4)],
                "probe backoff: \(gaps)")
        #expect(h.mirror.count(.probe) == 3)
        #expect(h.installs == attempts && h.mirror.count(.remove) == 0, "something but the probe was tried while away")
        snapshot = await h.manager.snapshot()
        #expect(snapshot.pending == 3, "a.txt, b.txt and old.txt wait: \(snapshot.pending)")

        // Back: the next probe answers, a full pass levels the mirror.
        h.failMirror(nil)
        _ = await Self.nextRound(h)
        await h.settleAndProcess()
        snapshot = await h.manager.snapshot()
        #expect(snapshot.unreachable == nil)
        #expect(snapshot.errors == [:])
        #expect(snapshot.fullPasses == 2, "the return started a full pass")
        h.expectMirrorEqualsSource()
        #expect(snapshot.pending == 0 && snapshot.lag == nil)
    }

    @Test("memory stays bounded however many changes come while away: past the limit (100 here), one full pass finds them all", .timeLimit(.minutes(1)))
    func boundedWhileAway() async {
        // A limit of 100 rather than 10,000, on the manager's thread (see above).
        let h = ManagerHarness(heldWhileUnreachable: 100)
        await withTaskExecutorPreference(h.manager.thread) { await boundedWhileAway(h) }
    }

    func boundedWhileAway(_ h: ManagerHarness) async {
        await h.fullSync()
        Self.away(h)
        h.source.writeFile(Self.p("first"), Self.b("0"))
        await h.receive(.closedAfterWrite(Self.p("first")))
        await h.settleAndProcess()
        #expect(await h.manager.snapshot().unreachable != nil)
        let count = 150
        for i in 0..<count { h.source.writeFile(Self.p("f\(i)"), Self.b("\(i)")) }
        for i in 0..<count { await h.manager.receive(.closedAfterWrite(Self.p("f\(i)"))) }
        let pending = await h.manager.snapshot().pending
        #expect(pending <= 100, "\(pending) paths held while away")
        #expect(pending < count, "the limit was never reached")
        h.failMirror(nil)
        _ = await Self.nextRound(h)
        await h.settleAndProcess()
        #expect(await h.manager.snapshot().unreachable == nil)
        h.expectMirrorEqualsSource()
    }
}
