import Foundation
import Glibc
import Testing
import KeepSyncCore
import KeepSyncTestSupport

// Issue 41: away is a pause, never an exit, also when `run` starts (SPEC "Vanished or
// replaced mirror": a service started before its USB disk is plugged in catches up when
// it is).
extension LimitedMirrorTests {
    @Test(arguments: LoopMount.Kind.allCases)
    func aDiskUnpluggedWhenRunStartsIsWaitedForAndCaughtUpWhenItIsMounted(_ kind: LoopMount.Kind) async throws {
        let pair = try Pair(kind)
        try pair.buildSource()
        let first = try pair.sync()
        #expect(first.status == 0, "\(first)")
        try pair.disk.unmount()
        try FS.writeFile(pair.sandbox.source / "docs/while-unplugged.txt", "written while the disk was away\n")

        let arguments: [any CommandArgument] = ["run"] + pair.paths
        let agent = try RunCommandTests.Agent(binary: pair.sandbox.binary, arguments: arguments.map(\.argumentBytes),
                                              environment: pair.sandbox.environment, stderrPath: pair.sandbox.root / "agent.stderr")
        defer { agent.killNow() }
        let reported = await eventually(timeout: .seconds(30)) {
            RunCommandTests.statusText(pair.sandbox).contains("mirror unavailable") || agent.poll() != nil
        }
        #expect(reported && agent.poll() == nil, "run did not start paused: exit \(agent.poll().map(String.init) ?? "none")\n\(RunCommandTests.statusText(pair.sandbox))\n\(agent.stderrText)")
        #expect(RunCommandTests.status(pair.sandbox)?["state"] as? String == "error")
        // Five seconds unplugged (its checks come every half second): it neither exits nor
        // writes below the mount point. The window ends early at the first of either.
        let broke = await eventually(timeout: .seconds(5)) {
            agent.poll() != nil || !((try? FS.list(pair.disk.path)) ?? []).isEmpty
        }
        let below = (try? FS.list(pair.disk.path)) ?? []
        #expect(!broke, "exit \(agent.poll().map(String.init) ?? "none"); below the mount point: \(below.map { ByteEscaping.escape($0) })\n\(agent.stderrText)")
        for name in below { try ScratchDirectory.removeTree(pair.disk.path / name) }  // else exfat-fuse refuses to mount

        try pair.disk.mount()
        let caughtUp = await eventually(timeout: .seconds(30)) {
            FS.exists(pair.mirror / "docs/while-unplugged.txt") && pair.differences().isEmpty
                && RunCommandTests.status(pair.sandbox)?["state"] as? String == "watching"
        }
        #expect(caughtUp, "not caught up once \(kind) was mounted:\n\(pair.differences().joined(separator: "\n"))\n\(RunCommandTests.statusText(pair.sandbox))\n\(agent.stderrText)")
        // Live changes flow after the catch-up.
        try FS.writeFile(pair.sandbox.source / "docs/after.txt", "after the disk came back\n")
        #expect(await eventually(timeout: .seconds(10)) { FS.exists(pair.mirror / "docs/after.txt") }, "\(agent.stderrText)")
        try await FaultInjectionTests.stop(agent, pair.sandbox)
        #expect(agent.stderrText.contains("mirror unavailable"), "the log says why it waited:\n\(agent.stderrText)")
        print("LimitedMirrorTests: \(kind): unplugged when run started: \(reported ? "reported, kept running 5 s" : "not reported"), \(caughtUp ? "caught up" : "not caught up") once mounted")
    }

    @Test("a disk mirror unplugged while run also feeds a local mirror: the local one keeps up, the disk catches up when it is back",
          arguments: [LoopMount.Kind.exfat])
    func aDiskUnpluggedBesideALocalMirrorPausesAloneAndCatchesUp(_ kind: LoopMount.Kind) async throws {
        let pair = try Pair(kind)
        try pair.buildSource()
        let local = pair.sandbox.root / "M2"
        let arguments: [any CommandArgument] = ["run", "--source", pair.sandbox.source, "--mirror", pair.mirror, "--mirror", local]
        let agent = try RunCommandTests.Agent(binary: pair.sandbox.binary, arguments: arguments.map(\.argumentBytes),
                                              environment: pair.sandbox.environment, stderrPath: pair.sandbox.root / "agent.stderr")
        defer { agent.killNow() }
        let copied = await pair.convergesOn(local)
        let copiedToDisk = await eventually(timeout: .seconds(30)) { pair.differences().isEmpty }
        #expect(copied && copiedToDisk, "initial copy:\n\(pair.differences().joined(separator: "\n"))\n\(agent.stderrText)")

        try pair.disk.unmount(lazy: true)
        // A change while the disk is away reaches the local mirror at once.
        try FS.writeFile(pair.sandbox.source / "docs/while-unplugged.txt", "written while the disk was away\n")
        let local1 = await eventually(timeout: .seconds(10)) { FS.exists(local / "docs/while-unplugged.txt") }
        #expect(local1, "the local mirror waited for the unplugged disk\n\(agent.stderrText)")
        let reported = await eventually(timeout: .seconds(10)) { agent.stderrText.contains("mirror unavailable") }
        #expect(reported, "\(agent.stderrText)")
        let below = (try? FS.list(pair.disk.path)) ?? []
        #expect(below.isEmpty, "written below the missing mount: \(below.map { ByteEscaping.escape($0) })")
        for name in below { try ScratchDirectory.removeTree(pair.disk.path / name) }

        try pair.disk.mount()
        let back = await eventually(timeout: .seconds(30)) {
            FS.exists(pair.mirror / "docs/while-unplugged.txt") && pair.differences().isEmpty
        }
        #expect(back, "the disk did not catch up:\n\(pair.differences().joined(separator: "\n"))\n\(agent.stderrText)")
        #expect(agent.poll() == nil)
        try await FaultInjectionTests.stop(agent, pair.sandbox)
        print("LimitedMirrorTests: \(kind) beside a local mirror: unplugged, the local mirror kept up \(local1 ? "at once" : "NOT"), the disk \(back ? "caught up" : "did not catch up") when mounted")
    }
}
