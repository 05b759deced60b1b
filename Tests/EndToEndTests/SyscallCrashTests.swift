import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

/// Syscall-level crash points (issue 5, item 3): `strace -e inject=SYSCALL:signal=KILL:when=N`
/// kills `keepsync sync` exactly at the Nth call of openat, openat2, write, copy_file_range,
/// fsync, syncfs, renameat, unlinkat, mkdirat, and at each call on the store's files (its
/// append and its compaction), while it brings a synced mirror up to a changed source (new, changed, renamed
/// and deleted files, a retargeted link, a chmod). After each kill: I2 (every mirror file
/// is a complete copy of the old or the new version of its path), I5 (a record naming the
/// mirror inode at its path describes that file) and I6 (the store loads); then a restart
/// must converge (I1), leave no temp file, and record exactly what it left (every record
/// held by the mirror, every source file recorded).
@Suite(.serialized, .offThePool)
struct SyscallCrashTests {
    /// Kill points required in all.
    static let requiredPoints = 100

    /// One family of crash points: the syscall killed at (strace counts each syscall on
    /// its own), and whether only calls on the store's files count.
    struct Target: CustomStringConvertible {
        var syscalls: String
        /// Only calls on the store's files (`strace -P T/records.log …`): its append and
        /// its compaction.
        var onStore = false
        /// The Nth calls to kill at: every call up to `limit`, spread evenly beyond it.
        var limit: Int
        var description: String { onStore ? "\(syscalls) on the store" : syscalls }
    }

    /// (keepsync renames with renameat; the store opens and renames relative to its
    /// directory's fd, which `strace -P` cannot attribute, so those are in the plain lists.)
    static let targets: [Target] = [
            Target(syscalls: "openat", limit: 16),
            Target(syscalls: "openat2", limit: 12),
            Target(syscalls: "write", limit: 8),
            Target(syscalls: "copy_file_range", limit: 12),
            Target(syscalls: "fsync", limit: 12),
            Target(syscalls: "syncfs", limit: 4),
            Target(syscalls: "renameat", limit: 16),
            Target(syscalls: "unlinkat", limit: 8),
            Target(syscalls: "mkdirat", limit: 4),
            Target(syscalls: "write", onStore: true, limit: 8),
            Target(syscalls: "fsync", onStore: true, limit: 8),
    ]

    @Test func aSyncKilledAtAnyCallOfItsKeySyscallsLeavesCompleteFilesTrueRecordsAndARestartConverges() throws {
        let strace = try Self.requireProgram("strace", package: "strace")
        var points = 0, completed = 0, failures = 0
        var perTarget: [String] = []
        for target in Self.targets {
            // How often this sync makes the calls (on a fresh copy of the scenario).
            let counting = try Scenario()
            let count = try counting.countCalls(strace: strace, target: target)
            var landed = 0
            if count == 0 { perTarget.append("\(target) not called"); continue }
            for n in Self.killPoints(count: count, limit: target.limit) {
                let scenario = try Scenario()
                let killed = try scenario.syncKilled(strace: strace, target: target, at: n)
                if !killed {
                    completed += 1
                    continue
                }
                points += 1
                landed += 1
                let problems = try scenario.problemsAfterKill() + scenario.problemsAfterRestart()
                #expect(problems.isEmpty, "killed at \(target) call \(n) of \(count): \(problems.prefix(10))")
                if !problems.isEmpty { failures += 1 }
                if failures >= 3 { break }
            }
            perTarget.append("\(target) \(landed)/\(count)")
            #expect(landed > 0, "no kill at \(target) landed (\(count) calls)")
        }
        print("SyscallCrashTests: \(points) kill points (\(perTarget.joined(separator: ", "))); \(completed) syncs finished before their point")
        #expect(points >= Self.requiredPoints, "only \(points) kill points landed")
    }

    /// 1 … limit, then `limit` more spread over the rest.
    static func killPoints(count: Int, limit: Int) -> [Int] {
        guard count > limit else { return Array(1...max(count, 1)) }
        var points = Array(1...limit)
        let step = max(1, (count - limit) / limit)
        var n = limit + step
        while n <= count && points.count < 2 * limit {
            points.append(n)
            n += step
        }
        return points
    }

