import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

/// Faults of real file systems (issue 5, items 4 and 7), on the built binary: a tmpfs
/// mirror that fills up, a mirror remounted read-only, fsync and syncfs failing with EIO
/// (strace), unreadable source paths for an unprivileged agent (setpriv), and a source
/// root unmounted or renamed away while `run` mirrors it. Needs root (mount, setpriv).
@Suite(.serialized, .offThePool, .enabled(if: geteuid() == 0, "needs root: it mounts file systems and drops privileges with setpriv"))
struct FaultInjectionTests {
    // MARK: ENOSPC

    /// The latest ctime (ns since the epoch) of `root` and everything below it.
    static func latestChange(under root: [UInt8]) -> Int {
        var latest = FS.lstat(root)?.ctimeNanosecondsTotal ?? 0
        for name in (try? FS.list(root)) ?? [] {
            let path = root + [0x2F] + name
            guard let info = FS.lstat(path) else { continue }
            latest = max(latest, info.kind == .directory ? latestChange(under: path) : info.ctimeNanosecondsTotal)
        }
        return latest
    }

    @Test func aMirrorThatFillsUpHoldsOnlyCompleteFilesWaitsWithoutSpinningAndResumesWithinTenSecondsOfSpaceFreed() async throws {
        let sandbox = try Sandbox()
        let mount = try TmpfsMount(sandbox.root / "mnt", sizeMiB: 16)
        defer { mount.unmount() }
        let mirror = mount.path / "M"
        // 10 MiB of someone else's data leaves ~6 MiB for 12 MiB of source.
        try FS.writeFile(mount.path / "ballast", FS.pattern(count: 10 << 20, seed: 1))
        try FS.mkdir(sandbox.source / "big")
        for i in 0..<12 { try FS.writeFile(sandbox.source / "big/b\(i)", FS.pattern(count: 1 << 20, seed: UInt64(10 + i))) }
        for i in 0..<20 { try FS.writeFile(sandbox.source / "s\(i).txt", "small file \(i)\n") }
        try FS.setPastTimes(under: sandbox.source)

        let agent = try await Self.startRun(sandbox, mirror: mirror)
        defer { agent.killNow() }
        let full = await eventually(timeout: .seconds(30)) {
            Self.statusErrors(sandbox).contains { $0.path == "." && $0.message.contains("full") }
        }
        #expect(full, "status never says the mirror is full: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")

        // I2 while full: every file at its final name is complete; no temp file takes space.
        let torn = try Self.incompleteFiles(source: sandbox.source, mirror: mirror)
        #expect(torn.isEmpty, "I2 with the mirror full: \(torn)")
        // A copy still under way when another found the mirror full holds its temp file
        // until its own write fails: none may stay.
        var left: [String] = []
        let noTemporaries = await eventually(timeout: .seconds(10)) {
            left = (try? Self.temporaryFiles(mirror)) ?? []
            return left.isEmpty
        }
        #expect(noTemporaries, "temp files left in a full mirror: \(left)")

        // Waiting, not spinning: CPU and log lines over 3 s of a full mirror.
        let cpuBefore = Self.cpuTicks(agent.pid), linesBefore = agent.stderrLines.count
        try await Task.sleep(for: .seconds(3))  // a span to measure, not a wait for a condition
        let cpu = Double(Self.cpuTicks(agent.pid) - cpuBefore) / Double(sysconf(Int32(_SC_CLK_TCK)))
        let lines = agent.stderrLines.count - linesBefore
        #expect(cpu < 0.6, "the agent used \(cpu) s of CPU in 3 s with a full mirror")
        #expect(lines < 40, "\(lines) log lines in 3 s with a full mirror:\n\(agent.stderrLines.suffix(20).joined(separator: "\n"))")

        // Space freed: the mirror converges within 10 s, with no new event in the source.
        // Timed by the file system's own clock (the unlink's mtime on the mount's root, the
        // mirror's last ctime), so that a busy test process does not count against the agent.
        try FS.unlink(mount.path / "ballast")
        let freed = try #require(FS.lstat(mount.path)).ctimeNanosecondsTotal
        var diff: [String] = []
        let converged = await eventually(timeout: .seconds(60)) {
            diff = CrashTests.treeDifferences(sandbox.source, mirror)
            return diff.isEmpty
        }
        let took = Duration.nanoseconds(Self.latestChange(under: mirror) - freed)
        #expect(converged, "not converged after space was freed:\n\(diff.prefix(10).joined(separator: "\n"))\n\(agent.stderrText)")
        #expect(took <= .seconds(10), "converged \(took) after space was freed")
        let cleared = await eventually(timeout: .seconds(10)) { Self.statusErrors(sandbox).isEmpty }
        #expect(cleared, "errors stay after convergence: \(RunCommandTests.statusText(sandbox))")
        print("FaultInjectionTests: full tmpfs mirror: \(cpu) s CPU and \(lines) log lines in 3 s while full; converged \(took) after space was freed")
        try await Self.stop(agent, sandbox)
    }

