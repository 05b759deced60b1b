import Foundation
import Glibc
import Testing
import KeepSyncTestSupport

/// The agent at inotify's watch limit, in a private user namespace whose
/// `user.max_inotify_watches` is lowered (the host's limit is left alone, so tests
/// running in parallel are not starved).
@Suite(.serialized, .offThePool)
struct WatchLimitTests {
    /// True when `unshare --user --map-root-user` works and the namespace limit is writable.
    static let userNamespacesWork: Bool = {
        guard access("/usr/bin/unshare", X_OK) == 0 else { return false }
        return system("/usr/bin/unshare --user --map-root-user sh -c 'echo 5 > /proc/sys/user/max_inotify_watches' >/dev/null 2>&1") == 0
    }()

    @Test("directories beyond the watch limit are reported in status, polled, and still mirrored by a resync",
          .enabled(if: userNamespacesWork, "needs unprivileged user namespaces (unshare --user) with a writable user.max_inotify_watches"))
    func watchLimitIsReportedAndUnwatchedDirectoriesStillSync() async throws {
        let sandbox = try Sandbox()
        for i in 0..<10 {
            try FS.mkdirs(sandbox.source / Array("d\(i)/sub".utf8))
            try FS.writeFile(sandbox.source / Array("d\(i)/sub/first".utf8), "first \(i)")
        }
        let script = "echo 4 > /proc/sys/user/max_inotify_watches && exec \"$0\" \"$@\""
        let arguments: [[UInt8]] = [Array("--user".utf8), Array("--map-root-user".utf8), Array("sh".utf8), Array("-c".utf8),
                                    Array(script.utf8), sandbox.binary, Array("run".utf8)] + sandbox.paths.map(\.argumentBytes)
        let agent = try RunCommandTests.Agent(binary: Array("/usr/bin/unshare".utf8), arguments: arguments,
                                              environment: sandbox.environment, stderrPath: sandbox.root / "agent.stderr")
        defer { agent.killNow() }
        let watching = await eventually(timeout: .seconds(30)) {
            RunCommandTests.status(sandbox)?["state"] as? String == "watching" || agent.poll() != nil
        }
        try #require(watching && agent.poll() == nil, "not watching: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")

        // The initial pass mirrors everything, watched or not.
        try sandbox.expectMirrorEqualsSource()
        // The log names the sysctl; status says how many directories are unwatched.
        #expect(agent.stderrLines.contains { $0.contains("fs.inotify.max_user_watches") }, "\(agent.stderrText)")
        let reported = await eventually(timeout: .seconds(10)) {
            RunCommandTests.statusText(sandbox).contains("directories are not watched")
        }
        #expect(reported, "status.json: \(RunCommandTests.statusText(sandbox))")

        // Changes in unwatched directories, new files and a write in place (which moves no
        // directory's mtime), arrive with the next poll of those directories (every 10 s),
        // without a signal and without a rescan of the whole tree.
        let started = ContinuousClock.now
        for i in 0..<10 {
            try FS.writeFile(sandbox.source / Array("d\(i)/sub/second".utf8), "second \(i)")
            try FS.writeFile(sandbox.source / Array("d\(i)/sub/first".utf8), "first, written again \(i)")
        }
        // Alone this takes one poll period (9-10 s); a CI run's parallel fsync load once
        // stretched the copies to 35 s: the bound is generous, the rescan check is the point.
        let polled = await eventually(timeout: .seconds(60)) {
            RunCommandTests.mirrorDifferences(sandbox).isEmpty
        }
        let took = ContinuousClock.now - started
        #expect(polled, "no poll reached the unwatched directories: \(RunCommandTests.mirrorDifferences(sandbox))\n\(agent.stderrText)")
        #expect(!agent.stderrText.contains("full resync: watch limit"), "the whole tree was rescanned:\n\(agent.stderrText)")
        print("WatchLimitTests: 20 changes in unwatched directories mirrored after \(took) (poll period 10 s), no full rescan")
        // Writes in place alone (same size, no name added or gone) after the poll that saw
        // the last ones: a poll sees them only through the entries' stamps, which it first
        // compares as a digest.
        for i in 0..<10 { try FS.writeFile(sandbox.source / Array("d\(i)/sub/second".utf8), "SECOND \(i)") }
        let inPlace = await eventually(timeout: .seconds(60)) {
            RunCommandTests.mirrorDifferences(sandbox).isEmpty
        }
        #expect(inPlace, "writes in place not polled: \(RunCommandTests.mirrorDifferences(sandbox))\n\(agent.stderrText)")
        for i in 0..<10 { try FS.writeFile(sandbox.source / Array("d\(i)/sub/third".utf8), "third \(i)") }
        agent.send(SIGUSR1)
        let converged = await eventually(timeout: .seconds(30)) {
            RunCommandTests.mirrorDifferences(sandbox).isEmpty
        }
        #expect(converged, "\(RunCommandTests.mirrorDifferences(sandbox))\n\(agent.stderrText)")
        agent.send(SIGTERM)
        #expect(try await agent.waitForExit(timeout: .seconds(10)) == 0)
    }
}
