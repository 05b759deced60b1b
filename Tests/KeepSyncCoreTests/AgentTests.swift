import Dispatch
import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

@Suite("Agent")
struct AgentTests {
    @Test func theStatusGoesFromSyncingToWatchingToStoppedAndReadyComesOnceWithTheWatchingLine() async throws {
        let h = AgentHarness()
        h.populate()
        h.start()
        try await h.waitUntilReady()
        #expect(h.notifier.messages.first { $0.hasPrefix("READY=1") } == "READY=1\nSTATUS=watching 3 files, 0 pending")
        #expect(h.host.mirror.node(RelativePath("dir/c"))?.content == Array("charlie".utf8))
        #expect(h.host.isLocked)
        #expect(try await h.stop() == .success)
        #expect(h.notifier.count("READY=1") == 1)
        #expect(h.notifier.count("STOPPING=1") == 1)
        #expect(h.notifier.statusLines.last == "stopped")
        let states = h.writer.states
        #expect(states.last == "stopped")
        // "starting" while the watcher walks the tree (off the actor, so status goes on), then
        // syncing, watching once, stopped.
        #expect(Array(states.filter { $0 != "syncing" }.drop { $0 == "starting" }) == ["watching", "stopped"], "\(states)")
        let last = try #require(h.writer.reports.last)
        #expect(last.files == 3 && last.pid == 4242 && last.source == "/src" && last.mirror == "/mirror")
        #expect(last.lastFullSync == "2026-01-01T00:00:00Z")
        #expect(!h.host.isLocked)
        #expect(h.host.runningWatchers == 0)
    }

    @Test func aStopWhileTheWatcherWalksTheTreeEndsTheWalkAndTheAgentWithoutWaitingForIt() async throws {
        let h = AgentHarness()
        h.populate()
        h.host.watchersWalkUntilStopped = true
        h.start()
        try await h.until("the watcher's walk", step: .zero) { h.host.watchers.last?.isWalking == true }
        // The walk (10 s on 200,000 directories, or forever here) runs off the agent's actor:
        // status goes on saying "starting", and the stop reaches the walk.
        try await h.until("status during the walk", step: .milliseconds(250), timeout: .seconds(20)) { h.writer.states.contains("starting") }
        #expect(h.host.watchers.last?.isWalking == true)
        #expect(try await h.stop() == .success)
        #expect(h.host.watchers.count == 1 && h.host.watchers[0].isStopped && !h.host.watchers[0].isWalking)
        #expect(h.notifier.count("READY=1") == 0)
        #expect(h.notifier.count("STOPPING=1") == 1)
        #expect(h.writer.states.last == "stopped")
        #expect(!h.host.isLocked)
    }

    @Test func anEventTheWatcherPublishesReachesTheMirrorAndTheStatusLine() async throws {
        let h = AgentHarness()
        h.populate()
        h.start()
        try await h.waitUntilReady()
        let watcher = try #require(h.host.watchers.last)
        h.host.source.writeFile(RelativePath("d"), Array("delta".utf8))
        #expect(watcher.publish(.changed(RelativePath("d"))))
        try await h.until("the new file in the mirror") { h.host.mirror.node(RelativePath("d"))?.content == Array("delta".utf8) }
        try await h.until("the status line counting it") { h.notifier.statusLines.last == "watching 4 files, 0 pending" }
        #expect(try await h.stop(with: .interrupt) == .success)
        #expect(watcher.isStopped)
    }

    @Test func aFailedStatusWriteIsWrittenAgainThoughNothingChanged() async throws {
        let h = AgentHarness()
        h.populate()
        h.writer.setFailing(true)
        h.start()
        try await h.waitUntilReady()
        #expect(h.writer.reports.isEmpty)
        h.writer.setFailing(false)
        try await h.until("the report written once writes work again") { h.writer.reports.last?.state == "watching" }
        #expect(try await h.stop() == .success)
    }