    // MARK: EROFS

    @Test func aMirrorRemountedReadOnlyThenReadWriteConverges() async throws {
        let sandbox = try Sandbox()
        let mount = try TmpfsMount(sandbox.root / "mnt", sizeMiB: 64)
        defer { mount.unmount() }
        let mirror = mount.path / "M"
        try sandbox.buildSmallSource()
        let agent = try await Self.startRun(sandbox, mirror: mirror)
        defer { agent.killNow() }
        #expect(try await Self.converges(sandbox.source, mirror), "initial sync\n\(agent.stderrText)")

        try mount.remount("ro")
        try FS.writeFile(sandbox.source / "while-ro.txt", "written while the mirror is read-only\n")
        try FS.writeFile(sandbox.source / "dir/file.txt", "changed while read-only\n")
        try FS.mkdirs(sandbox.source / "new/dir")
        try FS.writeFile(sandbox.source / "new/dir/f", "f\n")
        let reported = await eventually(timeout: .seconds(10)) {
            Self.statusErrors(sandbox).contains { $0.path == "." && $0.message.contains("read-only") }
        }
        #expect(reported, "status never says the mirror is read-only: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")
        #expect(agent.poll() == nil, "the agent ended on a read-only mirror\n\(agent.stderrText)")

        try mount.remount("rw")
        #expect(try await Self.converges(sandbox.source, mirror), "after remounting read-write\n\(agent.stderrText)")
        let cleared = await eventually(timeout: .seconds(10)) { Self.statusErrors(sandbox).isEmpty }
        #expect(cleared, "errors stay after convergence: \(RunCommandTests.statusText(sandbox))")
        try await Self.stop(agent, sandbox)
    }

    // MARK: EIO

