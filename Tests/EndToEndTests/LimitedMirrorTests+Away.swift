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
}
