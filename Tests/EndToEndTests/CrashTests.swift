import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

/// kill -9 at random instants (issue 5, item 2), on the built binary.
///
/// (a) during an initial `sync` of 2,000 files (1 KiB – 8 MiB, mostly small);
/// (b) during `run` while the test keeps replacing large files with distinct,
///     self-identifying versions.
///
/// After each kill: I2 on the mirror (every non-temp regular file is byte-identical to
/// some version its source path had), then a restart, then I1 (mirror equals source,
/// modes and mtimes included), I6 (the restart loads the store; `status --json` is
/// valid) and no `.keepsync-tmp-*` left. Seeded: `KEEPSYNC_CRASH_SEED=N` replays.
@Suite(.serialized, .offThePool)
struct CrashTests {
    /// Kill points required per test.
    static let initialSyncKillPoints = 30
    static let liveRewriteKillPoints = 24

    // MARK: (a) initial sync

    @Test func sigkillDuringAnInitialSyncOfTwoThousandFilesNeverLeavesATornFileAndARestartConverges() async throws {
        let sandbox = try Sandbox()
        let seed = Self.seed ^ 0xA
        var rng = SplitMix64(seed: seed)
        let built = try Self.buildInitialSyncSource(sandbox, rng: &rng)
        let clock = ContinuousClock()

        // The copy's duration, measured on the real tree: kill instants are spread over it.
        // It depends on the disk's load, so it is tracked: a sync that finished before its
        // kill instant is a new measure; kills landing late in the span stretch it by 10%.
        let measuredStart = clock.now
        let first = try sandbox.sync()
        let measured = clock.now - measuredStart
        var durationNs = Self.nanoseconds(measured)
        try #require(first.status == 0, "\(first)")
        let initialDiff = Self.treeDifferences(sandbox.source, sandbox.mirror)
        try #require(initialDiff.isEmpty, "the uninterrupted sync left differences:\n\(initialDiff.joined(separator: "\n"))")
        try Self.resetMirrorAndState(sandbox)

        var killPoints = 0, rounds = 0, failedRounds = 0
        var filesAtKill: [Int] = []
        var orphanedTemps = 0, killsWithTemps = 0
        while killPoints < Self.initialSyncKillPoints && rounds < Self.initialSyncKillPoints * 3 && failedRounds < 3 {
            rounds += 1
            let delay = Duration.nanoseconds(Int64(Double(durationNs) * rng.unit()))
            let child = try RunCommandTests.Agent(binary: sandbox.binary,
                                                  arguments: ((["sync"] as [any CommandArgument]) + sandbox.paths).map(\.argumentBytes),
                                                  environment: sandbox.environment, stderrPath: sandbox.root / "sync-killed.stderr")
            let spawned = clock.now
            try await Task.sleep(for: delay)  // the random kill instant
            let lifetime = child.poll() == nil ? nil : clock.now - spawned
            child.send(SIGKILL)
            let exit = try await child.waitForExit(timeout: .seconds(30))
            try #require(exit != nil, "round \(rounds): the killed sync never ended")
            if exit == 0, let lifetime {
                // It ended before it was seen to (a sleep may overrun): aim below that, but
                // never below a tenth of the uninterrupted sync.
                durationNs = max(Self.nanoseconds(measured) / 10, min(durationNs, Self.nanoseconds(lifetime)) * 9 / 10)
            } else if exit == 128 + SIGKILL, Self.nanoseconds(delay) > durationNs * 3 / 4 {
                durationNs += durationNs / 10
            }
            let where_ = "round \(rounds) (seed \(seed), kill at \(delay) of \(Duration.nanoseconds(durationNs)), exit \(exit!))"
            if exit == 128 + SIGKILL { killPoints += 1 }

            // I2: nothing torn at a final name; I5: no record claims what the mirror lacks.
            let seen = try Self.checkStaticMirror(sandbox)
            filesAtKill.append(seen.files)
            orphanedTemps += seen.temps
            if seen.temps > 0 { killsWithTemps += 1 }
            let claims = try Self.recordsTheMirrorDoesNotHold(sandbox)
            #expect(seen.torn.isEmpty, "\(where_): I2: \(seen.torn.prefix(10))")
            #expect(claims.isEmpty, "\(where_): I5: \(claims.prefix(10))")

            // Restart: completes, converges, leaves no temp file, the store and status load.
            let restart = try sandbox.sync()
            #expect(restart.status == 0, "\(where_): restart: \(restart)")
            let diff = Self.treeDifferences(sandbox.source, sandbox.mirror)
            #expect(diff.isEmpty, "\(where_): I1 after the restart:\n\(diff.prefix(20).joined(separator: "\n"))")
            let strays = try sandbox.strayTemporaryFiles()
            #expect(strays.isEmpty, "\(where_): temp files survived convergence: \(strays.prefix(10).map { ByteEscaping.escape($0) })")
            let statusProblem = try Self.statusProblem(sandbox, pid: nil)
            #expect(statusProblem == nil, "\(where_): I6: \(statusProblem ?? "")")
            // The restart's records describe exactly what it left: nothing to redo next time.
            let records = try Self.recordsTheMirrorDoesNotHold(sandbox) + StoreDamageTests.sourceFilesWithoutMatchingRecord(sandbox)
            #expect(records.isEmpty, "\(where_): records after the restart: \(records.prefix(10))")

            let failed = !seen.torn.isEmpty || !claims.isEmpty || restart.status != 0 || !diff.isEmpty || !strays.isEmpty
                || statusProblem != nil || !records.isEmpty
            if failed { failedRounds += 1 }
            try Self.resetMirrorAndState(sandbox)
        }
        let sorted = filesAtKill.sorted()
        let spread = sorted.isEmpty ? "-" : "min \(sorted.first!), median \(sorted[sorted.count / 2]), max \(sorted.last!)"
        print("CrashTests: initial sync of \(built.files) files (\(built.bytes >> 20) MiB) took \(measured) (\(Duration.nanoseconds(durationNs)) at the end); \(killPoints) kill points in \(rounds) rounds (seed \(seed)); files at their final name when killed: \(spread) of \(built.files); \(killsWithTemps) kills left \(orphanedTemps) temp files, all removed by the restart")
        #expect(killPoints >= Self.initialSyncKillPoints, "only \(killPoints) of \(rounds) kills landed while the sync was running")
    }

