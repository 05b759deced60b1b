import Foundation
import Glibc
import KeepSyncLinux
import Testing
import KeepSyncTestSupport
import KeepSyncCore

/// `keepsync run` as a child process: status, live mirroring, signals, the lock.
/// Every wait is a deadline poll; stderr goes to a file in the sandbox.
@Suite(.serialized, .offThePool)
struct RunCommandTests {
    // MARK: Cases

    @Test func theAgentSaysWatchingAndAFileWrittenInTheSourceAppearsCompleteInTheMirror() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await Self.start(sandbox)
        try await Self.expectMirrorConverges(sandbox, agent, "initial sync")

        // Written in place, in several writes.
        try FS.writeFile(sandbox.source / "new.txt", "new file\n")
        try FS.mkdir(sandbox.source / "newdir")
        try FS.writeFile(sandbox.source / "newdir/inner.bin", FS.pattern(count: 1 << 20, seed: 3))
        try FS.append(sandbox.source / "newdir/inner.bin", FS.pattern(count: 2 << 20, seed: 4))
        // Written outside and moved in: the source only ever holds one version, so the
        // mirror may hold nothing or exactly that, never a part of it.
        let expected = FS.pattern(count: 24 << 20, seed: 5)
        try FS.writeFile(sandbox.root / "outside.bin", expected, mode: 0o640)
        try FS.rename(sandbox.root / "outside.bin", sandbox.source / "moved-in.bin")