    @Test func anFsyncThatFailsWithEioIsNeverFollowedByItsRenameAndTheFileIsRetriedLater() async throws {
        let (strace, sandbox, agent) = try await Self.watchingSmallSource()
        defer { agent.killNow() }

        // Attach to every thread; the first fsync of each from now on fails with EIO.
        let log = sandbox.root / "strace.log"
        let tracer = try RunCommandTests.Agent(
            binary: strace,
            arguments: ["-f", "-qq", "-y", "--seccomp-bpf", "-p", "\(agent.pid)", "-o", String(decoding: log, as: UTF8.self),
                        "-e", "trace=fsync,renameat,renameat2", "-e", "inject=fsync:error=EIO:when=1"].map { Array($0.utf8) },
            environment: sandbox.environment, stderrPath: sandbox.root / "strace.stderr")
        defer { tracer.killNow() }
        let attached = await eventually(timeout: .seconds(10)) { Self.fullyTraced(agent.pid) }
        try #require(attached, "strace did not attach to every thread of \(agent.pid)")

        try RunCommandTests.writeStampedFile(sandbox.source / "written.bin", size: 3 << 20)
        // Each retry waits longer (1 s, 2 s, 4 s …) and a traced agent is slow on a loaded machine.
        let converged = await eventually(timeout: .seconds(90)) {
            RunCommandTests.mirrorDifferences(sandbox).isEmpty && (RunCommandTests.status(sandbox)?["pending"] as? NSNumber)?.intValue == 0
        }
        #expect(converged, "after failed fsyncs: \(RunCommandTests.mirrorDifferences(sandbox))\n\(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")
        let cleared = await eventually(timeout: .seconds(10)) { Self.statusErrors(sandbox).isEmpty }
        #expect(cleared, "the file's error stays after it synced: \(RunCommandTests.statusText(sandbox))")
        tracer.send(SIGTERM)
        _ = try await tracer.waitForExit(timeout: .seconds(10))

        let lines = String(decoding: try FS.readFile(log), as: UTF8.self).split(separator: "\n").map(String.init)
        let failed = lines.filter { $0.contains("fsync(") && $0.contains("(INJECTED)") }
        // strace counts calls per thread: each thread's first fsync failed.
        #expect(failed.count >= 2, "expected injected fsync failures:\n\(lines.joined(separator: "\n"))")
        let failedTemps = failed.compactMap(Self.temporaryName)
        #expect(!failedTemps.isEmpty, "no injected failure hit a temp file's fsync:\n\(failed.joined(separator: "\n"))")
        for temp in failedTemps {
            let renamed = lines.filter { $0.contains("rename") && $0.contains(temp) }
            #expect(renamed.isEmpty, "\(temp) was renamed into place after its fsync failed: \(renamed)")
        }
        #expect(agent.stderrLines.contains { $0.contains("written.bin") && $0.contains("Input/output error") },
                "the failure is not in the log\n\(agent.stderrText)")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func aStatusWriteThatFailsIsWrittenAgainThoughNothingChangesAfterIt() async throws {
        let (strace, sandbox, agent) = try await Self.watchingSmallSource()
        defer { agent.killNow() }
        let filesBefore = try #require((RunCommandTests.status(sandbox)?["files"] as? NSNumber)?.intValue)

        // Every fsync of status.json's temp file fails while the tracer is attached.
        let log = sandbox.root / "strace.log", temp = sandbox.state / "status.json.tmp"
        let tracer = try RunCommandTests.Agent(
            binary: strace,
            arguments: ["-f", "-qq", "-y", "-s", "4096", "-p", "\(agent.pid)", "-o", String(decoding: log, as: UTF8.self),
                        "-P", String(decoding: temp, as: UTF8.self), "-e", "trace=write,fsync", "-e", "inject=fsync:error=EIO"].map { Array($0.utf8) },
            environment: sandbox.environment, stderrPath: sandbox.root / "strace.stderr")
        defer { tracer.killNow() }
        let attached = await eventually(timeout: .seconds(10)) { Self.fullyTraced(agent.pid) }
        try #require(attached, "strace did not attach to every thread of \(agent.pid)")

        // One more file: the report that says so is the last one, and its write fails.
        try FS.writeFile(sandbox.source / "one-more.txt", "one more\n")
        let final = "\"files\": \(filesBefore + 1),"
        let failedFinal = await eventually(timeout: .seconds(30)) {
            // strace writes the JSON's quotes as \"
            let lines = String(decoding: (try? FS.readFile(log)) ?? [], as: UTF8.self).replacingOccurrences(of: "\\", with: "").split(separator: "\n")
            guard let at = lines.lastIndex(where: { $0.hasPrefix("write(") || $0.contains(" write(") }),
                  lines[at].contains(final), lines[at].contains("\"pending\": 0,"), lines[at].contains("\"errors\": []") else { return false }
            return lines[at...].contains { $0.contains("fsync(") && $0.contains("(INJECTED)") }
        }
        try #require(failedFinal, "no failed write of the final report:\n\(String(decoding: (try? FS.readFile(log)) ?? [], as: UTF8.self))")
        tracer.send(SIGTERM)
        let detached = try await tracer.waitForExit(timeout: .seconds(10))
        try #require(detached != nil, "strace did not detach on SIGTERM")
        let injected = String(decoding: try FS.readFile(log), as: UTF8.self).split(separator: "\n").filter { $0.contains("(INJECTED)") }.count
        #expect(injected >= 1)

        // Nothing changes any more, and yet status.json comes to say what is true.
        let rewritten = await eventually(timeout: .seconds(10)) {
            (RunCommandTests.status(sandbox)?["files"] as? NSNumber)?.intValue == filesBefore + 1
        }
        #expect(rewritten, "status.json stays stale after its write failed (\(injected) injected fsync failures): \(RunCommandTests.statusText(sandbox))")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func aSyncfsThatFailsWithEioRenamesNoneOfItsGroupAndTheNextSyncConverges() throws {
        let strace = try SyscallCrashTests.requireProgram("strace", package: "strace")
        let sandbox = try Sandbox()
        for d in 0..<4 {
            try FS.mkdir(sandbox.source / "d\(d)")
            for f in 0..<25 { try FS.writeFile(sandbox.source / "d\(d)/f\(f)", FS.pattern(count: 2000 + f * 97, seed: UInt64(d * 100 + f))) }
        }
        try FS.setPastTimes(under: sandbox.source)
        let log = sandbox.root / "strace.log"
        let args: [[UInt8]] = [bytes("-f"), bytes("-qq"), bytes("-y"), bytes("-o"), log,
                               bytes("-e"), bytes("trace=openat,syncfs,renameat,renameat2"),
                               bytes("-e"), bytes("inject=syncfs:error=EIO:when=1"),
                               sandbox.binary, bytes("sync")] + sandbox.paths.map(\.argumentBytes)
        let result = try ChildProcess.run(strace, arguments: args, environment: sandbox.environment, timeout: .seconds(60))
        #expect(result.status == 1, "a sync whose syncfs failed must exit 1: \(result)")
        #expect(result.errorLines.contains { $0.contains("syncfs") }, "\(result)")

        let lines = String(decoding: try FS.readFile(log), as: UTF8.self).split(separator: "\n").map(String.init)
        let failedAt = try #require(lines.firstIndex { $0.contains("syncfs(") && $0.contains("(INJECTED)") }, "no injected syncfs")
        let stagedBefore = Set(lines[..<failedAt].filter { $0.contains("openat(") && $0.contains("O_CREAT") }.compactMap(Self.temporaryName))
        #expect(!stagedBefore.isEmpty, "no temp file was staged before the failed syncfs")
        let renamedAfter = lines[failedAt...].filter { $0.contains("rename") }.compactMap(Self.temporaryName).filter(stagedBefore.contains)
        #expect(renamedAfter.isEmpty, "staged files renamed after their syncfs failed: \(renamedAfter)")
        #expect(try sandbox.strayTemporaryFiles().isEmpty)
        #expect(try Self.incompleteFiles(source: sandbox.source, mirror: sandbox.mirror).isEmpty)

        let again = try sandbox.sync()
        #expect(again.status == 0, "\(again)")
        #expect(CrashTests.treeDifferences(sandbox.source, sandbox.mirror).isEmpty)
    }