    /// The path of `name`, or the test is skipped, saying why (`.ci/run` installs every
    /// program the tests use and fails when one is still missing).
    static func requireProgram(_ name: String, package: String) throws -> [UInt8] {
        guard let path = findProgram(name) else {
            try Test.cancel("\(name) is not installed (apt install \(package); .ci/run installs it)")
        }
        return path
    }

    static func findProgram(_ name: String) -> [UInt8]? {
        for dir in ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"] {
            let path = bytes("\(dir)/\(name)")
            if access(String(decoding: path, as: UTF8.self), X_OK) == 0 { return path }
        }
        return nil
    }

    /// A synced mirror and a source changed since: every kind of work `sync` does.
    final class Scenario {
        let sandbox: Sandbox
        let before: TreeSnapshot
        let after: TreeSnapshot

        init() throws {
            sandbox = try Sandbox()
            let s = sandbox.source
            try FS.mkdirs(s / "docs/old")
            try FS.mkdirs(s / "media")
            try FS.mkdir(s / "empty")
            for i in 0..<12 { try FS.writeFile(s / "docs/d\(i).txt", FS.pattern(count: 200 + i * 900, seed: UInt64(i + 1))) }
            for i in 0..<4 { try FS.writeFile(s / "media/m\(i).bin", FS.pattern(count: 96 << 10 + i * 4093, seed: UInt64(100 + i))) }
            for i in 0..<3 { try FS.writeFile(s / "docs/old/o\(i)", FS.pattern(count: 700 + i, seed: UInt64(200 + i))) }
            try FS.writeFile(s / "top.txt", "top\n")
            try FS.symlink(target: bytes("docs/d0.txt"), at: s / "link")
            try FS.setPastTimes(under: s)
            let first = try sandbox.sync()
            try #require(first.status == 0, "\(first)")
            before = try sandbox.sourceSnapshot()

            // The change: rewrite 4, append 1, chmod 1, rename 3, delete 2 and a directory
            // of 3, add 6 in a new directory and 2 beside, retarget the link.
            for i in 0..<4 { try FS.writeFile(s / "docs/d\(i).txt", FS.pattern(count: 300 + i * 1200, seed: UInt64(50 + i))) }
            try FS.append(s / "media/m0.bin", FS.pattern(count: 5000, seed: 77))
            try FS.chmod(s / "docs/d5.txt", 0o600)
            try FS.rename(s / "docs/d6.txt", s / "docs/renamed6.txt")
            try FS.rename(s / "docs/d7.txt", s / "media/moved7.txt")
            try FS.rename(s / "media/m3.bin", s / "m3-moved.bin")
            try FS.unlink(s / "docs/d8.txt")
            try FS.unlink(s / "top.txt")
            try ScratchDirectory.removeTree(s / "docs/old")
            try FS.mkdirs(s / "new/deeper")
            for i in 0..<6 { try FS.writeFile(s / "new/deeper/n\(i)", FS.pattern(count: 1000 + i * 20_000, seed: UInt64(300 + i))) }
            try FS.writeFile(s / "empty/now-full", "x\n")
            try FS.writeFile(s / "docs/d-new.txt", "new\n")
            try FS.unlink(s / "link")
            try FS.symlink(target: bytes("docs/renamed6.txt"), at: s / "link")
            after = try sandbox.sourceSnapshot()
        }

        func straceArguments(_ target: Target, inject: String?) -> [[UInt8]] {
            var args: [[UInt8]] = [bytes("-f"), bytes("-qq"), bytes("-o"), bytes("/dev/null")]
            if target.onStore {
                for name in ["records.log", "records.log.tmp", "records.snapshot", "records.snapshot.tmp"] {
                    args += [bytes("-P"), sandbox.state / bytes(name)]
                }
            }
            args += [bytes("-e"), bytes("trace=\(target.syscalls)")]
            if let inject { args += [bytes("-e"), bytes(inject)] }
            return args + [sandbox.binary, bytes("sync")] + sandbox.paths.map(\.argumentBytes)
        }

        /// How many matching calls an uninterrupted sync of this scenario makes.
        func countCalls(strace: [UInt8], target: Target) throws -> Int {
            let log = sandbox.root / "strace.log"
            var args = straceArguments(target, inject: nil)
            args[3] = log
            let result = try ChildProcess.run(strace, arguments: args, environment: sandbox.environment, timeout: .seconds(60))
            try #require(result.status == 0, "counting \(target): \(result)")
            let text = String(decoding: try FS.readFile(log), as: UTF8.self)
            let names = target.syscalls.split(separator: ",").map { "\($0)(" }
            return text.split(separator: "\n").filter { line in names.contains { line.contains($0) } && !line.contains("resumed>") }.count
        }

        /// Runs the sync under strace, killed at the `n`th matching call; false when it
        /// finished first.
        func syncKilled(strace: [UInt8], target: Target, at n: Int) throws -> Bool {
            let inject = "inject=\(target.syscalls):signal=KILL:when=\(n)"
            let result = try ChildProcess.run(strace, arguments: straceArguments(target, inject: inject),
                                              environment: sandbox.environment, timeout: .seconds(60))
            try #require(!result.timedOut, "strace sync at \(target) \(n) hung: \(result)")
            try #require(result.status == 0 || result.status == 128 + SIGKILL, "strace sync at \(target) \(n): \(result)")
            return result.status != 0
        }

        /// I2, I5, I6 right after the kill.
        func problemsAfterKill() throws -> [String] {
            var problems: [String] = []
            let mirror = try sandbox.mirrorSnapshot()
            for (path, entry) in mirror.entries where entry.kind == .regular {
                // keepsync's temp names, and what is below one (the mirror probe's directory).
                if path.split(separator: 0x2F).contains(where: { TemporaryName.matches(Array($0)) }) { continue }
                // The old or the new version of this path (a rename keeps the content).
                let versions = [before.entries[path], after.entries[path]].compactMap { $0?.content }
                if !versions.contains(where: { $0 == entry.content }) {
                    problems.append("I2: \(ByteEscaping.escape(path)) holds \(entry.content?.count ?? 0) bytes no source version had")
                }
            }
            problems += try Self.recordsThatLie(sandbox).map { "I5: \($0)" }
            do { _ = try JournalBookmarkStore(directory: sandbox.state, readOnly: true).load() } catch {
                problems.append("I6: the store does not load: \(error)")
            }
            return problems
        }

        /// I5 at any instant: a record whose mirror inode is at its path describes what that
        /// file holds (size and mtime; I2 checks the bytes). A record left naming an inode
        /// the mirror no longer has there vouches for nothing: the next pass re-checks it.
        static func recordsThatLie(_ sandbox: Sandbox) throws -> [String] {
            let records = try JournalBookmarkStore(directory: sandbox.state, readOnly: true).load()
            var lies: [String] = []
            for (path, record) in records.table where record.kind == .regular {
                guard let info = FS.lstat(sandbox.mirror / path.bytes), info.inode == record.mirrorInode else { continue }
                if info.kind != .regular || info.size != Int(record.size) || info.mtimeSeconds != Int(record.mtime.seconds)
                    || info.mtimeNanoseconds != Int(record.mtime.nanoseconds) {
                    lies.append("\(ByteEscaping.escape(path.bytes)): record says size \(record.size) mtime \(record.mtime.seconds), mirror inode \(info.inode) has \(info.size) / \(info.mtimeSeconds)")
                }
            }
            return lies
        }

        /// A plain restart: exit 0, I1, no temp file, I5, records match the source, status loads.
        func problemsAfterRestart() throws -> [String] {
            var problems: [String] = []
            let restart = try sandbox.keepsync(["sync"] + sandbox.paths)
            if restart.status != 0 { problems.append("restart: \(restart)") }
            problems += CrashTests.treeDifferences(sandbox.source, sandbox.mirror).map { "I1: \($0)" }
            problems += try sandbox.strayTemporaryFiles().map { "temp file left: \(ByteEscaping.escape($0))" }
            problems += try CrashTests.recordsTheMirrorDoesNotHold(sandbox).map { "I5 after restart: \($0)" }
            problems += try StoreDamageTests.sourceFilesWithoutMatchingRecord(sandbox).map { "no true record after restart: \($0)" }
            if let status = try CrashTests.statusProblem(sandbox, pid: nil) { problems.append("I6: \(status)") }
            return problems
        }
    }
}
