import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// Issue 41: one agent, one watcher, several mirrors, each on its own (SPEC "Several
/// mirrors"), over fake hosts sharing one source.
@Suite("Agent, several mirrors")
struct AgentSeveralMirrorsTests {
    static let failing = KeepSyncError(.io, "the disk says no")

    @Test("one watcher feeds three mirrors; one failing every call holds neither of the others, reports its errors alone, and catches up once it works")
    func oneFailingMirrorHoldsNoOther() async throws {
        let h = AgentHarness(mirrors: 3)
        h.populate()
        h.hosts[2].mirror.failure.withLock { $0 = { _, _ in Self.failing } }
        h.start()
        // READY=1 does not wait for the failing mirror's copies: its pass ends with errors.
        try await h.waitUntilReady()
        #expect(h.host.watchers.count == 1, "one watcher for three mirrors")
        for i in 0..<2 { #expect(h.hosts[i].mirror.node(RelativePath("dir/c")) != nil, "mirror \(i + 1) got the initial copy") }
        #expect(h.hosts[2].mirror.node(RelativePath("dir/c")) == nil)

        // A live change reaches the two working mirrors; the third keeps failing.
        h.host.source.writeFile(RelativePath("e"), Array("echo".utf8))
        #expect(h.host.watchers[0].publish(.changed(RelativePath("e"))))
        try await h.until("the change in both working mirrors") {
            h.hosts[0].mirror.node(RelativePath("e")) != nil && h.hosts[1].mirror.node(RelativePath("e")) != nil
        }
        try await h.until("the failing mirror's errors in its own status") {
            h.writers[2].reports.last?.errors.isEmpty == false
        }
        #expect(h.writers[0].reports.last?.errors.isEmpty == true && h.writers[1].reports.last?.errors.isEmpty == true)
        #expect(h.writers.map { $0.reports.last?.mirror } == ["/mirror", "/mirror2", "/mirror3"])
        let line = try #require(h.notifier.statusLines.last)
        #expect(line.contains("3 mirrors") && line.contains("errors"), "\(line)")
        let faults = InMemoryTree.Operation.allCases.reduce(0) { $0 + h.hosts[2].mirror.count($1) }
        #expect(faults > 0, "the third mirror was tried")

        // It works again: a resync brings it level.
        h.hosts[2].mirror.failure.withLock { $0 = nil }
        h.feed.send(.resync)
        try await h.until("the third mirror caught up") {
            h.hosts[2].mirror.node(RelativePath("e")) != nil && h.hosts[2].mirror.node(RelativePath("dir/c")) != nil
        }
        #expect(try await h.stop() == .success)
        #expect(h.writers.allSatisfy { $0.states.last == "stopped" })
        #expect(h.hosts.allSatisfy { !$0.isLocked })
        print("AgentSeveralMirrorsTests: 3 mirrors, one watcher; the failing mirror was tried \(faults) times meanwhile")
    }

    @Test("a mirror unplugged while the agent runs pauses alone (status and STATUS= say so) and catches up when it is back; the other keeps mirroring")
    func oneMirrorAwayPausesAlone() async throws {
        let h = AgentHarness(mirrors: 2)
        h.populate()
        h.start()
        try await h.waitUntilReady()
        h.hosts[1].setMirrorGone(true)
        h.feed.send(.resync)   // its pass finds it gone (as the once-a-second check would)
        try await h.until("the pause of the second mirror") {
            h.notifier.statusLines.last?.contains("1 paused: /mirror2 unavailable") == true
        }
        #expect(h.writers[1].reports.last?.state == "error")
        #expect(h.writers[1].reports.last?.errors.first?.message.hasPrefix("mirror unavailable") == true)
        // The first mirror goes on.
        h.host.source.writeFile(RelativePath("while-away"), Array("new".utf8))
        #expect(h.host.watchers[0].publish(.changed(RelativePath("while-away"))))
        try await h.until("the change in the first mirror") { h.hosts[0].mirror.node(RelativePath("while-away")) != nil }
        #expect(h.hosts[1].mirror.node(RelativePath("while-away")) == nil)
        #expect(h.writers[0].reports.last?.state == "watching")

        h.hosts[1].setMirrorGone(false)
        try await h.until("the second mirror caught up") { h.hosts[1].mirror.node(RelativePath("while-away")) != nil }
        try await h.until("both watching") { h.notifier.statusLines.last == "watching 4 files, 0 pending, 2 mirrors" }
        #expect(h.host.watchers.count == 1, "the watcher stayed")
        #expect(try await h.stop() == .success)
    }

    @Test("the source lost pauses every mirror and stops the watcher; when it is back one new watcher feeds both")
    func theSourceLostPausesAll() async throws {
        let h = AgentHarness(mirrors: 2)
        h.populate()
        h.start()
        try await h.waitUntilReady()
        h.host.setRootGone(true)
        let paused = "paused: source /src is missing; nothing is deleted (is a disk unmounted?)"
        try await h.until("the pause") { h.notifier.statusLines.last == paused }
        try await h.until("no watcher left") { h.host.runningWatchers == 0 }
        #expect(h.writers.allSatisfy { $0.reports.last?.state == "error" })
        #expect(h.hosts.allSatisfy { $0.mirror.node(RelativePath("dir/c")) != nil }, "nothing deleted")
        h.host.setRootGone(false)
        h.host.source.writeFile(RelativePath("after"), Array("after".utf8))
        try await h.until("both caught up") { h.hosts.allSatisfy { $0.mirror.node(RelativePath("after")) != nil } }
        #expect(h.host.watchers.count == 2 && h.host.runningWatchers == 1)
        #expect(try await h.stop() == .success)
    }

    @Test("a mirror away when run starts: READY=1 comes once the other is watching; the away one catches up when it is back")
    func oneMirrorAwayAtStart() async throws {
        let first = AgentHarness(mirrors: 2)
        first.populate()
        first.start()
        try await first.waitUntilReady()
        #expect(try await first.stop() == .success)
        first.hosts[1].setMirrorGone(true)
        first.host.source.writeFile(RelativePath("while-away"), Array("new".utf8))
        let h = AgentHarness(after: first)
        h.start()
        try await h.waitUntilReady()
        let ready = try #require(h.notifier.messages.first { $0.hasPrefix("READY=1") })
        #expect(ready == "READY=1\nSTATUS=watching 4 files, 0 pending, 2 mirrors, 1 paused: /mirror2 unavailable", "\(ready)")
        #expect(h.hosts[0].mirror.node(RelativePath("while-away")) != nil)
        #expect(h.hosts[1].mirror.node(RelativePath("while-away")) == nil)
        h.hosts[1].setMirrorGone(false)
        try await h.until("caught up") { h.hosts[1].mirror.node(RelativePath("while-away")) != nil }
        #expect(try await h.stop() == .success)
    }

    @Test("SIGUSR1 while a mirror's host is away: its pass waits for the host, and then lists the source itself, taking nothing listed while it waited")
    func aPassWaitingForItsHostTakesNoOldListing() async throws {
        let h = AgentHarness(mirrors: 2)
        h.populate()
        h.start()
        try await h.waitUntilReady()
        h.hosts[1].mirror.failure.withLock {
            $0 = { op, path in op == .open ? nil : KeepSyncError(.unreachable, "mirror2.example: unreachable", path: path) }
        }
        h.host.source.writeFile(RelativePath("e"), Array("echo".utf8))
        #expect(h.host.watchers[0].publish(.changed(RelativePath("e"))))
        try await h.until("the second mirror's host lost") {
            h.writers[1].reports.last?.errors.contains { $0.message.contains("unreachable") } == true
        }
        // The first mirror's pass lists the source while the second's waits for its host:
        // the second's events meanwhile may be dropped (past `heldWhileUnreachable`), so a
        // listing from now must not stand in for its own when the host answers.
        let (listed, shared) = h.agent.listings.counts
        h.feed.send(.resync)
        try await h.until("the first mirror's pass") { h.agent.listings.counts.listed >= listed + 2 }
        h.hosts[1].mirror.failure.withLock { $0 = nil }
        try await h.until("the second mirror caught up") { h.hosts[1].mirror.node(RelativePath("e")) != nil }
        #expect(h.agent.listings.counts.shared == shared, "the second mirror's pass took listings made while its host was away")
        #expect(try await h.stop() == .success)
    }
}