    // MARK: Unreadable source paths

    @Test func anUnprivilegedAgentReportsExactlyTheUnreadableFileAndDirectoryAndSyncsEverythingElse() async throws {
        let setpriv = try SyscallCrashTests.requireProgram("setpriv", package: "util-linux")
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        try FS.writeFile(sandbox.source / "secret.txt", "not for you\n")
        try FS.mkdirs(sandbox.source / "locked/inner")
        try FS.writeFile(sandbox.source / "locked/inner/x", "hidden\n")
        try FS.chmod(sandbox.source / "secret.txt", 0o000)
        try FS.chmod(sandbox.source / "locked", 0o000)
        let chown = try ChildProcess.run(bytes("/usr/bin/chown"), arguments: [bytes("-R"), bytes("65534:65534"), sandbox.root],
                                         environment: ["PATH": "/usr/bin:/bin"])
        try #require(chown.status == 0, "\(chown)")
        let asNobody: [[UInt8]] = [bytes("--reuid=65534"), bytes("--regid=65534"), bytes("--clear-groups"), bytes("--inh-caps=-all"),
                                   sandbox.binary]
        let expected: Set<String> = ["locked", "secret.txt"]

        let sync = try ChildProcess.run(setpriv, arguments: asNobody + [bytes("sync")] + sandbox.paths.map(\.argumentBytes),
                                        environment: sandbox.environment)
        #expect(sync.status == 1, "\(sync)")
        #expect(Set(Self.statusErrors(sandbox).map(\.path)) == expected, "status errors: \(RunCommandTests.statusText(sandbox))")
        for name in expected { #expect(sync.errorLines.contains { $0.contains(name) }, "\(name) not named: \(sync)") }
        let others = CrashTests.treeDifferences(sandbox.source, sandbox.mirror).filter {
            !$0.hasPrefix("locked") && !$0.hasPrefix("secret.txt") && !$0.hasPrefix(".:")
        }
        #expect(others.isEmpty, "everything else must sync: \(others)")

        // The same as a running agent: the two paths in status errors, the rest mirrored live.
        let agent = try RunCommandTests.Agent(binary: setpriv, arguments: asNobody + [bytes("run")] + sandbox.paths.map(\.argumentBytes),
                                              environment: sandbox.environment, stderrPath: sandbox.root / "agent.stderr")
        defer { agent.killNow() }
        let watching = await eventually(timeout: .seconds(30)) {
            RunCommandTests.status(sandbox)?["state"] as? String == "watching" && (RunCommandTests.status(sandbox)?["pid"] as? NSNumber)?.intValue == Int(agent.pid)
        }
        try #require(watching, "the unprivileged agent is not watching\n\(agent.stderrText)")
        #expect(Set(Self.statusErrors(sandbox).map(\.path)) == expected, "status errors: \(RunCommandTests.statusText(sandbox))")
        try FS.writeFile(sandbox.source / "dir/new.txt", "new\n")
        let copied = await eventually(timeout: .seconds(10)) { FS.exists(sandbox.mirror / "dir/new.txt") }
        #expect(copied, "a new file was not mirrored by the unprivileged agent\n\(agent.stderrText)")
        #expect(Set(Self.statusErrors(sandbox).map(\.path)) == expected)
        agent.send(SIGTERM)
        #expect(try await agent.waitForExit(timeout: .seconds(10)) == 0, "\(agent.stderrText)")
    }

    // MARK: The source root goes away mid-run

    @Test func aSourceRootUnmountedMidRunDeletesNothingIsReportedWithinFiveSecondsAndResumesWhenMountedAgain() async throws {
        let sandbox = try Sandbox()
        let data = sandbox.root / "data"
        try FS.mkdirs(data / "docs")
        for i in 0..<20 { try FS.writeFile(data / "docs/f\(i)", "file \(i)\n") }
        try FS.setPastTimes(under: data)
        var bind = try BindMount(data, at: sandbox.source)
        defer { bind.unmount() }
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "initial sync")
        let before = try sandbox.mirrorSnapshot()

        bind.unmount()   // lazy: keepsync's open descriptors keep the old tree alive
        let gone = ContinuousClock.now
        let reported = await eventually(timeout: .seconds(10)) {
            RunCommandTests.status(sandbox)?["state"] as? String == "error" && Self.statusErrors(sandbox).contains { $0.path == "." }
        }
        let took = ContinuousClock.now - gone
        #expect(reported, "the unmount was not reported: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")
        #expect(took <= .seconds(5), "reported \(took) after the unmount")
        try FS.unlink(data / "docs/f0")
        try FS.writeFile(data / "docs/new", "written while unmounted\n")
        let quiet = try sandbox.mirrorSnapshot()
        #expect(before.differences(to: quiet).isEmpty, "the mirror changed while the source was unmounted")
        #expect(agent.poll() == nil, "the agent ended\n\(agent.stderrText)")

        bind = try BindMount(data, at: sandbox.source)
        let resumed = try await Self.converges(sandbox.source, sandbox.mirror)
        #expect(resumed, "not resumed after the source came back\n\(agent.stderrText)")
        #expect(!FS.exists(sandbox.mirror / "docs/f0") && FS.exists(sandbox.mirror / "docs/new"))
        print("FaultInjectionTests: source unmounted: reported after \(took), 0 deletions, resumed on remount")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func aSourceRootRenamedAwayMidRunDeletesNothingIsReportedWithinFiveSecondsAndResumesWhenRenamedBack() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "initial sync")
        let before = try sandbox.mirrorSnapshot()