        var sightings = 0
        var torn: [String] = []
        let converged = await eventually(timeout: .seconds(30)) {
            if let info = FS.lstat(sandbox.mirror / "moved-in.bin") {
                sightings += 1
                if info.size != expected.count {
                    torn.append("size \(info.size)")
                } else if sightings == 1, let seen = try? FS.readFile(sandbox.mirror / "moved-in.bin"), seen != expected {
                    torn.append("content differs at the first sighting")
                }
            }
            return Self.mirrorDifferences(sandbox).isEmpty
        }
        #expect(torn.isEmpty, "the mirror showed an incomplete moved-in.bin: \(torn.prefix(5))")
        #expect(converged, "mirror differs from source:\n\(Self.mirrorDifferences(sandbox).joined(separator: "\n"))\n\(agent.stderrText)")
        #expect(try sandbox.strayTemporaryFiles().isEmpty)
        try await Self.stop(agent, sandbox)
    }

    @Test("a running agent folds its records log into a snapshot once the log passes 1 MiB, and the records stay true")
    func theRecordsLogIsCompactedWhileRunning() async throws {
        let sandbox = try Sandbox()
        // 4,500 records of 200-byte names: about 1.2 MiB of log from the initial pass.
        let stem = String(repeating: "n", count: 190)
        for d in 0..<9 {
            try FS.mkdir(sandbox.source / "d\(d)")
            for f in 0..<500 { try FS.writeFile(sandbox.source / "d\(d)/\(stem)\(f)", "\(d).\(f)") }
        }
        func synced(_ files: Int) -> Bool {
            let s = Self.status(sandbox)
            return (s?["files"] as? NSNumber)?.intValue == files && (s?["pending"] as? NSNumber)?.intValue == 0
        }
        let agent = try await Self.start(sandbox)
        try #require(await eventually(timeout: .seconds(60)) { synced(4_500) }, "status.json: \(Self.statusText(sandbox))")
        let log = sandbox.state / "records.log", snapshot = sandbox.state / "records.snapshot"
        let compacted = await eventually(timeout: .seconds(10)) {
            guard let s = FS.lstat(snapshot), let l = FS.lstat(log) else { return false }
            return s.size > 1 << 20 && l.size < s.size
        }
        #expect(compacted, "no snapshot while running: log \(FS.lstat(log)?.size ?? 0) bytes, snapshot \(FS.lstat(snapshot)?.size ?? 0)\n\(agent.stderrText)")

        // A change after the compaction is appended to the new log and survives a kill.
        try FS.writeFile(sandbox.source / "d0/after", "after")
        try #require(await eventually(timeout: .seconds(10)) { synced(4_501) }, "status.json: \(Self.statusText(sandbox))")
        agent.killNow()
        let records = try JournalBookmarkStore(directory: sandbox.state, readOnly: true).load()
        #expect(records.table.regularFiles == 4_501, "the store lost records across the compaction")
        #expect(try CrashTests.recordsTheMirrorDoesNotHold(sandbox).isEmpty)
        let check = try sandbox.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(check)")
    }

    @Test func sigusr1RepairsAMirrorFileDeletedBehindTheAgentsBack() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await Self.start(sandbox)
        try await Self.expectMirrorConverges(sandbox, agent, "initial sync")

        try FS.unlink(sandbox.mirror / "dir/file.txt")
        // The agent watches the source only: a live change elsewhere does not bring it back.
        try FS.writeFile(sandbox.source / "probe", "probe\n")
        let probed = await eventually(timeout: .seconds(20)) { FS.exists(sandbox.mirror / "probe") }
        try #require(probed, "probe never mirrored\n\(agent.stderrText)")
        #expect(!FS.exists(sandbox.mirror / "dir/file.txt"), "repaired without SIGUSR1: the test proves nothing")

        agent.send(SIGUSR1)
        try await Self.expectMirrorConverges(sandbox, agent, "after SIGUSR1")
        #expect(try FS.readFile(sandbox.mirror / "dir/file.txt") == bytes("hello world\n"))
        #expect(agent.exitStatus == nil, "SIGUSR1 ended the agent\n\(agent.stderrText)")
        try await Self.stop(agent, sandbox)
    }

    @Test("with --verify-interval 1, a mirror file deleted or chmodded behind the agent's back comes back by itself, logged at info; a verify that finds nothing is logged at debug")
    func theVerifyIntervalRepairsDriftWithoutASignal() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await Self.start(sandbox, ["--verify-interval", "1", "-v"])
        try await Self.expectMirrorConverges(sandbox, agent, "initial sync")
        let quiet = await eventually(timeout: .seconds(10)) {
            agent.stderrLines.contains { $0.hasPrefix("keepsync: debug: verify: nothing to repair") }
        }
        #expect(quiet, "no verify logged at debug level\n\(agent.stderrText)")

        try FS.unlink(sandbox.mirror / "dir/file.txt")
        try FS.chmod(sandbox.mirror / "top.txt", 0o600)
        let repaired = await eventually(timeout: .seconds(10)) {
            FS.exists(sandbox.mirror / "dir/file.txt") && Self.mirrorDifferences(sandbox).isEmpty
        }
        #expect(repaired, "not repaired within 10 s:\n\(Self.mirrorDifferences(sandbox).joined(separator: "\n"))\n\(agent.stderrText)")
        let info = agent.stderrLines.filter { $0.hasPrefix("keepsync: verify: ") }
        #expect(info.contains { $0.contains("1 file to copy") && $0.contains("mode") }, "\(info)\n\(agent.stderrText)")
        try await Self.stop(agent, sandbox)
    }

    @Test func sighupPicksUpAChangedExcludeAndResyncs() async throws {
        let sandbox = try Sandbox()
        let config = sandbox.root / "keepsync.conf"
        try FS.writeFile(config, "exclude = *.tmp\n")
        try FS.writeFile(sandbox.source / "keep.txt", "keep\n")
        try FS.writeFile(sandbox.source / "a.tmp", "scratch\n")
        try FS.writeFile(sandbox.source / "pre.log", "logged before the reload\n")
        try FS.writeFile(sandbox.source / "marker.txt", "marker\n")
        let agent = try await Self.start(sandbox, ["--config", config])
        try await Self.expectMirrorConverges(sandbox, agent, "initial sync", ignoring: [bytes("a.tmp")])
        #expect(!FS.exists(sandbox.mirror / "a.tmp"), "*.tmp is excluded by the configuration file")
        #expect(FS.exists(sandbox.mirror / "pre.log"))

        try FS.writeFile(config, "exclude = *.tmp\nexclude = *.log\n")
        // Only a full resync brings this back: it tells when the reload has been applied.
        try FS.unlink(sandbox.mirror / "marker.txt")
        agent.send(SIGHUP)
        let resynced = await eventually(timeout: .seconds(20)) { FS.exists(sandbox.mirror / "marker.txt") }
        try #require(resynced, "no full resync after SIGHUP\n\(agent.stderrText)")

        try FS.writeFile(sandbox.source / "x.log", "must not be mirrored\n")
        try FS.writeFile(sandbox.source / "x.txt", "must be mirrored\n")
        try FS.writeFile(sandbox.source / "later.txt", "written after x.log\n")
        let ignoring = [bytes("a.tmp"), bytes("x.log")]
        try await Self.expectMirrorConverges(sandbox, agent, "after SIGHUP", ignoring: ignoring)
        #expect(!FS.exists(sandbox.mirror / "x.log"), "x.log was mirrored although *.log is excluded since SIGHUP\n\(agent.stderrText)")
        #expect(FS.exists(sandbox.mirror / "pre.log"), "what the mirror holds under a newly excluded path is left alone")
        #expect(agent.exitStatus == nil, "SIGHUP ended the agent\n\(agent.stderrText)")
        try await Self.stop(agent, sandbox)
    }

    @Test func anInvalidConfigurationOnSighupIsReportedAndTheAgentKeepsTheOldOne() async throws {
        let sandbox = try Sandbox()
        let config = sandbox.root / "keepsync.conf"
        try FS.writeFile(config, "exclude = *.tmp\n")
        try FS.writeFile(sandbox.source / "keep.txt", "keep\n")
        let agent = try await Self.start(sandbox, ["--config", config])
        try await Self.expectMirrorConverges(sandbox, agent, "initial sync")

        try FS.writeFile(config, "exclude = *.tmp\nno_such_key = 1\n")
        agent.send(SIGHUP)
        let where_ = "\(ByteEscaping.escape(config)):2"
        let reported = await eventually(timeout: .seconds(10)) {
            agent.stderrLines.contains { $0.contains("keepsync: error:") && $0.contains(where_) }
        }
        #expect(reported, "no `keepsync: error:` line naming \(where_) on stderr:\n\(agent.stderrText)")
        #expect(agent.poll() == nil, "the agent ended after an invalid configuration\n\(agent.stderrText)")

        try FS.writeFile(sandbox.source / "after.tmp", "still excluded\n")
        try FS.writeFile(sandbox.source / "after.txt", "still mirrored\n")
        try await Self.expectMirrorConverges(sandbox, agent, "after the failed reload", ignoring: [bytes("after.tmp")])
        #expect(!FS.exists(sandbox.mirror / "after.tmp"), "the old configuration (exclude = *.tmp) was not kept")
        try await Self.stop(agent, sandbox)
    }

    @Test func sigtermDuringALargeCopyExitsPromptlyWithoutAPartialFile() async throws {
        let sandbox = try Sandbox()
        let agent = try await Self.start(sandbox)
        let size = 1 << 30
        try Self.writeStampedFile(sandbox.root / "big.bin", size: size)
        try FS.rename(sandbox.root / "big.bin", sandbox.source / "big.bin")

        let clock = ContinuousClock()
        let copying = try await eventually(timeout: .seconds(20), every: .milliseconds(1)) {
            !(try sandbox.strayTemporaryFiles().isEmpty) || FS.exists(sandbox.mirror / "big.bin")
        }
        try #require(copying, "the copy never started\n\(agent.stderrText)")
        if FS.exists(sandbox.mirror / "big.bin") {
            // A fast disk (copy_file_range from the page cache) can finish 1 GiB between two polls:
            // the stop is then checked without a copy in flight.
            print("RunCommandTests: the 1 GiB copy finished before SIGTERM could interrupt it")
        }
        let signalled = clock.now
        agent.send(SIGTERM)
        let status = try await agent.waitForExit(timeout: .seconds(5))
        let took = clock.now - signalled
        print("RunCommandTests: SIGTERM during a 1 GiB copy: exit \(status.map(String.init) ?? "none") after \(took)")
        #expect(status == 0, "exit \(status.map(String.init) ?? "none: still running after 5 s")\n\(agent.stderrText)")
        if status == nil { agent.killNow(); _ = try await agent.waitForExit(timeout: .seconds(5)) }

        if FS.exists(sandbox.mirror / "big.bin") {
            #expect(try Self.sameContent(sandbox.source / "big.bin", sandbox.mirror / "big.bin"),
                    "a partial big.bin is at its final name in the mirror")
        }
        let strays = try sandbox.strayTemporaryFiles()
        #expect(strays.isEmpty, "temp files left in the mirror: \(strays.map { ByteEscaping.escape($0) })")
        #expect(Self.status(sandbox)?["state"] as? String == "stopped", "status.json: \(Self.statusText(sandbox))")

        // The next start copies the file whole.
        let again = try await Self.start(sandbox)
        #expect(try Self.sameContent(sandbox.source / "big.bin", sandbox.mirror / "big.bin"), "big.bin after a restart")
        try await Self.stop(again, sandbox)
    }

    /// inotify instances the process holds (its `anon_inode:inotify` descriptors).
    static func inotifyInstances(_ pid: pid_t) -> Int {
        let dir = Array("/proc/\(pid)/fd".utf8)
        return ((try? FS.list(dir)) ?? []).filter { name in
            (try? FS.readlink(dir / name)) == Array("anon_inode:inotify".utf8)
        }.count
    }

    @Test func afterAReloadALostAndRecoveredSourceRootLeavesOneWatcher() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await Self.start(sandbox)
        #expect(Self.inotifyInstances(agent.pid) == 1)
        agent.send(SIGHUP)
        let reloaded = await eventually(timeout: .seconds(10)) {
            agent.stderrLines.contains { $0.contains("SIGHUP") } && (Self.status(sandbox)?["state"] as? String) == "watching"
        }
        try #require(reloaded, "\(agent.stderrText)")
        let aside = sandbox.root / "S.unmounted"
        try FS.rename(sandbox.source, aside)
        let paused = await eventually(timeout: .seconds(10)) { Self.statusText(sandbox).contains("is missing") }
        #expect(paused, "the lost root is not reported: \(Self.statusText(sandbox))\n\(agent.stderrText)")
        let quiet = await eventually(timeout: .seconds(5)) { Self.inotifyInstances(agent.pid) == 0 }
        #expect(quiet, "the paused agent still watches with \(Self.inotifyInstances(agent.pid)) inotify instances")
        try FS.rename(aside, sandbox.source)
        try FS.writeFile(sandbox.source / "after.txt", "after the pause\n")
        try await Self.expectMirrorConverges(sandbox, agent, "after the root came back")
        #expect(Self.inotifyInstances(agent.pid) == 1, "watchers left running: \(Self.inotifyInstances(agent.pid))")
        try await Self.stop(agent, sandbox)
    }

    @Test func aSecondRunOnTheSameStateExits3NamingTheFirstPID() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await Self.start(sandbox)
        let second = try ChildProcess.run(sandbox.binary, arguments: (["run"] + sandbox.paths).map(\.argumentBytes),
                                          environment: sandbox.environment, timeout: .seconds(20))
        #expect(second.status == 3, "\(second)")
        #expect(second.errorLines.contains { $0.contains("\(agent.pid)") }, "the message does not name PID \(agent.pid): \(second)")
        #expect(agent.poll() == nil, "the first agent ended\n\(agent.stderrText)")
        try await Self.expectMirrorConverges(sandbox, agent, "first agent still mirroring")
        try await Self.stop(agent, sandbox)
    }

    @Test func anAgentStoppedWhileMoreChangesArriveThanTheKernelQueueHoldsRescansAndConverges() async throws {
        let queued = Int(String(decoding: (try? FS.readFile(Array("/proc/sys/fs/inotify/max_queued_events".utf8))) ?? [],
                                as: UTF8.self).filter(\.isNumber)) ?? 16384
        guard queued <= 100_000 else {
            try Test.cancel("max_queued_events = \(queued) needs too many files to overflow")
        }
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await Self.start(sandbox)
        defer { agent.killNow() }
        try await Self.expectMirrorConverges(sandbox, agent, "initial sync")
        // A watched directory first (a probe in it mirrored), then, stopped, the agent
        // reads nothing: at least CREATE and CLOSE_WRITE of each file fill the kernel's
        // queue past max_queued_events.
        try FS.mkdir(sandbox.source / "burst")
        try FS.writeFile(sandbox.source / "burst/probe", "probe")
        let watched = await eventually(timeout: .seconds(30)) { FS.exists(sandbox.mirror / "burst/probe") }
        try #require(watched, "burst/probe never reached the mirror\n\(agent.stderrText)")
        agent.send(SIGSTOP)
        let count = queued / 2 + 2_000
        for i in 0..<count { try FS.writeFile(sandbox.source / "burst/\(i)", "\(i)") }
        agent.send(SIGCONT)
        let overflowed = await eventually(timeout: .seconds(30)) {
            agent.stderrLines.contains { $0.contains("inotify event queue overflowed") }
        }
        #expect(overflowed, "no overflow after \(count) files with max_queued_events = \(queued)\n\(agent.stderrText)")
        let converged = await eventually(timeout: .seconds(120)) {
            Self.mirrorDifferences(sandbox).isEmpty && (Self.status(sandbox)?["pending"] as? NSNumber)?.intValue == 0
        }
        #expect(converged, "\(Self.mirrorDifferences(sandbox).prefix(5))\n\(agent.stderrText)")
        try await Self.stop(agent, sandbox)
    }

    @Test func sigintExitsZeroAfterACleanDrain() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await Self.start(sandbox)
        try await Self.expectMirrorConverges(sandbox, agent, "initial sync")
        try await Self.stop(agent, sandbox, signal: SIGINT)
        try sandbox.expectMirrorEqualsSource()
    }
}

