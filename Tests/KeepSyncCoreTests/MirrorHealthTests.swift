import Testing
@testable import KeepSyncCore

/// The mirror's health as a value: blocked and host-lost episodes, their probes' backoff,
/// and recovery, with no actor and no clock but the numbers given.
@Suite("MirrorHealth")
struct MirrorHealthTests {
    static func s(_ n: Double) -> Duration { .milliseconds(Int(n * 1000)) }

    @Test("a full mirror is probed after 0.25 s, then 1 s doubling to 5 s; a second report of the episode changes nothing")
    func blockedBackoff() {
        var h = MirrorHealth()
        let blocked = h.block(.noSpace, now: .zero)
        #expect(blocked)
        #expect(h.probeAt == Self.s(0.25) && h.trouble == .blocked(.noSpace))
        let twice = h.block(.noSpace, now: Self.s(0.1))
        #expect(!twice, "reported twice in one episode")
        var now = Self.s(0.25)
        var gaps: [Duration] = []
        for _ in 0..<7 {
            let outcome = h.probeFailed(.noSpace, message: "ENOSPC", now: now)
            #expect(outcome == .stillBlocked)
            gaps.append(h.probeAt! - now)
            now = h.probeAt!
        }
        // The report counts as the first failure: 0.25 s, then 1 s (as the manager always did).
        #expect(gaps == [1, 2, 4, 5, 5, 5, 5].map(Self.s))
        let lost = h.probeSucceeded()
        #expect(lost == nil && h.trouble == nil && h.probeAt == nil)
    }

    @Test("a mirror that fills up again within a minute keeps its long backoff; after a quiet minute it starts short")
    func blockedAgain() {
        var h = MirrorHealth()
        _ = h.block(.noSpace, now: .zero)
        for i in 0..<4 { _ = h.probeFailed(.noSpace, message: nil, now: Self.s(Double(i))) }
        _ = h.probeSucceeded()
        let refilled = h.block(.noSpace, now: Self.s(10))
        #expect(refilled)
        #expect(h.probeAt! - Self.s(10) == .seconds(5), "refilled within a minute: long backoff")
        _ = h.probeSucceeded()
        let readOnly = h.block(.readOnly, now: Self.s(100))
        #expect(readOnly)
        #expect(h.probeAt! - Self.s(100) == Self.s(0.25), "a minute later: short again")
        #expect(h.isRecentBlock(.readOnly, now: Self.s(130)) && !h.isRecentBlock(.noSpace, now: Self.s(130)))
        #expect(!h.isRecentBlock(.readOnly, now: Self.s(161)))
    }

    @Test("a lost host is probed after 1 s, doubling to 60 s; its return is reported with how long it was away")
    func hostLost() {
        var h = MirrorHealth()
        let lost = h.loseHost("nas: unreachable", now: Self.s(5))
        #expect(lost)
        let again = h.loseHost("again", now: Self.s(5.5))
        #expect(!again)
        #expect(h.hostLost?.message == "nas: unreachable" && h.probeAt == Self.s(6))
        var now = Self.s(6)
        var gaps: [Duration] = []
        for _ in 0..<8 {
            let outcome = h.probeFailed(.unreachable, message: "nas: connection refused", now: now)
            #expect(outcome == .stillLost)
            gaps.append(h.probeAt! - now)
            now = h.probeAt!
        }
        #expect(gaps == [2, 4, 8, 16, 32, 60, 60, 60].map { Duration.seconds($0) })
        #expect(h.hostLost?.message == "nas: connection refused" && h.hostLost?.since == Self.s(5))
        h.catchUpInFull = true
        let back = h.probeSucceeded()
        #expect(back?.since == Self.s(5) && !h.isHostLost && !h.catchUpInFull && h.probeAt == nil)
    }

    @Test("a host that answers but takes no writes turns into a blocked mirror, probed on the short backoff")
    func hostBackButFull() {
        var h = MirrorHealth()
        _ = h.loseHost("gone", now: .zero)
        let outcome = h.probeFailed(.noSpace, message: "No space left", now: Self.s(1))
        #expect(outcome == .hostBackButBlocked)
        #expect(!h.isHostLost && h.trouble == .blocked(.noSpace))
        #expect(h.probeAt! - Self.s(1) == Self.s(0.5))
    }

    @Test("a full pass that wrote ends a blocked episode, not a lost host")
    func passWrote() {
        var h = MirrorHealth()
        _ = h.block(.readOnly, now: .zero)
        h.passWrote()
        #expect(h.trouble == nil && h.probeAt == nil)
        _ = h.loseHost("gone", now: .zero)
        h.passWrote()
        #expect(h.isHostLost)
    }
}