    @Test(arguments: 0..<12)
    func aReloadRacingSigtermIsNeverFollowedByReady(round: Int) async throws {
        // Odd rounds: SIGTERM arrives while the reload is under way (sent from inside it);
        // even rounds: right behind SIGHUP, each handled on a task of its own.
        let h = AgentHarness(onReload: { h in if round % 2 == 1 { h.feed.send(.terminate) } })
        h.populate()
        h.start()
        try await h.waitUntilReady()
        h.feed.send(.hangup)
        if round % 2 == 0 { h.feed.send(.terminate) }
        try await h.until("run to return") { h.finished }
        let messages = h.notifier.messages
        let stopping = try #require(messages.firstIndex(of: "STOPPING=1"))
        #expect(!messages[stopping...].contains { $0.hasPrefix("READY=1") }, "\(messages)")
        #expect(h.host.runningWatchers == 0)
        if round % 2 == 1 {
            #expect(h.reloads.withLock { $0 } == 1)
            #expect(messages.contains("RELOADING=1"))
        }
    }

    @Test(arguments: 0..<8)
    func aSigtermDuringStartupEndsTheRunAndNoReadyFollowsStopping(round: Int) async throws {
        let h = AgentHarness()
        h.populate()
        h.feed.send(.terminate)
        h.start()
        try await h.until("run to return") { h.finished }
        let messages = h.notifier.messages
        let stopping = try #require(messages.firstIndex(of: "STOPPING=1"))
        #expect(!messages[stopping...].contains { $0.hasPrefix("READY=1") }, "\(messages)")
        #expect(h.host.runningWatchers == 0)
        #expect(!h.host.isLocked)
    }

    @Test func theSourceRootLostAfterAReloadLeavesOneWatcherAndResumesWhenItIsBack() async throws {
        let h = AgentHarness()
        h.populate()
        h.start()
        try await h.waitUntilReady()
        h.feed.send(.hangup)
        try await h.waitUntilReady(count: 2)
        #expect(h.host.watchers.count == 2)
        #expect(h.host.runningWatchers == 1)

        h.host.setRootGone(true)
        let paused = "paused: source /src is missing; nothing is deleted (is a disk unmounted?)"
        try await h.until("the pause") { h.notifier.statusLines.contains(paused) }
        try await h.until("no watcher left") { h.host.runningWatchers == 0 }
        #expect(h.writer.reports.contains { $0.state == "error" && $0.errors.contains { $0.message.contains("missing") } })
        // Nothing was deleted from the mirror.
        #expect(h.host.mirror.node(RelativePath("dir/c")) != nil)
        // A reload while paused starts no watcher.
        h.feed.send(.hangup)
        try await h.waitUntilReady(count: 3)
        #expect(h.host.runningWatchers == 0)

        h.host.setRootGone(false)
        try await h.until("watching again") {
            let lines = h.notifier.statusLines
            return lines.lastIndex(of: "watching 3 files, 0 pending").map { $0 > lines.lastIndex(of: paused)! } ?? false
        }
        #expect(h.host.watchers.count == 3)
        #expect(h.host.runningWatchers == 1)
        // The resumed generation mirrors events again.
        h.host.source.writeFile(RelativePath("e"), Array("echo".utf8))
        #expect(h.host.watchers.last!.publish(.changed(RelativePath("e"))))
        try await h.until("the new file in the mirror") { h.host.mirror.node(RelativePath("e")) != nil }
        #expect(try await h.stop() == .success)
        #expect(h.host.runningWatchers == 0)
    }