// MARK: - Helpers

extension RunCommandTests {
    /// A `keepsync` child left running: stdin from /dev/null, stdout and stderr to files.
    final class Agent {
        let pid: pid_t
        let stderrPath: [UInt8]
        private(set) var exitStatus: Int32?

        init(binary: [UInt8], arguments: [[UInt8]], environment: [String: String], stderrPath: [UInt8]) throws {
            self.stderrPath = stderrPath
            let outPath = stderrPath + Array(".stdout".utf8)
            pid = try ChildSpawning.spawn([binary] + arguments, environment: environment) { actions in
                posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
                FS.withCPath(outPath) { _ = posix_spawn_file_actions_addopen(&actions, 1, $0, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
                FS.withCPath(stderrPath) { _ = posix_spawn_file_actions_addopen(&actions, 2, $0, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
            }
        }

        deinit { killNow() }

        /// SIGKILL and reap, if still running.
        func killNow() {
            guard poll() == nil else { return }
            kill(pid, SIGKILL)
            _ = ChildSpawning.reap(pid)
            exitStatus = 128 + SIGKILL
        }

        func send(_ signal: Int32) { kill(pid, signal) }

        /// The exit status (128 + signal when killed) once ended, nil while running.
        @discardableResult
        func poll() -> Int32? {
            if let exitStatus { return exitStatus }
            exitStatus = ChildSpawning.poll(pid)
            return exitStatus
        }

        func waitForExit(timeout: Duration) async throws -> Int32? {
            _ = await eventually(timeout: timeout, every: .milliseconds(5)) { self.poll() != nil }
            return poll()
        }

        var stderrText: String {
            "--- keepsync stderr ---\n" + String(decoding: (try? FS.readFile(stderrPath)) ?? [], as: UTF8.self)
        }

        var stderrLines: [String] {
            String(decoding: (try? FS.readFile(stderrPath)) ?? [], as: UTF8.self).split(separator: "\n").map(String.init)
        }

    }

    /// `T/status.json` as an object, nil while absent or unreadable.
    static func status(_ sandbox: Sandbox) -> [String: Any]? {
        guard let data = try? FS.readFile(sandbox.state / "status.json") else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(data))) as? [String: Any]
    }

    static func statusText(_ sandbox: Sandbox) -> String {
        String(decoding: (try? FS.readFile(sandbox.state / "status.json")) ?? Array("(none)".utf8), as: UTF8.self)
    }

    /// Starts `keepsync run --source S --mirror M --state T` plus `extra`; returns once
    /// status.json says watching.
    static func start(_ sandbox: Sandbox, _ extra: [any CommandArgument] = []) async throws -> Agent {
        let agent = try Agent(binary: sandbox.binary, arguments: (["run"] + sandbox.paths + extra).map(\.argumentBytes),
                              environment: sandbox.environment, stderrPath: sandbox.root / "agent.stderr")
        let watching = await eventually(timeout: .seconds(30)) {
            status(sandbox)?["state"] as? String == "watching" || agent.poll() != nil
        }
        try #require(watching && agent.poll() == nil,
                     "the agent is not watching (exit \(agent.exitStatus.map(String.init) ?? "none")); status.json: \(statusText(sandbox))\n\(agent.stderrText)")
        return agent
    }