    // MARK: (b) live rewrites under run

    @Test func sigkillWhileLargeFilesAreRewrittenNeverLeavesAMixedVersionAndARestartConverges() async throws {
        let sandbox = try Sandbox()
        let seed = Self.seed ^ 0xB
        var rng = SplitMix64(seed: seed)
        var versions = VersionedFiles(blob: FS.pattern(count: 5 << 20, seed: seed | 1), count: 6)
        try FS.mkdir(sandbox.source / "big")
        try FS.mkdir(sandbox.source / "small")
        for p in 0..<versions.count { try versions.writeNext(p, sandbox) }
        for i in 0..<30 {
            try FS.writeFile(sandbox.source / "small/s\(i)", FS.pattern(count: 1 + Int(rng.next() % 8192), seed: UInt64(i + 1)),
                             mode: i % 4 == 0 ? 0o600 : 0o644)
            try FS.setTimes(sandbox.source / "small/s\(i)", seconds: pastSeconds + i, nanoseconds: 1000 * i + 7)
        }

        var agent = try await Self.startAgent(sandbox)
        let initial = try await Self.converge(sandbox, agent)
        try #require(initial.isEmpty, "initial sync:\n\(initial.joined(separator: "\n"))\n\(agent.stderrText)")

        let clock = ContinuousClock()
        var killPoints = 0, rounds = 0, failedRounds = 0, writes = 0, orphanedTemps = 0, killsWithTemps = 0
        while killPoints < Self.liveRewriteKillPoints && rounds < Self.liveRewriteKillPoints * 3 && failedRounds < 3 {
            rounds += 1
            // Rewrite random files until the random kill instant (10 – 400 ms), pausing 0 – 15 ms between versions.
            let killDelay = Duration.milliseconds(10 + Int64(rng.next() % 391))
            let killAt = clock.now + killDelay
            while clock.now < killAt {
                try versions.writeNext(Int(rng.next() % UInt64(versions.count)), sandbox)
                writes += 1
                let pause = Duration.milliseconds(Int64(rng.next() % 16))
                let left = clock.now.duration(to: killAt)
                try await Task.sleep(for: min(pause, max(left, .zero)))  // random instants, not a wait for a condition
            }
            agent.send(SIGKILL)
            let exit = try await agent.waitForExit(timeout: .seconds(30))
            try #require(exit != nil, "round \(rounds): the killed agent never ended")
            let where_ = "round \(rounds) (seed \(seed), kill after \(killDelay), exit \(exit!))"
            if exit == 128 + SIGKILL { killPoints += 1 }

            // I2: every file in the mirror is one complete version of its path.
            let seen = try Self.checkVersionedMirror(sandbox, versions)
            orphanedTemps += seen.temps
            if seen.temps > 0 { killsWithTemps += 1 }
            #expect(seen.problems.isEmpty, "\(where_): I2: \(seen.problems.prefix(10))")

            // Restart: the store loads, the agent watches, the mirror converges, no temp file stays.
            agent = try await Self.startAgent(sandbox)
            let diff = try await Self.converge(sandbox, agent)
            #expect(diff.isEmpty, "\(where_): I1 after the restart:\n\(diff.prefix(20).joined(separator: "\n"))\n\(agent.stderrText)")
            let strays = try sandbox.strayTemporaryFiles()
            #expect(strays.isEmpty, "\(where_): temp files survived convergence: \(strays.map { ByteEscaping.escape($0) })")
            let statusProblem = try Self.statusProblem(sandbox, pid: agent.pid)
            #expect(statusProblem == nil, "\(where_): I6: \(statusProblem ?? "")")
            if !seen.problems.isEmpty || !diff.isEmpty || !strays.isEmpty || statusProblem != nil { failedRounds += 1 }
        }
        try await RunCommandTests.stop(agent, sandbox)
        let diff = Self.treeDifferences(sandbox.source, sandbox.mirror)
        #expect(diff.isEmpty, "after the final stop:\n\(diff.prefix(20).joined(separator: "\n"))")
        print("CrashTests: live rewrites of \(versions.count) files (1-4 MiB): \(killPoints) kill points in \(rounds) rounds, \(writes) versions written (seed \(seed)); \(killsWithTemps) kills left \(orphanedTemps) temp files, all removed by the restart")
        #expect(killPoints >= Self.liveRewriteKillPoints, "only \(killPoints) of \(rounds) kills hit a running agent")
    }
}