        let away = sandbox.root / "S.away"
        try FS.rename(sandbox.source, away)
        let gone = ContinuousClock.now
        let reported = await eventually(timeout: .seconds(10)) {
            RunCommandTests.status(sandbox)?["state"] as? String == "error" && Self.statusErrors(sandbox).contains { $0.path == "." }
        }
        let took = ContinuousClock.now - gone
        #expect(reported, "the rename was not reported: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")
        #expect(took <= .seconds(5), "reported \(took) after the rename")
        try FS.writeFile(away / "written-away.txt", "while renamed away\n")
        #expect(before.differences(to: try sandbox.mirrorSnapshot()).isEmpty, "the mirror changed while the source was away")

        try FS.rename(away, sandbox.source)
        #expect(try await Self.converges(sandbox.source, sandbox.mirror), "not resumed after the rename back\n\(agent.stderrText)")
        try await RunCommandTests.stop(agent, sandbox)
    }
}

// MARK: - Helpers

extension FaultInjectionTests {
    /// A tmpfs of its own, unmounted (lazily) at the end.
    struct TmpfsMount {
        let path: [UInt8]
        init(_ path: [UInt8], sizeMiB: Int) throws {
            self.path = path
            try FS.mkdirs(path)
            try FaultInjectionTests.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=\(sizeMiB)m,mode=0755", "tmpfs"], path)
        }
        func remount(_ option: String) throws {
            try FaultInjectionTests.run("/usr/bin/mount", ["-o", "remount,\(option)"], path)
        }
        func unmount() { try? FaultInjectionTests.run("/usr/bin/umount", ["-l"], path) }
    }