    /// Sends `signal`, expects exit 0 within 5 s and status.json saying stopped.
    static func stop(_ agent: Agent, _ sandbox: Sandbox, signal: Int32 = SIGTERM,
                     sourceLocation: SourceLocation = #_sourceLocation) async throws {
        agent.send(signal)
        let status = try await agent.waitForExit(timeout: .seconds(5))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none: still running 5 s after the signal")\n\(agent.stderrText)",
                sourceLocation: sourceLocation)
        if status == nil { agent.killNow() }
        #expect(Self.status(sandbox)?["state"] as? String == "stopped", "status.json: \(statusText(sandbox))",
                sourceLocation: sourceLocation)
        let strays = try sandbox.strayTemporaryFiles()
        #expect(strays.isEmpty, "temp files left in the mirror: \(strays.map { ByteEscaping.escape($0) })", sourceLocation: sourceLocation)
    }

    /// Differences between the source (minus `ignoring`) and the mirror; empty when equal.
    static func mirrorDifferences(_ sandbox: Sandbox, ignoring: [[UInt8]] = []) -> [String] {
        do {
            return try sandbox.sourceSnapshot().removing(ignoring).differences(to: try sandbox.mirrorSnapshot())
        } catch {
            return ["cannot snapshot: \(error)"]
        }
    }

    /// Waits up to 30 s for the mirror to equal the source (minus `ignoring`) with nothing pending.
    static func expectMirrorConverges(_ sandbox: Sandbox, _ agent: Agent, _ what: String, ignoring: [[UInt8]] = [],
                                      sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let converged = await eventually(timeout: .seconds(30)) {
            mirrorDifferences(sandbox, ignoring: ignoring).isEmpty && (status(sandbox)?["pending"] as? NSNumber)?.intValue == 0
        }
        #expect(converged, "\(what): mirror differs from source:\n\(mirrorDifferences(sandbox, ignoring: ignoring).joined(separator: "\n"))\nstatus.json: \(statusText(sandbox))\n\(agent.stderrText)",
                sourceLocation: sourceLocation)
    }

    /// `size` bytes in 1 MiB blocks of noise, each stamped with its index.
    static func writeStampedFile(_ path: [UInt8], size: Int) throws {
        var block = FS.pattern(count: 1 << 20, seed: 99)
        let fd = FS.withCPath(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        guard fd >= 0 else { throw FSError(call: "open", path: path, code: errno) }
        defer { close(fd) }
        var offset = 0
        var index: UInt64 = 0
        while offset < size {
            withUnsafeBytes(of: index) { stamp in block.withUnsafeMutableBytes { $0.copyMemory(from: stamp) } }
            let count = min(block.count, size - offset)
            var done = 0
            while done < count {
                let n = block.withUnsafeBytes { write(fd, $0.baseAddress! + done, count - done) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw FSError(call: "write", path: path, code: errno)
                }
                done += n
            }
            offset += count
            index += 1
        }
    }

    /// Byte-for-byte equality of two files, read in 1 MiB chunks.
    static func sameContent(_ a: [UInt8], _ b: [UInt8]) throws -> Bool {
        let fa = FS.withCPath(a) { open($0, O_RDONLY | O_CLOEXEC) }
        guard fa >= 0 else { throw FSError(call: "open", path: a, code: errno) }
        defer { close(fa) }
        let fb = FS.withCPath(b) { open($0, O_RDONLY | O_CLOEXEC) }
        guard fb >= 0 else { throw FSError(call: "open", path: b, code: errno) }
        defer { close(fb) }
        let chunk = 1 << 20
        let ba = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        let bb = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { ba.deallocate(); bb.deallocate() }
        func fill(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Int {
            var got = 0
            while got < chunk {
                let n = read(fd, buffer.baseAddress! + got, chunk - got)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                got += n
            }
            return got
        }
        while true {
            let na = fill(fa, ba), nb = fill(fb, bb)
            if na != nb || memcmp(ba.baseAddress!, bb.baseAddress!, na) != 0 { return false }
            if na < chunk { return true }
        }
    }
}