// MARK: - Safety under stress (issue 5, item 7)

/// Two agents started at once; `rm -rf` of 90% of the source while the agent is stopped.
@Suite(.serialized, .offThePool)
struct SafetyUnderStressTests {
    /// Spawns two `keepsync run` on the same state back to back (the same instant, as far
    /// as a test can tell) and returns them once one of them has ended.
    static func startTwoAtOnce(_ sandbox: Sandbox, trial: Int) async throws
        -> (first: RunCommandTests.Agent, second: RunCommandTests.Agent) {
        let arguments = ((["run"] as [any CommandArgument]) + sandbox.paths).map(\.argumentBytes)
        let a = try RunCommandTests.Agent(binary: sandbox.binary, arguments: arguments, environment: sandbox.environment,
                                          stderrPath: sandbox.root / "twin-\(trial)-a.stderr")
        let b = try RunCommandTests.Agent(binary: sandbox.binary, arguments: arguments, environment: sandbox.environment,
                                          stderrPath: sandbox.root / "twin-\(trial)-b.stderr")
        let oneEnded = await eventually(timeout: .seconds(20), every: .milliseconds(5)) {
            a.poll() != nil || b.poll() != nil
        }
        try #require(oneEnded, "trial \(trial): neither of two simultaneous agents ended\n\(a.stderrText)\n\(b.stderrText)")
        return (a, b)
    }