    /// `mount --bind`, unmounted (lazily) by `unmount`.
    struct BindMount {
        let target: [UInt8]
        var mounted = true
        init(_ source: [UInt8], at target: [UInt8]) throws {
            self.target = target
            try FaultInjectionTests.run("/usr/bin/mount", ["--bind", String(decoding: source, as: UTF8.self)], target)
        }
        mutating func unmount() {
            guard mounted else { return }
            mounted = false
            try? FaultInjectionTests.run("/usr/bin/umount", ["-l"], target)
        }
    }

    /// Runs a system command with `path` as its last argument; throws unless it exits 0.
    static func run(_ program: String, _ arguments: [String], _ path: [UInt8]) throws {
        let result = try ChildProcess.run(bytes(program), arguments: arguments.map(bytes) + [path], environment: ["PATH": "/usr/bin:/bin"])
        try #require(result.status == 0, "\(program) \(arguments.joined(separator: " ")) \(ByteEscaping.escape(path)): \(result)")
    }

    /// `keepsync run` with the sandbox's source and state and another mirror; returns once watching.
    static func startRun(_ sandbox: Sandbox, mirror: [UInt8]) async throws -> RunCommandTests.Agent {
        let arguments: [any CommandArgument] = ["run", "--source", sandbox.source, "--mirror", mirror, "--state", sandbox.state]
        let agent = try RunCommandTests.Agent(binary: sandbox.binary, arguments: arguments.map(\.argumentBytes),
                                              environment: sandbox.environment, stderrPath: sandbox.root / "agent.stderr")
        let watching = await eventually(timeout: .seconds(60)) {
            RunCommandTests.status(sandbox)?["state"] as? String == "watching" || agent.poll() != nil
        }
        try #require(watching && agent.poll() == nil, "not watching: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)")
        return agent
    }

