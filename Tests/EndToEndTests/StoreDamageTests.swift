import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

/// A damaged record store (issue 5, item 6; invariant I6): `records.log` or
/// `records.snapshot` truncated, or bytes flipped, at seeded random offsets, one damage
/// per round on a fresh copy of a good store. Every start must succeed, rebuild by
/// comparison, end with the mirror equal to the source, remove nothing from the mirror
/// (source and mirror were equal before the damage), and leave `check` at exit 0.
/// `KEEPSYNC_CRASH_SEED=N` replays another sequence.
@Suite(.serialized, .offThePool)
struct StoreDamageTests {
    static let rounds = 120
    /// Every this many rounds the damaged store is loaded by `run` instead of `sync`.
    static let runEvery = 10

    enum Damage: CaseIterable {
        case truncateLog, truncateSnapshot, flipLog, flipSnapshot
    }

    @Test func aTruncatedOrBitFlippedStoreStartsRebuildsByComparisonAndDeletesNothing() async throws {
        let sandbox = try Sandbox()
        let seed = CrashTests.seed ^ 0xD
        var rng = SplitMix64(seed: seed)
        let (snapshot, log) = try await Self.makeGoodStore(sandbox)
        let snapshotPath = sandbox.state / "records.snapshot", logPath = sandbox.state / "records.log"

        func restore() throws {
            try FS.writeFile(snapshotPath, snapshot, mode: 0o600)
            try FS.writeFile(logPath, log, mode: 0o600)
        }

        // Control: the undamaged store changes nothing.
        try restore()
        let control = try sandbox.sync()
        try #require(control.status == 0 && !control.stderrText.contains("removed"), "control: \(control)")
        try #require(RunCommandTests.mirrorDifferences(sandbox).isEmpty)

        var detected = 0, recopiedRounds = 0, failures = 0, viaRun = 0
        var counts: [String: Int] = [:]
        for round in 1...Self.rounds where failures < 3 {
            try restore()
            let damage = Damage.allCases[round % Damage.allCases.count]
            let path = [.truncateLog, .flipLog].contains(damage) ? logPath : snapshotPath
            var content = try FS.readFile(path)
            let description: String
            switch damage {
            case .truncateLog, .truncateSnapshot:
                let length = Int(rng.next() % UInt64(content.count))
                content.removeLast(content.count - length)
                description = "\(damage): \(ByteEscaping.escape(path)) cut to \(length) of \(content.count + (content.count - length)) bytes"
            case .flipLog, .flipSnapshot:
                let offset = Int(rng.next() % UInt64(content.count))
                let width = min(1 + Int(rng.next() % 4), content.count - offset)
                for i in offset..<(offset + width) { content[i] ^= UInt8(1 + rng.next() % 255) }
                description = "\(damage): \(width) byte(s) at offset \(offset) of \(content.count)"
            }
            try FS.writeFile(path, content, mode: 0o600)
            counts["\(damage)", default: 0] += 1
            let where_ = "round \(round) (seed \(seed)): \(description)"
            let before = try Self.inodes(sandbox.mirror)

            var problems: [String] = []
            var stderr = ""
            if round % Self.runEvery == 0 {
                viaRun += 1
                let agent = try await CrashTests.startAgent(sandbox)
                let diff = try await CrashTests.converge(sandbox, agent)
                if !diff.isEmpty { problems.append("run did not converge: \(diff.prefix(10))") }
                try await RunCommandTests.stop(agent, sandbox)
                stderr = agent.stderrLines.joined(separator: "\n")
            } else {
                let result = try sandbox.sync()
                if result.status != 0 { problems.append("sync: \(result)") }
                stderr = result.stderrText
            }
            if stderr.contains("were damaged") { detected += 1 }
            if stderr.contains("removed") { problems.append("removed mirror entries:\n\(stderr)") }
            let after = try Self.inodes(sandbox.mirror)
            let lost = before.keys.filter { after[$0] == nil }
            if !lost.isEmpty { problems.append("mirror entries gone: \(lost.prefix(10).map { ByteEscaping.escape($0) })") }
            let diff = CrashTests.treeDifferences(sandbox.source, sandbox.mirror)
            if !diff.isEmpty { problems.append("I1: \(diff.prefix(10))") }
            if before.contains(where: { after[$0.key] != nil && after[$0.key] != $0.value }) { recopiedRounds += 1 }
            let check = try sandbox.check()
            if check.status != 0 { problems.append("check: \(check)") }
            #expect(problems.isEmpty, "\(where_)\n\(problems.joined(separator: "\n"))")
            if !problems.isEmpty { failures += 1 }
        }
        print("StoreDamageTests: \(Self.rounds) damage rounds (seed \(seed); \(counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))), \(viaRun) loaded by run, the rest by sync; damage reported in \(detected), files recopied in \(recopiedRounds); snapshot \(snapshot.count) B, log \(log.count) B")
    }