    @Test func twoRunsStartedAtTheSameInstantOnTheSameStateOneRunsAndTheOtherExitsThree() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        for trial in 1...6 {
            let (a, b) = try await Self.startTwoAtOnce(sandbox, trial: trial)
            let (winner, loser) = a.poll() == nil ? (a, b) : (b, a)
            #expect(winner.poll() == nil, "trial \(trial): both agents ended\n\(a.stderrText)\n\(b.stderrText)")
            #expect(loser.exitStatus == 3, "trial \(trial): the second agent exited \(loser.exitStatus.map(String.init) ?? "-")\n\(loser.stderrText)")
            let errors = loser.stderrLines.filter { $0.contains("keepsync: error:") }
            #expect(errors.count == 1 && errors[0].contains("another keepsync"), "trial \(trial): \(loser.stderrText)")
            // Lock-pid race (fixed in 444b260): the loser names the winner's PID.
            #expect(errors.contains { $0.contains("pid \(winner.pid))") }, "trial \(trial): does not name PID \(winner.pid): \(errors)")
            guard winner.poll() == nil else { continue }
            let watching = await eventually(timeout: .seconds(30)) {
                let s = RunCommandTests.status(sandbox)
                return (s?["pid"] as? NSNumber)?.intValue == Int(winner.pid) && s?["state"] as? String == "watching"
            }
            #expect(watching, "trial \(trial): the winner never watched\n\(winner.stderrText)")
            try FS.writeFile(sandbox.source / "trial-\(trial)", "written while the winner runs\n")
            try await RunCommandTests.expectMirrorConverges(sandbox, winner, "trial \(trial)")
            try await RunCommandTests.stop(winner, sandbox)
        }
    }

    /// Regression test for the lock-pid race (fixed in 444b260: the PID is written in place
    /// and a loser re-reads briefly): three agents start at once, 40 times; every loser
    /// must name the one that runs.
    @Test func regressionTheLoserOfASimultaneousStartNamesTheHoldersPid() async throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        let arguments = ((["run"] as [any CommandArgument]) + sandbox.paths).map(\.argumentBytes)
        for trial in 1...40 {
            let agents = try (0..<3).map { i in
                try RunCommandTests.Agent(binary: sandbox.binary, arguments: arguments, environment: sandbox.environment,
                                          stderrPath: sandbox.root / "race-\(trial)-\(i).stderr")
            }
            let settled = await eventually(timeout: .seconds(20), every: .milliseconds(5)) {
                agents.filter { $0.poll() != nil }.count >= 2
            }
            let running = agents.filter { $0.poll() == nil }
            var wrong: [String] = []
            if settled, running.count == 1, let winner = running.first {
                for loser in agents where loser !== winner {
                    if loser.exitStatus != 3 || !loser.stderrLines.contains(where: { $0.contains("pid \(winner.pid))") }) {
                        wrong.append("exit \(loser.exitStatus.map(String.init) ?? "-"): \(loser.stderrLines)")
                    }
                }
            } else {
                wrong.append("\(running.count) of 3 agents running")
            }
            for agent in running { agent.send(SIGTERM) }
            for agent in running {
                _ = try await agent.waitForExit(timeout: .seconds(10))
                agent.killNow()
            }
            if !wrong.isEmpty {
                Issue.record("trial \(trial): agents that lost the lock to PID \(running.first?.pid ?? 0): \(wrong)")
                return
            }
        }
    }

    @Test func rmRfOfNinetyPercentOfTheSourceWhileTheAgentIsStoppedIsHeldOnRestart() async throws {
        let sandbox = try Sandbox()
        for d in 0..<10 {
            try FS.mkdir(sandbox.source / "d\(d)")
            for f in 0..<10 { try FS.writeFile(sandbox.source / "d\(d)/f\(f)", "file \(d)/\(f)\n") }
        }
        try FS.setPastTimes(under: sandbox.source)
        let agent = try await RunCommandTests.start(sandbox)
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "initial sync")
        try await RunCommandTests.stop(agent, sandbox)
        let before = try sandbox.mirrorSnapshot()

        // 9 of 10 directories: 99 of 110 mirror entries.
        for d in 1..<10 { try ScratchDirectory.removeTree(sandbox.source / "d\(d)") }
        let expectedHeld = 99

        // `run` restarts, keeps running, holds the deletions, reports them and keeps copying.
        let restarted = try await CrashTests.startAgent(sandbox)
        let status = RunCommandTests.status(sandbox)
        #expect((status?["heldDeletes"] as? NSNumber)?.intValue == expectedHeld, "status.json: \(RunCommandTests.statusText(sandbox))")
        try FS.writeFile(sandbox.source / "d0/new", "new while deletions are held\n")
        let copied = await eventually(timeout: .seconds(20)) { FS.exists(sandbox.mirror / "d0/new") }
        #expect(copied, "the agent stopped copying while it held deletions\n\(restarted.stderrText)")
        #expect(restarted.poll() == nil, "the agent ended\n\(restarted.stderrText)")
        try await RunCommandTests.stop(restarted, sandbox)
        var after = try sandbox.mirrorSnapshot()
        #expect(before.differences(to: after.removing([bytes("d0/new")])).filter { !$0.hasPrefix("d0:") && !$0.hasPrefix(".:") }.isEmpty,
                "run removed mirror entries although 90% of the source vanished")
        for d in 1..<10 {
            for f in 0..<10 { #expect(after.entries[bytes("d\(d)/f\(f)")] != nil, "run deleted d\(d)/f\(f)") }
        }

        // `sync` refuses the same deletions: exit 3, the mirror keeps every file.
        let refused = try sandbox.sync()
        #expect(refused.status == 3, "\(refused)")
        let json = try sandbox.status("--json")
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any]
        #expect((object?["heldDeletes"] as? NSNumber)?.intValue == expectedHeld, "\(json)")
        after = try sandbox.mirrorSnapshot()
        for d in 1..<10 {
            for f in 0..<10 { #expect(after.entries[bytes("d\(d)/f\(f)")]?.content == bytes("file \(d)/\(f)\n"), "sync deleted d\(d)/f\(f)") }
        }
        #expect(before.identityChanges(to: after, only: [.regular]).filter { !$0.hasPrefix("d0/new") }.isEmpty,
                "files were rewritten in the mirror")
    }
}

