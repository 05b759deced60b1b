import Foundation
import Glibc
import KeepSyncTestSupport
import Testing

/// `keepsync sync|run|check|status` with `--mirror USER@127.0.0.1:DIR` against a real sshd
/// on the loopback (issue 18): the remote is this machine, so what arrived is read
/// through the local file system. Skipped, with the reason printed, where OpenSSH or
/// rsync is missing (`.ci/run` installs both).
@Suite("Remote mirror, end to end", .serialized, .offThePool)
struct RemoteMirrorEndToEndTests {
    /// A sandbox whose mirror is reached over a loopback sshd.
    final class Remote {
        let sandbox: Sandbox
        let sshd: LoopbackSSHD

        init(_ test: String, shellStartup: Duration? = nil) throws {
            sshd = try Self.startOrSkip(test, shellStartup: shellStartup)
            sandbox = try Sandbox()
        }

        /// A started sshd, or the test skipped with the reason printed (no OpenSSH or rsync).
        static func startOrSkip(_ test: String, shellStartup: Duration? = nil) throws -> LoopbackSSHD {
            guard ChildSpawning.locate("rsync") != nil else {
                print("RemoteMirrorEndToEndTests: \(test) skipped: rsync is not installed")
                try Test.cancel("rsync is not installed (apt-get install rsync; .ci/run installs it)")
            }
            do { return try LoopbackSSHD.start(shellStartup: shellStartup) } catch let missing as LoopbackSSHD.Unavailable {
                print("RemoteMirrorEndToEndTests: \(test) skipped: \(missing)")
                try Test.cancel("\(missing)")
            }
        }

        deinit { sshd.stop() }

        /// `--source S --mirror USER@127.0.0.1:M --ssh '…' --state T`.
        var paths: [any CommandArgument] {
            ["--source", sandbox.source, "--mirror", Array("\(sshd.destination):".utf8) + sandbox.mirror,
             "--ssh", sshd.sshCommand, "--state", sandbox.state]
        }

        func run(_ command: String, _ extra: [any CommandArgument] = []) throws -> ProcessResult {
            try sandbox.keepsync([command] + paths + extra)
        }

        /// Differences of source and mirror, files over 16 MiB by size, mode and mtime.
        var differences: [String] {
            do {
                return try TreeSnapshot.take(sandbox.source, contentLimit: 16 << 20)
                    .differences(to: try TreeSnapshot.take(sandbox.mirror, contentLimit: 16 << 20))
            } catch { return ["cannot snapshot: \(error)"] }
        }

        /// Waits up to 60 s for the mirror to equal the source with nothing pending.
        func expectConverges(_ agent: RunCommandTests.Agent, _ what: String,
                             sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let converged = await eventually(timeout: .seconds(60)) {
                self.differences.isEmpty && (RunCommandTests.status(self.sandbox)?["pending"] as? NSNumber)?.intValue == 0
            }
            #expect(converged, "\(what): mirror differs from source:\n\(differences.joined(separator: "\n"))\nstatus.json: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)",
                    sourceLocation: sourceLocation)
        }