    @Test("a mirror away at start (a disk not plugged in yet): run starts, sends READY=1 paused, writes nothing, and catches up when it is back")
    func aMirrorAwayAtStartIsAPauseNotAnExit() async throws {
        let first = AgentHarness()
        first.populate()
        first.start()
        try await first.waitUntilReady()
        #expect(try await first.stop() == .success)

        first.host.setMirrorGone(true)
        first.host.source.writeFile(RelativePath("while-away"), Array("new".utf8))
        let h = AgentHarness(after: first)
        h.start()
        let paused = "paused: mirror unavailable: /mirror is missing; nothing is written there until it is back (is the disk unplugged?)"
        try await h.waitUntilReady()
        #expect(h.notifier.messages.first { $0.hasPrefix("READY=1") } == "READY=1\nSTATUS=" + paused, "\(h.notifier.messages)")
        #expect(!h.finished, "run is still running")
        #expect(h.writer.reports.last?.state == "error" && h.writer.reports.last?.errors.first?.message.contains("mirror unavailable") == true,
                "\(h.writer.reports.last.map { "\($0)" } ?? "no status")")
        #expect(h.host.mirror.node(RelativePath("while-away")) == nil, "nothing written while away")

        h.host.setMirrorGone(false)
        try await h.until("watching again") { h.notifier.statusLines.last == "watching 4 files, 0 pending" }
        #expect(h.host.mirror.node(RelativePath("while-away")) != nil, "caught up")
        #expect(try await h.stop() == .success)
        #expect(h.writer.reports.last?.state == "stopped")
    }

    @Test func theWatchdogIsPingedWhileALongScanBeatsAndNotWhileTheAgentIsStuck() async throws {
        let h = AgentHarness(watchdog: .seconds(2))   // a tick every second
        h.populate()
        for i in 0..<6 {
            h.host.source.makeDirectory(RelativePath("d\(i)"))
            h.host.source.writeFile(RelativePath("d\(i)/f"), [UInt8(i)])
        }
        // Every listing below the root waits for the test to let it through.
        let gate = DispatchSemaphore(value: 0)
        let waiting = Mutex((blocked: 0, gated: true))
        h.host.source.failure.withLock {
            $0 = { op, path in
                guard op == .list, !path.isRoot, waiting.withLock({ s in s.blocked += s.gated ? 1 : 0; return s.gated }) else {
                    return nil
                }
                gate.wait()
                return nil
            }
        }
        h.start()
        try await h.until("the scan blocked", step: .zero) { waiting.withLock { $0.blocked } == 1 }
        var pings = h.notifier.count("WATCHDOG=1")
        #expect(pings == 1, "the first tick pings")
        // A long scan: one directory at a time, each beating; every tick after a beat pings.
        for step in 1...3 {
            gate.signal()
            try await h.until("the next directory", step: .zero) { waiting.withLock { $0.blocked } == step + 1 }
            let ticks = h.host.ticks
            h.clock.advance(by: .seconds(1))
            try await h.until("a tick", step: .zero) { h.host.ticks > ticks }
            #expect(h.notifier.count("WATCHDOG=1") == pings + 1, "step \(step)")
            pings += 1
        }
        // Stuck: no beat, so the ticks send nothing.
        for _ in 0..<3 {
            let ticks = h.host.ticks
            h.clock.advance(by: .seconds(1))
            try await h.until("a tick", step: .zero) { h.host.ticks > ticks }
        }
        #expect(h.notifier.count("WATCHDOG=1") == pings)
        #expect(h.notifier.count("READY=1") == 0)
        // Unstuck: the scan ends, READY comes and the pings resume.
        waiting.withLock { $0.gated = false }
        for _ in 0..<6 { gate.signal() }
        try await h.waitUntilReady()
        try await h.until("pings again") { h.notifier.count("WATCHDOG=1") > pings }
        #expect(try await h.stop() == .success)
    }

    @Test func aReloadWithNewExcludesReplacesTheWatcherAndResyncs() async throws {
        let h = AgentHarness(reloaded: { $0.excludes = try! ExcludeMatcher(patterns: [Array("*.tmp".utf8)]) })
        h.populate()
        h.start()
        try await h.waitUntilReady()
        let first = try #require(h.host.watchers.first)
        h.host.source.writeFile(RelativePath("x.tmp"), [1])
        h.feed.send(.hangup)
        try await h.waitUntilReady(count: 2)
        #expect(first.isStopped)
        let second = try #require(h.host.watchers.last)
        #expect(h.host.watchers.count == 2 && second.isRunning)
        #expect(second.excludes?.excludes(RelativePath("x.tmp"), isDirectory: false) == true)
        #expect(h.notifier.messages.contains("RELOADING=1"))
        // The resync after the reload ran with the new excludes: the excluded file stays out.
        try await h.until("the resync") { h.notifier.statusLines.last == "watching 3 files, 0 pending" }
        #expect(h.host.mirror.node(RelativePath("x.tmp")) == nil)
        #expect(try await h.stop() == .success)
    }

    @Test func sigusr1RepairsDriftInTheMirror() async throws {
        let h = AgentHarness()
        h.populate()
        h.start()
        try await h.waitUntilReady()
        h.host.mirror.delete(RelativePath("dir/b"))
        h.feed.send(.resync)
        try await h.until("the file back") { h.host.mirror.node(RelativePath("dir/b"))?.content == Array("bravo".utf8) }
        #expect(try await h.stop() == .success)
    }

    /// Issue 17: a full pass's memory (a step per path) goes back to the system once the
    /// pass and its copies are done: after the initial sync, and after a SIGUSR1 pass.
    @Test func memoryIsGivenBackOnceAFullPassAndItsCopiesAreDone() async throws {
        let h = AgentHarness()
        h.populate()
        h.start()
        try await h.waitUntilReady()
        try await h.until("memory given back after the initial sync") { h.host.memoryReleases.withLock { $0 } == 1 }
        h.feed.send(.resync)
        try await h.until("memory given back after the second pass") { h.host.memoryReleases.withLock { $0 } == 2 }
        #expect(try await h.stop() == .success)
        #expect(h.host.memoryReleases.withLock { $0 } == 2, "once per pass, not per status write")
    }

    @Test func unwatchedDirectoriesShowInTheStatusFile() async throws {
        let h = AgentHarness()
        h.populate()
        h.start()
        try await h.waitUntilReady()
        let watcher = try #require(h.host.watchers.last)
        watcher.unwatchedDirectories = 7
        watcher.pollPeriod = .seconds(25)
        try await h.until("the watch limit in status.json") {
            h.writer.reports.last?.errors.contains { $0.message.hasPrefix("watch limit reached: 7 directories are not watched (polled every 25 s)") } == true
        }
        let report = try #require(h.writer.reports.last)
        #expect(report.unwatchedDirectories == 7 && report.pollSeconds == 25)
        #expect(report.json.contains("\"unwatchedDirectories\": 7, \"pollSeconds\": 25.0"))
        #expect(try await h.stop() == .success)
    }

    @Test func aLongRecordsLogIsCompactedAndAskedAgainOnlyAfterThirtySeconds() async throws {
        let h = AgentHarness()
        h.populate()
        h.start()
        try await h.waitUntilReady()
        let before = h.host.store.compactions
        // The agent asks at or after `lower` (the clock moves while the test waits).
        let lower = h.clock.now
        h.host.store.setLengths(log: 2 << 20, snapshot: 1 << 20)
        try await h.until("a compaction") { h.host.store.compactions == before + 1 }
        // The log stays long (the fake compaction changes no size): not asked again for 30 s.
        // In whole seconds (the earlier waits moved the clock by quarters of one, so this
        // stops short of 30 s): each step costs real time in a loaded full run.
        try await h.until("29 s later", step: .seconds(1), timeout: .seconds(240)) { lower.duration(to: h.clock.now) >= .seconds(29) }
        #expect(h.host.store.compactions == before + 1)
        try await h.until("asked again after 30 s") { h.host.store.compactions == before + 2 }
        #expect(lower.duration(to: h.clock.now) >= .seconds(30))
        #expect(try await h.stop() == .success)
    }
}