// MARK: - Helpers

extension CrashTests {
    /// `KEEPSYNC_CRASH_SEED`, or a fixed default.
    static let seed: UInt64 = {
        if let text = getenv("KEEPSYNC_CRASH_SEED"), let n = UInt64(String(cString: text)) { return n }
        return 20_260_501
    }()

    static func nanoseconds(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    /// Writes `header` then `count` bytes of `blob` from `offset` (no intermediate copy).
    static func writeFile(_ path: [UInt8], header: [UInt8], blob: [UInt8], offset: Int, count: Int, mode: mode_t) throws {
        let fd = FS.withCPath(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode) }
        guard fd >= 0 else { throw FSError(call: "open", path: path, code: errno) }
        defer { close(fd) }
        func writeAll(_ buffer: UnsafeRawBufferPointer) throws {
            var done = 0
            while done < buffer.count {
                let n = write(fd, buffer.baseAddress! + done, buffer.count - done)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw FSError(call: "write", path: path, code: errno)
                }
                done += n
            }
        }
        try header.withUnsafeBytes { try writeAll($0) }
        try blob.withUnsafeBytes { try writeAll(UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + count)])) }
        guard fchmod(fd, mode) == 0 else { throw FSError(call: "fchmod", path: path, code: errno) }
    }

    /// 2,000 files (~80 MiB) in 200 directories: 1,780 of 1 – 16 KiB, 200 of 16 – 128 KiB,
    /// 20 of 1 – 8 MiB (one of each bound, the rest up to 4 MiB); distinct contents, modes
    /// and nanosecond mtimes. Small enough that 30 rounds of kill + restart fit in CI time.
    static func buildInitialSyncSource(_ sandbox: Sandbox, rng: inout SplitMix64) throws -> (files: Int, bytes: Int) {
        let blob = FS.pattern(count: (8 << 20) + 4096, seed: 0x5EED)
        var total = 0
        var directories: [[UInt8]] = []
        for i in 0..<2000 {
            let dir = bytes("d\(i % 40)/e\(i % 5)")
            if !FS.exists(sandbox.source / dir) {
                try FS.mkdirs(sandbox.source / dir)
                directories.append(dir)
            }
            let size: Int
            switch i {
            case 0: size = 8 << 20
            case 100: size = 1 << 20
            case 1: size = 1024
            case _ where i % 100 == 0: size = (1 << 20) + Int(rng.next() % UInt64(3 << 20))
            case _ where i % 10 == 0: size = (16 << 10) + Int(rng.next() % UInt64(112 << 10))
            default: size = 1024 + Int(rng.next() % UInt64(15 << 10))
            }
            // An 8-byte stamp makes every file distinct even where blob slices coincide.
            var stamp = [UInt8](repeating: 0, count: 8)
            for k in 0..<8 { stamp[k] = UInt8(truncatingIfNeeded: UInt64(i) >> (8 * k)) }
            let offset = Int(rng.next() % UInt64(blob.count - size + 1))
            let modes: [mode_t] = [0o644, 0o600, 0o755, 0o640]
            let path = sandbox.source / dir / "f\(i).bin"
            try writeFile(path, header: stamp, blob: blob, offset: offset, count: size - 8, mode: modes[i % modes.count])
            try FS.setTimes(path, seconds: pastSeconds + i, nanoseconds: (i * 7_919) % 1_000_000_000)
            total += size
        }
        // Directories get their times after their entries, deepest first.
        for (n, dir) in directories.enumerated() {
            try FS.setTimes(sandbox.source / dir, seconds: pastSeconds + 5_000 + n, nanoseconds: 333 + n)
        }
        for top in 0..<40 {
            try FS.chmod(sandbox.source / "d\(top)", top % 8 == 0 ? 0o750 : 0o755)
            try FS.setTimes(sandbox.source / "d\(top)", seconds: pastSeconds + 9_000 + top, nanoseconds: 999 + top)
        }
        try FS.setTimes(sandbox.source, seconds: pastSeconds + 10_000, nanoseconds: 42)
        return (2000, total)
    }

    /// `rm -rf` of the mirror and the state (rm(1): much faster than a debug-built walk).
    static func resetMirrorAndState(_ sandbox: Sandbox) throws {
        let rm = try ChildProcess.run(bytes("/bin/rm"), arguments: [bytes("-rf"), sandbox.mirror, sandbox.state], environment: [:])
        try #require(rm.status == 0, "rm -rf: \(rm)")
        try #require(!FS.exists(sandbox.mirror) && !FS.exists(sandbox.state))
    }

    /// Calls `body(relative path, name, info)` for every entry below `root`, parents first.
    static func walk(_ root: [UInt8], _ body: ([UInt8], [UInt8], FileInfo) throws -> Void) throws {
        func visit(_ relative: [UInt8]) throws {
            for name in try FS.list(relative.isEmpty ? root : root / relative) {
                let path = relative / name
                guard let info = FS.lstat(root / path) else { continue }
                try body(path, name, info)
                if info.kind == .directory { try visit(path) }
            }
        }
        try visit([])
    }

    /// I2 for a source that does not change: every non-temp regular file in the mirror
    /// equals the source file at its path. Also counts the files and the leftover temps.
    static func checkStaticMirror(_ sandbox: Sandbox) throws -> (torn: [String], files: Int, temps: Int) {
        var torn: [String] = [], files = 0, temps = 0
        guard FS.exists(sandbox.mirror) else { return ([], 0, 0) }
        try walk(sandbox.mirror) { path, name, info in
            guard info.kind == .regular else { return }
            // keepsync's temp names, and what is below one (the mirror probe's directory).
            if TemporaryName.matches(name) || path.split(separator: 0x2F).contains(where: { TemporaryName.matches(Array($0)) }) {
                temps += 1
                return
            }
            files += 1
            guard let source = FS.lstat(sandbox.source / path), source.kind == .regular else {
                torn.append("\(ByteEscaping.escape(path)): not a source file")
                return
            }
            if source.size != info.size {
                torn.append("\(ByteEscaping.escape(path)): \(info.size) of \(source.size) bytes")
            } else if !(try RunCommandTests.sameContent(sandbox.source / path, sandbox.mirror / path)) {
                torn.append("\(ByteEscaping.escape(path)): content differs")
            }
        }
        return (torn, files, temps)
    }

    /// I5: regular-file records whose path the mirror does not hold as the recorded inode
    /// and size (read with a read-only store, as `check` does).
    static func recordsTheMirrorDoesNotHold(_ sandbox: Sandbox) throws -> [String] {
        guard FS.exists(sandbox.state / "records.snapshot") || FS.exists(sandbox.state / "records.log") else { return [] }
        let records = try JournalBookmarkStore(directory: sandbox.state, readOnly: true).load()
        var problems: [String] = []
        for (path, record) in records.table where record.kind == .regular {
            let name = ByteEscaping.escape(path.bytes)
            guard let info = FS.lstat(sandbox.mirror / path.bytes), info.kind == .regular else {
                problems.append("\(name): recorded, missing in the mirror")
                continue
            }
            if info.inode != record.mirrorInode || info.size != Int(record.size) {
                problems.append("\(name): recorded inode \(record.mirrorInode) size \(record.size), mirror inode \(info.inode) size \(info.size)")
            }
        }
        return problems
    }

    /// I1 without loading whole trees into memory: kind, mode, mtime (ns), size, link
    /// target, names, and bytes (memcmp) of every entry. Empty when equal.
    /// `except`: paths (relative) in `actual` left out (the versions directory).
    static func treeDifferences(_ expected: [UInt8], _ actual: [UInt8], limit: Int = 50, except: [[UInt8]] = []) -> [String] {
        var lines: [String] = []
        func note(_ path: [UInt8], _ what: String) {
            if lines.count < limit { lines.append("\(path.isEmpty ? "." : ByteEscaping.escape(path)): \(what)") }
        }
        func compare(_ path: [UInt8]) {
            let e = path.isEmpty ? expected : expected / path
            let a = path.isEmpty ? actual : actual / path
            guard let ei = FS.lstat(e) else { note(path, "missing in the source"); return }
            guard let ai = FS.lstat(a) else { note(path, "missing"); return }
            guard ei.kind == ai.kind else { note(path, "kind \(ei.kind) vs \(ai.kind)"); return }
            if ei.kind != .symlink {
                if ei.permissions != ai.permissions {
                    note(path, "mode \(String(ei.permissions, radix: 8)) vs \(String(ai.permissions, radix: 8))")
                }
                if ei.mtimeSeconds != ai.mtimeSeconds || ei.mtimeNanoseconds != ai.mtimeNanoseconds {
                    note(path, "mtime \(ei.mtimeSeconds).\(ei.mtimeNanoseconds) vs \(ai.mtimeSeconds).\(ai.mtimeNanoseconds)")
                }
            }
            switch ei.kind {
            case .regular:
                if ei.size != ai.size {
                    note(path, "size \(ei.size) vs \(ai.size)")
                } else if (try? RunCommandTests.sameContent(e, a)) != true {
                    note(path, "content differs")
                }
            case .symlink:
                if (try? FS.readlink(e)) != (try? FS.readlink(a)) { note(path, "link target differs") }
            case .directory:
                let en = (try? FS.list(e)) ?? [], an = (try? FS.list(a)) ?? []
                let expectedNames = Set(en)
                for name in an where !expectedNames.contains(name) && !except.contains(path.isEmpty ? name : path / name) {
                    note(path / name, "unexpected")
                }
                for name in en { compare(path / name) }
            case .fifo, .other:
                break
            }
        }
        compare([])
        return lines
    }

    /// Problems with `status --json` (I6), nil when it exits 0 with a status object
    /// (of `pid`, when given).
    static func statusProblem(_ sandbox: Sandbox, pid: pid_t?) throws -> String? {
        let result = try sandbox.status("--json")
        guard result.status == 0 else { return "status --json: \(result)" }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(result.stdout))) as? [String: Any],
              let state = object["state"] as? String, !state.isEmpty else { return "status --json is not a status object: \(result)" }
        if let pid, (object["pid"] as? NSNumber)?.intValue != Int(pid) { return "status --json names another pid than \(pid): \(result)" }
        return nil
    }

    /// Starts `keepsync run` and returns once status.json says *this* agent is watching
    /// (a killed predecessor's status.json says watching too).
    static func startAgent(_ sandbox: Sandbox, sourceLocation: SourceLocation = #_sourceLocation) async throws
        -> RunCommandTests.Agent {
        let agent = try RunCommandTests.Agent(binary: sandbox.binary,
                                              arguments: ((["run"] as [any CommandArgument]) + sandbox.paths).map(\.argumentBytes),
                                              environment: sandbox.environment, stderrPath: sandbox.root / "agent.stderr")
        let watching = await eventually(timeout: .seconds(30)) {
            let s = RunCommandTests.status(sandbox)
            return ((s?["pid"] as? NSNumber)?.intValue == Int(agent.pid) && s?["state"] as? String == "watching")
                || agent.poll() != nil
        }
        try #require(watching && agent.poll() == nil,
                     "the agent is not watching (exit \(agent.exitStatus.map(String.init) ?? "none")); status.json: \(RunCommandTests.statusText(sandbox))\n\(agent.stderrText)",
                     sourceLocation: sourceLocation)
        return agent
    }

    /// Waits up to 30 s for the mirror to equal the source with nothing pending in this
    /// agent; returns the differences left (empty when converged).
    static func converge(_ sandbox: Sandbox, _ agent: RunCommandTests.Agent) async throws -> [String] {
        var diff: [String] = []
        let converged = await eventually(timeout: .seconds(30)) {
            diff = treeDifferences(sandbox.source, sandbox.mirror)
            let s = RunCommandTests.status(sandbox)
            return diff.isEmpty && (s?["pid"] as? NSNumber)?.intValue == Int(agent.pid)
                && (s?["pending"] as? NSNumber)?.intValue == 0
        }
        if converged { return [] }
        return diff.isEmpty ? ["nothing differs, but status.json: \(RunCommandTests.statusText(sandbox))"] : diff
    }

    /// Files `big/L<p>` whose every version identifies itself: a 16-byte header (`KSV1`,
    /// path index, version, size, little-endian) and a slice of `blob` that the index and
    /// version determine. Each version is written outside the source and renamed in, so
    /// the source only ever holds complete versions.
    struct VersionedFiles {
        let blob: [UInt8]
        let count: Int
        /// The versions each path has had (in the source, at some instant).
        var written: [Set<UInt32>]
        var next: [UInt32]
        static let headerSize = 16

        init(blob: [UInt8], count: Int) {
            self.blob = blob
            self.count = count
            written = Array(repeating: [], count: count)
            next = Array(repeating: 0, count: count)
        }

        func relativePath(_ p: Int) -> [UInt8] { bytes("big/L\(p)") }

        /// Size (1 – 4 MiB) and blob offset of a version.
        func layout(_ p: Int, _ v: UInt32) -> (size: Int, offset: Int) {
            let h = SplitMix64.mix((UInt64(p) << 32 | UInt64(v)) ^ 0x1234_5678_9ABC)
            let size = (1 << 20) + Int(h % UInt64((3 << 20) + 1))
            let offset = Int(SplitMix64.mix(h) % UInt64(blob.count - size + 1))
            return (size, offset)
        }

        func header(_ p: Int, _ v: UInt32, size: Int) -> [UInt8] {
            var out = Array("KSV1".utf8)
            for value in [UInt32(p), v, UInt32(size)] {
                for k in 0..<4 { out.append(UInt8(truncatingIfNeeded: value >> (8 * k))) }
            }
            return out
        }

        /// Writes the next version of path `p` and renames it into the source.
        mutating func writeNext(_ p: Int, _ sandbox: Sandbox) throws {
            let v = next[p]
            next[p] += 1
            let (size, offset) = layout(p, v)
            let staging = sandbox.root / "incoming-version"
            try CrashTests.writeFile(staging, header: header(p, v, size: size), blob: blob, offset: offset,
                                     count: size - Self.headerSize, mode: p % 2 == 0 ? 0o644 : 0o600)
            written[p].insert(v)
            try FS.rename(staging, sandbox.source / relativePath(p))
        }

        /// Why `content` at path `p` is not one complete version the path has had; nil when it is.
        func problem(_ p: Int, _ content: [UInt8]) -> String? {
            guard content.count >= Self.headerSize, content[0..<4].elementsEqual("KSV1".utf8) else {
                return "no version header (\(content.count) bytes)"
            }
            func field(_ i: Int) -> UInt32 {
                (0..<4).reduce(UInt32(0)) { $0 | UInt32(content[4 + 4 * i + $1]) << (8 * $1) }
            }
            let (index, v, size) = (Int(field(0)), field(1), Int(field(2)))
            guard index == p else { return "holds a version of L\(index)" }
            guard written[p].contains(v) else { return "version \(v) was never written" }
            let expected = layout(p, v)
            guard size == expected.size, content.count == size else {
                return "version \(v): \(content.count) bytes, expected \(expected.size) (torn or truncated)"
            }
            let same = content.withUnsafeBytes { c in
                blob.withUnsafeBytes { b in
                    memcmp(c.baseAddress! + Self.headerSize, b.baseAddress! + expected.offset, size - Self.headerSize) == 0
                }
            }
            return same ? nil : "version \(v): bytes differ from that version (mixed or torn)"
        }
    }

    /// I2 under rewrites: `big/*` files must be complete known versions, the rest equal
    /// the (static) source. Counts leftover temps.
    static func checkVersionedMirror(_ sandbox: Sandbox, _ versions: VersionedFiles) throws -> (problems: [String], temps: Int) {
        var problems: [String] = [], temps = 0
        let bigPaths = Dictionary(uniqueKeysWithValues: (0..<versions.count).map { (versions.relativePath($0), $0) })
        try walk(sandbox.mirror) { path, name, info in
            guard info.kind == .regular else { return }
            // keepsync's temp names, and what is below one (the mirror probe's directory).
            if TemporaryName.matches(name) || path.split(separator: 0x2F).contains(where: { TemporaryName.matches(Array($0)) }) {
                temps += 1
                return
            }
            if let p = bigPaths[path] {
                if let problem = versions.problem(p, try FS.readFile(sandbox.mirror / path)) {
                    problems.append("\(ByteEscaping.escape(path)): \(problem)")
                }
            } else if !FS.exists(sandbox.source / path) {
                problems.append("\(ByteEscaping.escape(path)): not a source file")
            } else if !(try RunCommandTests.sameContent(sandbox.source / path, sandbox.mirror / path)) {
                problems.append("\(ByteEscaping.escape(path)): differs from its only version")
            }
        }
        return (problems, temps)
    }
}