    static func stop(_ agent: RunCommandTests.Agent, _ sandbox: Sandbox) async throws {
        agent.send(SIGTERM)
        let exit = try await agent.waitForExit(timeout: .seconds(10))
        #expect(exit == 0, "exit \(exit.map(String.init) ?? "none")\n\(agent.stderrText)")
    }

    /// Waits up to 20 s for `mirror` to equal `source`.
    static func converges(_ source: [UInt8], _ mirror: [UInt8]) async throws -> Bool {
        await eventually(timeout: .seconds(20)) { CrashTests.treeDifferences(source, mirror).isEmpty }
    }

    /// `errors` of status.json as (path, message).
    static func statusErrors(_ sandbox: Sandbox) -> [(path: String, message: String)] {
        let list = RunCommandTests.status(sandbox)?["errors"] as? [[String: Any]] ?? []
        return list.map { ($0["path"] as? String ?? "", $0["message"] as? String ?? "") }
    }

    /// Mirror files at their final names that are not byte-equal to the source file.
    static func incompleteFiles(source: [UInt8], mirror: [UInt8]) throws -> [String] {
        var torn: [String] = []
        try CrashTests.walk(mirror) { path, name, info in
            guard info.kind == .regular, !TemporaryName.matches(name) else { return }
            if !(try RunCommandTests.sameContent(source / path, mirror / path)) { torn.append(ByteEscaping.escape(path)) }
        }
        return torn
    }

    static func temporaryFiles(_ mirror: [UInt8]) throws -> [String] {
        var temps: [String] = []
        try CrashTests.walk(mirror) { path, name, _ in if TemporaryName.matches(name) { temps.append(ByteEscaping.escape(path)) } }
        return temps
    }

    /// utime + stime of a process, in clock ticks.
    static func cpuTicks(_ pid: pid_t) -> Int {
        guard let stat = try? FS.readFile(bytes("/proc/\(pid)/stat")) else { return 0 }
        let text = String(decoding: stat, as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14, stime 15.
        guard fields.count > 13 else { return 0 }
        return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
    }

    /// True when every thread of `pid` has a tracer.
    /// strace, and an agent that mirrored a small source and watches it.
    static func watchingSmallSource() async throws -> ([UInt8], Sandbox, RunCommandTests.Agent) {
        let strace = try SyscallCrashTests.requireProgram("strace", package: "strace")
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await RunCommandTests.start(sandbox)
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "initial sync")
        return (strace, sandbox, agent)
    }

    static func fullyTraced(_ pid: pid_t) -> Bool {
        guard let tasks = try? FS.list(bytes("/proc/\(pid)/task")), !tasks.isEmpty else { return false }
        return tasks.allSatisfy { tid in
            guard let status = try? FS.readFile(bytes("/proc/\(pid)/task/") + tid + bytes("/status")) else { return false }
            let line = String(decoding: status, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("TracerPid:") }
            return line.map { !$0.hasSuffix("\t0") } ?? false
        }
    }

    /// The `.keepsync-tmp-<16 hex>` name in an strace line, if any.
    static func temporaryName(_ line: String) -> String? {
        guard let range = line.range(of: ".keepsync-tmp-") else { return nil }
        let name = line[range.lowerBound...].prefix(".keepsync-tmp-".count + 16)
        return name.count == ".keepsync-tmp-".count + 16 ? String(name) : nil
    }
}