    /// ~200 files synced, then live changes under `run` (puts, removes, renames, mode
    /// changes) so that `records.log` holds frames, then SIGKILL (no compaction). Returns
    /// the snapshot and log bytes; the mirror equals the source.
    static func makeGoodStore(_ sandbox: Sandbox) async throws -> (snapshot: [UInt8], log: [UInt8]) {
        for d in 0..<16 {
            try FS.mkdir(sandbox.source / "d\(d)", mode: d % 5 == 0 ? 0o750 : 0o755)
            for f in 0..<12 {
                try FS.writeFile(sandbox.source / "d\(d)/f\(f).txt", FS.pattern(count: (d * 12 + f) * 17 % 4000, seed: UInt64(d * 100 + f + 1)),
                                 mode: f % 3 == 0 ? 0o600 : 0o644)
            }
        }
        for l in 0..<4 { try FS.symlink(target: bytes("d\(l)/f\(l).txt"), at: sandbox.source / "link\(l)") }
        try FS.mkdirs(sandbox.source / "empty/inner")
        try FS.setPastTimes(under: sandbox.source)
        let first = try sandbox.sync()
        try #require(first.status == 0, "\(first)")

        let agent = try await CrashTests.startAgent(sandbox)
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "store damage: start")
        for d in 0..<15 { try FS.append(sandbox.source / "d\(d)/f0.txt", bytes("appended \(d)\n")) }
        for d in 0..<8 { try FS.rename(sandbox.source / "d\(d)/f1.txt", sandbox.source / "d\((d + 1) % 16)/moved-\(d).txt") }
        for d in 8..<16 { try FS.unlink(sandbox.source / "d\(d)/f2.txt") }
        for d in 0..<10 { try FS.writeFile(sandbox.source / "d\(d)/new.txt", "new \(d)\n") }
        for d in 0..<4 { try FS.chmod(sandbox.source / "d\(d)/f3.txt", 0o640) }
        try FS.mkdir(sandbox.source / "fresh")
        for f in 0..<3 { try FS.writeFile(sandbox.source / "fresh/x\(f)", "fresh \(f)\n") }
        try FS.unlink(sandbox.source / "link0")
        try FS.symlink(target: bytes("fresh/x0"), at: sandbox.source / "link0")
        try FS.rename(sandbox.source / "d15", sandbox.source / "d15-renamed")
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "store damage: live changes")
        // The records follow the mirror: wait until they describe every source file.
        var missing: [String] = []
        let recorded = try await eventually(timeout: .seconds(20)) {
            missing = try Self.sourceFilesWithoutMatchingRecord(sandbox)
            return missing.isEmpty
        }
        try #require(recorded, "records never caught up: \(missing.prefix(10))")
        agent.killNow()
        let snapshot = try FS.readFile(sandbox.state / "records.snapshot")
        let log = try FS.readFile(sandbox.state / "records.log")
        try #require(log.count > 100, "records.log holds no frames (\(log.count) bytes)")
        return (snapshot, log)
    }

    /// The inode of every entry below `root`.
    static func inodes(_ root: [UInt8]) throws -> [[UInt8]: UInt64] {
        var map: [[UInt8]: UInt64] = [:]
        try CrashTests.walk(root) { path, _, info in map[path] = info.inode }
        return map
    }

    /// Source regular files and links the store has no record for, or an outdated one.
    static func sourceFilesWithoutMatchingRecord(_ sandbox: Sandbox) throws -> [String] {
        let records = try JournalBookmarkStore(directory: sandbox.state, readOnly: true).load().table
        var missing: [String] = []
        try CrashTests.walk(sandbox.source) { path, _, info in
            guard info.kind == .regular || info.kind == .symlink else { return }
            guard let record = records[RelativePath(bytes: path)], record.inode == info.inode, record.size == UInt64(info.size),
                  record.mtime.seconds == Int64(info.mtimeSeconds), record.mtime.nanoseconds == Int64(info.mtimeNanoseconds),
                  record.mode == info.permissions || info.kind == .symlink else {
                missing.append(ByteEscaping.escape(path))
                return
            }
        }
        return missing
    }
}