        func start(_ extra: [any CommandArgument] = []) async throws -> RunCommandTests.Agent {
            let agent = try RunCommandTests.Agent(binary: sandbox.binary, arguments: (["run"] + paths + extra).map(\.argumentBytes),
                                                  environment: sandbox.environment, stderrPath: sandbox.root / "agent.stderr")
            let watching = await eventually(timeout: .seconds(60)) {
                RunCommandTests.status(self.sandbox)?["state"] as? String == "watching" || agent.poll() != nil
            }
            try #require(watching && agent.poll() == nil,
                         "the agent is not watching; status.json: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")
            return agent
        }
    }

    static func b(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Names a shell would mangle: a newline, a non-UTF-8 byte, a quote, a leading dash.
    static let awkwardNames: [[UInt8]] = [b("new\nline"), b("caf") + [0xE9], b("it's"), b("-dash"), b(" spaced ")]

    @Test("sync copies a tree with awkward names to the remote, check compares against it, drift made there is reported and repaired",
          .timeLimit(.minutes(3)))
    func syncAndCheck() async throws {
        try await offThePool {
            let r = try Remote("syncAndCheck")
            try r.sandbox.buildSmallSource()
            for (i, name) in Self.awkwardNames.enumerated() { try FS.writeFile(r.sandbox.source / name, "awkward \(i)\n") }
            try FS.mkdirs(r.sandbox.source / (Self.b("deep/") + [0xFF] + Self.b("/x")))
            try FS.writeFile(r.sandbox.source / (Self.b("deep/") + [0xFF] + Self.b("/x/leaf")), "leaf")

            let first = try r.run("sync")
            #expect(first.status == 0, "\(first)")
            try r.sandbox.expectMirrorEqualsSource()
            let clean = try r.run("check")
            #expect(clean.status == 0 && clean.stdoutLines == ["0 differences"], "\(clean)")

            // Drift on the remote: a changed file, an extra one, a missing one.
            try FS.overwrite(r.sandbox.mirror / "top.txt", Self.b("changed there\n"))
            try FS.writeFile(r.sandbox.mirror / "extra", "not in the source")
            try FS.unlink(r.sandbox.mirror / Self.awkwardNames[0])
            let drift = try r.run("check")
            #expect(drift.status == 1, "\(drift)")
            #expect(drift.stdoutLines.contains("- extra") && drift.stdoutLines.last == "3 differences"
                        || drift.stdoutLines.last == "4 differences", "\(drift.stdoutText)")
            let repair = try r.run("sync")
            #expect(repair.status == 0, "\(repair)")
            try r.sandbox.expectMirrorEqualsSource()
            #expect(try r.run("check").stdoutLines == ["0 differences"])

            let status = try r.sandbox.keepsync(["status", "--state", r.sandbox.state, "--json"])
            let json = (try? JSONSerialization.jsonObject(with: Data(status.stdout))) as? [String: Any]
            #expect(json?["remote"] as? String == "127.0.0.1", "\(status.stdoutText)")
            #expect(json?["lagSeconds"] != nil, "\(status.stdoutText)")
        }
    }

    @Test("a sync to a host nobody answers on exits 1 naming the host, and writes nothing", .timeLimit(.minutes(2)))
    func unreachableSyncExitsOne() async throws {
        try await offThePool {
            let r = try Remote("unreachableSyncExitsOne")
            try r.sandbox.buildSmallSource()
            r.sshd.stop()
            let result = try r.run("sync")
            #expect(result.status == 1, "\(result)")
            #expect(result.errorLines.count == 1 && result.errorLines[0].contains("127.0.0.1"), "\(result)")
            #expect(!FS.exists(r.sandbox.mirror))
        }
    }

    @Test("run mirrors live changes; a renamed 1 GiB file and a renamed folder arrive as renames (same remote inodes); deletions follow",
          .timeLimit(.minutes(4)))
    func liveRenamesAndDeletions() async throws {
        let r = try Remote("liveRenamesAndDeletions")
        try r.sandbox.buildSmallSource()
        // 1 GiB, sparse here (rsync sends its zeros once, at the initial copy).
        let big = r.sandbox.source / "big.bin"
        let fd = FS.withCPath(big) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        #expect(fd >= 0)
        #expect(ftruncate(fd, 1 << 30) == 0)
        close(fd)
        try FS.mkdirs(r.sandbox.source / "folder/inner")
        for i in 0..<20 { try FS.writeFile(r.sandbox.source / Self.b("folder/inner/f\(i)"), "file \(i)\n") }

        let agent = try await r.start()
        // The 1 GiB file is compared by size and mtime: reading it at every poll would hold
        // a thread of the test pool (two on this machine) for seconds each time.
        func bigArrived(_ name: String) async -> Bool {
            await eventually(timeout: .seconds(60)) {
                guard let m = FS.lstat(r.sandbox.mirror / name), let s = FS.lstat(r.sandbox.source / name) else { return false }
                return m.size == 1 << 30 && m.mtimeSeconds == s.mtimeSeconds && m.mtimeNanoseconds == s.mtimeNanoseconds
            }
        }
        #expect(await bigArrived("big.bin"), "big.bin did not arrive whole")
        try await r.expectConverges(agent, "initial sync")
        let bigInode = FS.lstat(r.sandbox.mirror / "big.bin")?.inode
        let folderInode = FS.lstat(r.sandbox.mirror / "folder")?.inode
        let leafInode = FS.lstat(r.sandbox.mirror / "folder/inner/f7")?.inode

        // Live: a new file, a change, a new folder.
        try FS.writeFile(r.sandbox.source / "live.txt", "live\n")
        try FS.overwrite(r.sandbox.source / "top.txt", Self.b("top, changed\n"))
        try FS.mkdirs(r.sandbox.source / "newdir")
        try FS.writeFile(r.sandbox.source / Self.b("newdir/") + Self.awkwardNames[0], "made live")
        try await r.expectConverges(agent, "live changes")

        try FS.rename(r.sandbox.source / "big.bin", r.sandbox.source / "big-renamed.bin")
        try FS.rename(r.sandbox.source / "folder", r.sandbox.source / "folder-renamed")
        #expect(await bigArrived("big-renamed.bin"), "big-renamed.bin did not arrive")
        try await r.expectConverges(agent, "renames")
        #expect(FS.lstat(r.sandbox.mirror / "big-renamed.bin")?.inode == bigInode, "the 1 GiB file was sent again, not renamed")
        #expect(FS.lstat(r.sandbox.mirror / "folder-renamed")?.inode == folderInode, "the folder was not renamed")
        #expect(FS.lstat(r.sandbox.mirror / "folder-renamed/inner/f7")?.inode == leafInode, "a file in the folder was sent again")

        try FS.unlink(r.sandbox.source / "big-renamed.bin")
        try ScratchDirectory.removeTree(r.sandbox.source / "folder-renamed")
        try await r.expectConverges(agent, "deletions")
        #expect(!FS.exists(r.sandbox.mirror / "big-renamed.bin") && !FS.exists(r.sandbox.mirror / "folder-renamed"))
        try await RunCommandTests.stop(agent, r.sandbox)
    }

    @Test("the brake holds a mass deletion on a remote mirror as on a disk: 15 of 20 files gone from the source stay on the remote (sync exits 3, check lists them), other changes go; --allow-mass-delete applies them",
          .timeLimit(.minutes(2)))
    func massDeletionIsHeldOnTheRemote() async throws {
        let r = try Remote("massDeletionIsHeldOnTheRemote")
        try FS.mkdirs(r.sandbox.source)
        func name(_ i: Int) -> String { "f\(i < 10 ? "0" : "")\(i)" }
        for i in 0..<20 { try FS.writeFile(r.sandbox.source / Self.b(name(i)), "file \(i)\n") }
        try FS.setPastTimes(under: r.sandbox.source)
        let first = try r.run("sync")
        try #require(first.status == 0, "\(first)")
        for i in 0..<15 { try FS.unlink(r.sandbox.source / Self.b(name(i))) }
        try FS.writeFile(r.sandbox.source / "fresh.txt", "fresh\n")
        try FS.writeFile(r.sandbox.source / "f19", "changed 19\n")

        let held = try r.run("sync")
        #expect(held.status == 3, "\(held)")
        #expect(held.stderrText.contains("held 15 deletions") && held.stderrText.contains("--allow-mass-delete"), "\(held)")
        for i in 0..<20 { #expect(FS.exists(r.sandbox.mirror / Self.b(name(i))), "\(name(i)) was deleted on the remote despite the brake") }
        #expect(try FS.readFile(r.sandbox.mirror / "fresh.txt") == Self.b("fresh\n"), "the new file must be applied")
        #expect(try FS.readFile(r.sandbox.mirror / "f19") == Self.b("changed 19\n"), "the change must be applied")
        let check = try r.run("check")
        #expect(check.status == 1 && check.stdoutLines.filter { $0.hasPrefix("- ") }.count == 15, "\(check)")

        let allowed = try r.run("sync", ["--allow-mass-delete"])
        #expect(allowed.status == 0, "\(allowed)")
        #expect(r.differences.isEmpty, "\(r.differences)")
    }

    @Test("the remote rsync killed mid-transfer (SIGKILL, as a power cut takes it) leaves no torn file under its name; the file arrives on a later try, the temp file left behind is swept",
          .timeLimit(.minutes(4)))
    func killedRemoteRsyncLeavesNoTornFile() async throws {
        let r = try Remote("killedRemoteRsyncLeavesNoTornFile")
        try r.sandbox.buildSmallSource()
        let agent = try await r.start()
        try await r.expectConverges(agent, "initial sync")
        // 1 GiB, sparse here: rsync sends its zeros, long enough to be caught mid-way.
        let big = r.sandbox.source / "big.bin"
        let fd = FS.withCPath(big) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        #expect(fd >= 0)
        #expect(ftruncate(fd, 1 << 30) == 0)
        close(fd)
        func temporaries() -> [[UInt8]] {
            ((try? FS.list(r.sandbox.mirror)) ?? []).filter { $0.starts(with: Self.b(".big.bin.")) }
        }
        var kills = 0, torn: [String] = []
        func lookAtFinalName() {
            if let st = FS.lstat(r.sandbox.mirror / "big.bin"), st.size != 1 << 30 { torn.append("big.bin held \(st.size) bytes") }
        }
        let killed = await eventually(timeout: .seconds(60), every: .milliseconds(2)) {
            lookAtFinalName()
            guard !temporaries().isEmpty else { return false }
            for pid in Self.remoteRsyncs(into: r.sandbox.mirror) where kill(pid, SIGKILL) == 0 { kills += 1 }
            return kills > 0
        }
        try #require(killed, "no remote rsync was caught writing big.bin\n\(agent.stderrText)")
        let arrived = await eventually(timeout: .seconds(90), every: .milliseconds(5)) {
            lookAtFinalName()
            return FS.lstat(r.sandbox.mirror / "big.bin")?.size == 1 << 30
        }
        #expect(arrived, "big.bin never arrived after the kill\n\(agent.stderrText)")
        #expect(torn.isEmpty, "the final name held part of the file: \(torn.prefix(3))")
        try await r.expectConverges(agent, "after the kill")
        // What the killed rsync left: gone after a full pass.
        agent.send(SIGUSR1)
        let swept = await eventually(timeout: .seconds(60)) { temporaries().isEmpty }
        #expect(swept, "rsync's temp file stayed: \(temporaries().map { String(decoding: $0, as: UTF8.self) })")
        print("RemoteMirrorEndToEndTests: \(kills) remote rsync killed mid-transfer; big.bin arrived whole on a later try, never torn; its temp file swept")
        try await RunCommandTests.stop(agent, r.sandbox)
    }

    /// The `rsync --server` processes (this machine is the remote) working in `mirror`
    /// (their paths come over the protocol, `--protect-args`: found by their cwd).
    static func remoteRsyncs(into mirror: [UInt8]) -> [pid_t] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        let target = String(decoding: mirror, as: UTF8.self)
        return names.compactMap { name -> pid_t? in
            guard let pid = pid_t(name), let data = FileManager.default.contents(atPath: "/proc/\(name)/cmdline") else { return nil }
            let argv = data.split(separator: 0, omittingEmptySubsequences: false).map { Array($0) }
            guard argv.count > 1, argv[0].reversed().starts(with: Array("rsync".utf8.reversed())), argv.contains(Self.b("--server")),
                  let cwd = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(name)/cwd"),
                  cwd == target || cwd + "/" == target || cwd == target + "/" else { return nil }
            return pid
        }
    }

    @Test("a remote that hangs (sshd and its sessions stopped) is noticed by keepsync's own timeouts; changes made meanwhile arrive once it answers",
          .timeLimit(.minutes(4)))
    func hangingRemoteCatchesUp() async throws {
        let r = try Remote("hangingRemoteCatchesUp")
        try r.sandbox.buildSmallSource()
        let agent = try await r.start()
        try await RunCommandTests.expectMirrorConverges(r.sandbox, agent, "initial sync")

        try r.sshd.pause()
        for i in 0..<50 { try FS.writeFile(r.sandbox.source / Self.b("during-\(i)"), "written while the remote hangs \(i)\n") }
        try FS.unlink(r.sandbox.source / "top.txt")
        let noticed = await eventually(timeout: .seconds(90), every: .milliseconds(200)) {
            RunCommandTests.statusText(r.sandbox).contains("remote unreachable since")
        }
        let lag = (RunCommandTests.status(r.sandbox)?["lagSeconds"] as? NSNumber)?.doubleValue ?? 0
        r.sshd.resume()
        #expect(noticed, "status never said the remote was unreachable: \(RunCommandTests.statusText(r.sandbox))\n\(agent.stderrText)")
        #expect(lag > 0, "lagSeconds stayed 0 while changes waited: \(RunCommandTests.statusText(r.sandbox))")
        #expect(agent.stderrLines.contains { $0.contains("remote unreachable since") }, "\(agent.stderrText)")
        try await RunCommandTests.expectMirrorConverges(r.sandbox, agent, "after the remote answers again")
        let cleared = await eventually(timeout: .seconds(30)) {
            !RunCommandTests.statusText(r.sandbox).contains("unreachable")
        }
        #expect(cleared, "status still says unreachable: \(RunCommandTests.statusText(r.sandbox))")
        try await RunCommandTests.stop(agent, r.sandbox)
    }

    @Test("sshd stopped for 30 s (connections refused) while 12,000 files come: the agent keeps watching, holds one full-pass flag past 10,000 changes (resident memory grows under 32 MiB), and once sshd is back converges over a new login, nothing lost",
          .timeLimit(.minutes(4)))
    func stoppedRemoteCatchesUp() async throws {
        let r = try Remote("stoppedRemoteCatchesUp")
        try r.sandbox.buildSmallSource()
        let agent = try await r.start()
        try await r.expectConverges(agent, "initial sync")

        r.sshd.shutDown()
        let clock = ContinuousClock(), down = clock.now
        try FS.unlink(r.sandbox.source / "top.txt")
        try FS.writeFile(r.sandbox.source / "dir/file.txt", "changed while sshd is stopped\n")
        let noticed = await eventually(timeout: .seconds(20), every: .milliseconds(100)) {
            RunCommandTests.statusText(r.sandbox).contains("remote unreachable since")
        }
        let residentAtLoss = Self.residentKiB(agent.pid)
        // 400 new files every half second up to 12,000 (past the 10,000 held), then one
        // file rewritten every half second, until sshd has been stopped for 30 s.
        try FS.mkdir(r.sandbox.source / "away")
        var written = 0, round = 0
        while clock.now - down < .seconds(30) {
            round += 1
            for _ in 0..<400 where written < 12_000 {
                try FS.writeFile(r.sandbox.source / Self.b("away/f-\(written)"), "written while sshd is stopped \(written)\n")
                written += 1
            }
            try FS.writeFile(r.sandbox.source / "away/rewritten", "round \(round)\n")
            try await Task.sleep(for: .milliseconds(500))
        }
        let residentAtEnd = Self.residentKiB(agent.pid)
        #expect(noticed, "status never said the remote was unreachable: \(RunCommandTests.statusText(r.sandbox))\n\(agent.stderrText)")
        #expect(agent.poll() == nil, "the agent ended while sshd was stopped:\n\(agent.stderrText)")
        #expect(written == 12_000)
        #expect(agent.stderrLines.contains { $0.contains("more than 10000 changes while the mirror's host is unreachable") },
                "the agent never let the changes go for a full pass:\n\(agent.stderrText)")
        print("RemoteMirrorEndToEndTests: stoppedRemoteCatchesUp: \(written) files in \(clock.now - down) with sshd stopped; resident \(residentAtLoss) KiB at the loss, \(residentAtEnd) KiB at the end")
        #expect(residentAtLoss > 0 && residentAtEnd - residentAtLoss < 32 << 10, "resident memory grew from \(residentAtLoss) to \(residentAtEnd) KiB")

        try r.sshd.restart()
        try await r.expectConverges(agent, "after sshd is back")
        #expect(r.sshd.acceptedLogins >= 1, "no login since sshd came back: \(r.sshd.log)")
        let cleared = await eventually(timeout: .seconds(30)) {
            !RunCommandTests.statusText(r.sandbox).contains("unreachable")
        }
        #expect(cleared, "status still says unreachable: \(RunCommandTests.statusText(r.sandbox))")
        try await RunCommandTests.stop(agent, r.sandbox)
    }

    /// VmRSS of `pid` in KiB (0 when unreadable).
    static func residentKiB(_ pid: pid_t) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
}
