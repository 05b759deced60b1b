import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

/// Power cuts on the built binary, the way ALICE (OSDI 2014) finds them: record what
/// `keepsync` does to the mirror and the state directory (`strace -f -y -xx`), then build
/// the states a power cut could leave under the SPEC's model (only what fsync, fdatasync
/// or syncfs covered survives; anything else may persist in any subset), materialize each
/// on disk and check it:
/// - I2: every file at a final name in the mirror is a complete copy of some version;
/// - I6: the store loads (the product's own loader);
/// - I5: no record is trusted for a mirror file that lost what it describes (its
///   inode is at the path, yet its content, size, mode or mtime is not the record's);
/// - a restart (`keepsync sync`, the records' inode numbers mapped onto the new files)
///   converges to the source.
/// Recorded: a first `sync`, a `sync` after changes (rewrites, a directory renamed,
/// deletions), and `run` through a burst of files and of links with long targets (their
/// records outgrow the log's 1 MiB allowance: a background compaction),
/// live rewrites, and its stop (a compaction).
@Suite(.serialized, .offThePool)
struct PowerCutTests {
    /// Crash states required over the three recordings.
    static let requiredStates = 200

    @Test func everyStateAPowerCutCanLeaveHasCompleteFilesTrueRecordsAndConverges() async throws {
        let strace = try SyscallCrashTests.requireProgram("strace", package: "strace")
        let sandbox = try Sandbox()
        let seed = ProcessInfo.processInfo.environment["KEEPSYNC_POWERCUT_SEED"].flatMap(UInt64.init)
            ?? UInt64(time(nil))
        print("PowerCutTests: seed \(seed) (KEEPSYNC_POWERCUT_SEED replays it)")
        var rng = SplitMix64(seed: seed)
        let versions = Versions()
        var totals = PowerCutTally()

        try totals.add(Self.recordTwoSyncs(sandbox, mirror: sandbox.mirror, strace: strace, versions: versions, rng: &rng))

        // 3. run: a burst of files, and of links whose 4 KB targets outgrow the log's 1 MiB
        // (a background compaction), live rewrites, then a stop (a compaction).
        let live = try await Recording.run(sandbox, strace: strace, label: "run") { agent in
            try FS.mkdirs(sandbox.source / "burst/links")
            for i in 0..<120 { try versions.write(sandbox.source / "burst/file-\(i)", seed: UInt64(10_000 + i), length: 200 + i) }
            for i in 0..<280 {
                try FS.symlink(target: bytes("\(i)-" + String(repeating: "t", count: 4000)), at: sandbox.source / "burst/links/\(i)")
            }
            try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after the burst")
            for round in 0..<3 {
                for f in 0..<8 { try versions.write(sandbox.source / "d1/f\(f)", seed: UInt64(700 + round * 10 + f), length: 2_000 + round * 10 + f) }
                try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after live rewrite \(round)")
            }
            // One file alone: a lone install (its own fsync, not a group's syncfs).
            for round in 0..<2 {
                try versions.write(sandbox.source / "lone", seed: UInt64(900 + round), length: 70_000 + round)
                try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after lone write \(round)")
            }
        }
        #expect(live.snapshotRenames >= 2, "run made \(live.snapshotRenames) compactions: no background compaction before the stop's")
        totals.add(try live.check(sandbox, versions: versions, states: 40, rng: &rng))

        print("PowerCutTests: \(totals.states) crash states from \(totals.operations) recorded operations (\(totals.cuts) cut points; kept nothing \(totals.modes[0]), everything \(totals.modes[1]), a random subset \(totals.modes[2]), renames without their data \(totals.modes[3])); \(totals.lostOperations) operations lost, \(totals.tornFiles) files torn (all at temp names), \(totals.restarts) restarts converged, \(totals.renamesChecked) installs checked right after their rename; \(totals.reusedInodes) records named a reused inode number; \(totals.violations.count) violations")
        #expect(totals.violations.isEmpty, "\(totals.violations.count) violations (seed \(seed)):\n\(totals.violations.prefix(12).joined(separator: "\n"))")
        #expect(totals.states >= Self.requiredStates && totals.restarts == totals.states,
                "\(totals.states) crash states, \(totals.restarts) restarts")
        #expect(totals.lostOperations > 0 && totals.modes.allSatisfy { $0 > 0 } && totals.renamesChecked >= 150, "the cuts lost nothing: \(totals)")
    }

    /// Records a first sync of a small tree, then a sync after changes (rewrites, a
    /// directory renamed, deletions), and checks the crash states of each.
    static func recordTwoSyncs(_ sandbox: Sandbox, mirror: [UInt8], strace: [UInt8], versions: Versions, rng: inout SplitMix64,
                               syncfsReachesMirror: Bool = true, states: (first: Int, second: Int) = (90, 80)) throws -> PowerCutTally {
        var totals = PowerCutTally()
        // 1. A first sync of a small tree.
        for d in 0..<3 {
            try FS.mkdirs(sandbox.source / "d\(d)/sub")
            for f in 0..<8 { try versions.write(sandbox.source / "d\(d)/f\(f)", seed: UInt64(d * 100 + f), length: 300 + d * 40 + f) }
            try versions.write(sandbox.source / "d\(d)/sub/deep", seed: UInt64(d), length: 900 + d)
        }
        try versions.write(sandbox.source / "big", seed: 7, length: 600_000)
        try FS.symlink(target: bytes("d0/f1"), at: sandbox.source / "link")
        try FS.setPastTimes(under: sandbox.source)
        // An empty mirror and state directory to start from (the model needs their roots).
        try FS.mkdirs(mirror)
        try FS.mkdirs(sandbox.state)
        let first = try Recording.sync(sandbox, mirror: mirror, strace: strace, label: "first sync", syncfsReachesMirror: syncfsReachesMirror)
        totals.add(try first.check(sandbox, versions: versions, states: states.first, rng: &rng))

        // 2. A sync after changes: rewrites, a directory renamed, deletions.
        for f in 0..<8 { try versions.write(sandbox.source / "d1/f\(f)", seed: UInt64(500 + f), length: 1_000 + f) }
        try versions.write(sandbox.source / "big", seed: 8, length: 610_000)
        try FS.rename(sandbox.source / "d2", sandbox.source / "d2-renamed")
        versions.renamed(sandbox.source / "d2", to: sandbox.source / "d2-renamed")
        for f in 0..<3 { try FS.unlink(sandbox.source / "d0/f\(f + 4)") }
        let second = try Recording.sync(sandbox, mirror: mirror, strace: strace, label: "sync after changes", syncfsReachesMirror: syncfsReachesMirror)
        totals.add(try second.check(sandbox, versions: versions, states: states.second, rng: &rng))

        return totals
    }

    /// The same states on a mirror that syncfs does not reach: a FUSE file system
    /// (bindfs, a pass-through that holds everything a local disk does), where a syncfs of
    /// the mirror counts for nothing and each entry must be fsynced itself before a record
    /// claims it (SPEC "Mirrors on file systems that hold less").
    @Test(.enabled(if: LoopMount.available, "needs root, /dev/fuse and loop devices"))
    func onAFuseMirrorEveryStateAPowerCutCanLeaveHasCompleteFilesTrueRecordsAndConverges() throws {
        let strace = try SyscallCrashTests.requireProgram("strace", package: "strace")
        let bindfs = try SyscallCrashTests.requireProgram("bindfs", package: "bindfs")
        let sandbox = try Sandbox()
        let mount = try ScratchDirectory.make(prefix: "keepsync-bindfs")
        try FS.mkdirs(mount / "backing")
        try FS.mkdirs(mount / "mnt")
        _ = bindfs
        try LoopMount.run("bindfs", [LoopMount.text(mount / "backing"), LoopMount.text(mount / "mnt")])
        defer {
            LoopMount.runQuietly("umount", ["-l", LoopMount.text(mount / "mnt")])
            if !LoopMount.isMountPoint(mount / "mnt") { try? ScratchDirectory.removeTree(mount) }
        }
        try #require(eventuallyBlocking(timeout: .seconds(10)) { LoopMount.isMountPoint(mount / "mnt") }, "bindfs did not mount")
        let mirror = mount / "mnt/mirror"
        try FS.mkdirs(mirror)
        try FS.mkdirs(sandbox.state)
        let seed = ProcessInfo.processInfo.environment["KEEPSYNC_POWERCUT_SEED"].flatMap(UInt64.init) ?? UInt64(time(nil))
        print("PowerCutTests (FUSE): seed \(seed) (KEEPSYNC_POWERCUT_SEED replays it)")
        var rng = SplitMix64(seed: seed)
        let totals = try Self.recordTwoSyncs(sandbox, mirror: mirror, strace: strace, versions: Versions(), rng: &rng,
                                             syncfsReachesMirror: false, states: (60, 50))
        print("PowerCutTests (FUSE): \(totals.states) crash states from \(totals.operations) recorded operations; \(totals.entryFsyncs) fsyncs of mirror entries, \(totals.mirrorSyncfs) syncfs of the mirror; \(totals.lostOperations) operations lost, \(totals.durableChecked) records checked across cuts, \(totals.restarts) restarts converged; \(totals.violations.count) violations")
        #expect(totals.violations.isEmpty, "\(totals.violations.count) violations (seed \(seed)):\n\(totals.violations.prefix(12).joined(separator: "\n"))")
        #expect(totals.states >= 110 && totals.restarts == totals.states, "\(totals.states) crash states, \(totals.restarts) restarts")
        #expect(totals.mirrorSyncfs == 0 && totals.entryFsyncs >= 40 && totals.lostOperations > 0 && totals.durableChecked > 0, "\(totals)")
    }
}

// MARK: - What the test wrote

/// Every version of every source file the test wrote, by path and length (each length is
/// unique per path, so a copy's length names the version it copied).
final class Versions {
    var byPath: [[UInt8]: [Int: [UInt8]]] = [:]
    var all: Set<[UInt8]> = []

    func write(_ path: [UInt8], seed: UInt64, length: Int) throws {
        let content = FS.pattern(count: length, seed: seed)
        precondition(byPath[path]?[length] == nil, "two versions of one length")
        byPath[path, default: [:]][length] = content
        all.insert(content)
        if FS.exists(path) { try FS.overwrite(path, content) } else { try FS.writeFile(path, content) }
    }

    func renamed(_ from: [UInt8], to: [UInt8]) {
        for (path, list) in byPath where path.starts(with: from + [0x2F]) {
            byPath[to + path.dropFirst(from.count), default: [:]].merge(list) { a, _ in a }
        }
    }

    func content(of path: [UInt8], length: Int) -> [UInt8]? { byPath[path]?[length] }
}

struct PowerCutTally: CustomStringConvertible {
    var states = 0, cuts = 0, operations = 0, lostOperations = 0, tornFiles = 0, restarts = 0, renamesChecked = 0
    var durableChecked = 0, entryFsyncs = 0, mirrorSyncfs = 0, reusedInodes = 0
    var modes = [0, 0, 0, 0]
    var violations: [String] = []

    mutating func add(_ o: PowerCutTally) {
        states += o.states; cuts += o.cuts; operations += o.operations; lostOperations += o.lostOperations
        tornFiles += o.tornFiles; restarts += o.restarts; violations += o.violations; renamesChecked += o.renamesChecked
        durableChecked += o.durableChecked; entryFsyncs += o.entryFsyncs; mirrorSyncfs += o.mirrorSyncfs
        reusedInodes += o.reusedInodes
        for i in modes.indices { modes[i] += o.modes[i] }
    }

    var description: String { "states \(states), cuts \(cuts), lost \(lostOperations), modes \(modes), installs checked \(renamesChecked)" }
}

// MARK: - A recording

/// A snapshot of the mirror and the state directory, the syscalls made from it, and the
/// source as it stands after them.
struct Recording {
    let label: String
    let start: FileModel
    let operations: [FileModel.Operation]
    /// False on FUSE: a syncfs of the mirror makes nothing durable there.
    var syncfsReachesMirror = true
    /// Where each crash state's mirror is written (on the recording's file system), when
    /// not in the sandbox.
    var cutMirrorParent: [UInt8]?
    /// More options for the recorded command and each restart (`--keep-versions 30d`).
    var options: [[UInt8]] = []
    /// Mirror paths the source does not hold (the versions directory): not compared.
    var unmirrored: [[UInt8]] {
        options.contains(Array("--keep-versions".utf8)) ? [Array(VersionSettings.defaultDirectoryName.utf8)] : []
    }
    var snapshotRenames: Int { operations.filter { if case .rename(_, _, _, let to) = $0.kind { return to == bytes("records.snapshot") }; return false }.count }

    static let traced = "openat,openat2,write,pwrite64,writev,copy_file_range,sendfile,ftruncate,fallocate,fsync,fdatasync,syncfs,"
        + "rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,rmdir,symlinkat,linkat,fchmod,fchmodat,chmod,utimensat,statx,newfstatat"

    static func straceArguments(_ log: [UInt8], _ sandbox: Sandbox, _ command: String, mirror: [UInt8]? = nil,
                                options: [[UInt8]] = []) -> [[UInt8]] {
        let paths: [any CommandArgument] = ["--source", sandbox.source, "--mirror", mirror ?? sandbox.mirror, "--state", sandbox.state]
        return ["-f", "-y", "-v", "-xx", "-qq", "-s", "8388608", "-o", String(decoding: log, as: UTF8.self), "-e", "trace=\(traced)",
                String(decoding: sandbox.binary, as: UTF8.self), command].map { Array($0.utf8) } + paths.map(\.argumentBytes) + options
    }

    static func sync(_ sandbox: Sandbox, mirror: [UInt8], strace: [UInt8], label: String, syncfsReachesMirror: Bool = true,
                     options: [[UInt8]] = []) throws -> Recording {
        let start = try FileModel(mirror: mirror, state: sandbox.state)
        let log = sandbox.root / "trace-\(label.count)"
        let result = try ChildProcess.run(strace, arguments: straceArguments(log, sandbox, "sync", mirror: mirror, options: options),
                                          environment: sandbox.environment, timeout: .seconds(120))
        try #require(result.status == 0, "\(label): \(result)")
        var recording = Recording(label: label, start: start, operations: try start.operations(fromTrace: FS.readFile(log)),
                                  syncfsReachesMirror: syncfsReachesMirror,
                                  cutMirrorParent: syncfsReachesMirror ? nil : FS.dirname(FS.realpath(mirror)) / "cut")
        recording.options = options
        try #require(CrashTests.treeDifferences(sandbox.source, mirror, except: recording.unmirrored).isEmpty, "\(label) did not converge")
        return recording
    }

    static func run(_ sandbox: Sandbox, strace: [UInt8], label: String, _ workload: (RunCommandTests.Agent) async throws -> Void) async throws -> Recording {
        let began = ContinuousClock.now
        let start = try FileModel(mirror: sandbox.mirror, state: sandbox.state)
        let log = sandbox.root / "trace-run"
        let tracer = try RunCommandTests.Agent(binary: strace, arguments: straceArguments(log, sandbox, "run"),
                                               environment: sandbox.environment, stderrPath: sandbox.root / "run.stderr")
        defer { tracer.killNow() }
        let watching = await eventually(timeout: .seconds(60)) {
            RunCommandTests.status(sandbox)?["state"] as? String == "watching" || tracer.poll() != nil
        }
        try #require(watching && tracer.poll() == nil, "run under strace is not watching: \(tracer.stderrText)")
        try await workload(tracer)
        // Wait for the background compaction of the burst's long log before stopping.
        let compacted = await eventually(timeout: .seconds(60)) {
            let log = FS.lstat(sandbox.state / "records.log")?.size ?? 0
            return log < 1 << 20
        }
        print("PowerCutTests: workload done in \(ContinuousClock.now - began)")
        #expect(compacted, "records.log never compacted in the background: \(FS.lstat(sandbox.state / "records.log")?.size ?? 0) bytes")
        let pid = try #require((RunCommandTests.status(sandbox)?["pid"] as? NSNumber)?.int32Value)
        kill(pid, SIGTERM)
        let ended = try await tracer.waitForExit(timeout: .seconds(60))
        try #require(ended == 0, "run under strace ended with \(ended.map(String.init) ?? "nothing"): \(tracer.stderrText)")
        try #require(CrashTests.treeDifferences(sandbox.source, sandbox.mirror).isEmpty, "\(label) did not converge")
        let recorded = ContinuousClock.now
        let recording = Recording(label: label, start: start, operations: try start.operations(fromTrace: FS.readFile(log)))
        print("PowerCutTests: \(label) recorded in \(recorded - began), its trace (\(FS.lstat(log)?.size ?? 0) bytes) read in \(ContinuousClock.now - recorded)")
        return recording
    }

    /// Durable, for the store: once the product moved past a records.log frame (wrote the
    /// next, or ended), a power cut cannot take it back; once it moved past a rename in the
    /// state directory (made the next), likewise; a file renamed into the store's place has
    /// its data durable first. A cut between the two would lose what was recorded.
    func storeOrderViolations(_ coveredAt: [Int]) -> [String] {
        var out: [String] = []
        let store = operations.indices.filter { operations[$0].storeFile != nil }
        for (n, i) in store.enumerated() {
            let op = operations[i]
            let isRename = op.isRename
            let next = store[(n + 1)...].first { operations[$0].call != op.call && operations[$0].isRename == isRename }
            if coveredAt[i] >= (next ?? Int.max) {
                out.append("\(label): Durable: \(isRename ? "the rename to" : "a frame of") \(ByteEscaping.escape(op.storeFile!)) (operation \(i)) is not durable when the next \(next.map { "comes (operation \($0))" } ?? "never does: the process ended")")
            }
            if case .rename(let dir, let from, _, _) = op.kind, let source = start.lookupAt(i, dir: dir, name: from, in: operations) {
                let unsynced = operations[..<i].indices.filter { j in
                    if case .write(let node, _, _) = operations[j].kind { return node == source && coveredAt[j] >= i }
                    return false
                }
                if let first = unsynced.first {
                    out.append("\(label): Durable: \(ByteEscaping.escape(op.storeFile!)) renamed into place (operation \(i)) before its data (operation \(first)) was durable")
                }
            }
        }
        return out
    }

    /// Builds `states` crash states at cut points spread over the recording, checks each.
    /// `also` checks more of each crash state (the cut mirror, the records it loads, the
    /// cut's mode): its violations join the tally's.
    func check(_ sandbox: Sandbox, versions: Versions, states: Int, rng: inout SplitMix64,
               also: (_ model: FileModel, _ loaded: RecordSet, _ mode: Int, _ where: String) -> [String] = { _, _, _, _ in [] }) throws
        -> PowerCutTally {
        let began = ContinuousClock.now
        defer { print("PowerCutTests: \(label): \(operations.count) operations, \(states) states checked in \(ContinuousClock.now - began)") }
        var tally = PowerCutTally()
        tally.operations = operations.count
        let coveredAt = FileModel.coverage(operations, syncfsReachesMirror: syncfsReachesMirror)
        for op in operations where op.fs == 0 {
            switch op.kind {
            case .fsync: tally.entryFsyncs += 1
            case .syncfs: tally.mirrorSyncfs += 1
            default: break
            }
        }
        // Cut right before and after each barrier, and anywhere.
        let barriers = operations.indices.filter { operations[$0].isBarrier }
        var cuts: [Int] = []
        for i in 0..<states {
            switch i % 3 {
            case 0 where !barriers.isEmpty: cuts.append(barriers[rng.below(barriers.count)])
            case 1 where !barriers.isEmpty: cuts.append(barriers[rng.below(barriers.count)] + 1)
            default: cuts.append(rng.below(operations.count + 1))
            }
        }
        tally.cuts = Set(cuts).count
        tally.violations += storeOrderViolations(coveredAt)
        // I2 at the worst instant of every install: right after its rename, with every
        // entry kept and every data write not yet durable lost.
        for (i, op) in operations.enumerated() {
            guard op.isRename, let (path, node) = op.installed else { continue }
            tally.renamesChecked += 1
            if let j = operations[..<i].indices.first(where: { j in
                if case .write(let n, _, _) = operations[j].kind { return n == node && coveredAt[j] > i }
                return false
            }) {
                tally.violations.append("\(label): I2: \(ByteEscaping.escape(path)) renamed into place (operation \(i)) while its data (operation \(j)) was not durable")
            }
        }
        // ext4 hands a freed inode number to the next file: a number two objects had in
        // the recording names neither for certain, and a record naming it is checked by
        // what a restart does with it (the product trusts a record only when kind, size
        // and mtime agree too), not by the number.
        // (Two objects that had the number before the cut: a record may name either.)
        var startOwners: [UInt64: Set<Int>] = [:]
        for (id, node) in start.nodes where node.originalInode != 0 { startOwners[node.originalInode, default: []].insert(id) }
        func reusedBefore(_ cut: Int) -> Set<UInt64> {
            var owners = startOwners
            for op in operations[..<cut] { if case .inode(let id, let number) = op.kind { owners[number, default: []].insert(id) } }
            return Set(owners.filter { $0.value.count > 1 }.keys)
        }
        var installs: [[UInt8]: [Int]] = [:]
        for (i, op) in operations.enumerated() { if let installed = op.installed { installs[installed.path, default: []].append(i) } }
        for (n, cut) in cuts.enumerated() {
            let mode = n % 4
            tally.modes[mode] += 1
            var model = start
            var lost = 0
            var kept = [Bool](repeating: false, count: cut)
            for i in 0..<cut {
                let op = operations[i]
                if case .inode = op.kind { model.apply(op); continue }
                let covered = coveredAt[i] < cut
                let keep: Bool
                switch mode {
                case 0: keep = covered
                case 1: keep = true
                case 2: keep = covered || rng.below(2) == 0
                default: keep = covered || !op.isData
                }
                if keep { model.apply(op); kept[i] = true } else { lost += 1 }
            }
            tally.lostOperations += lost
            tally.states += 1
            let where_ = "\(label), cut \(cut)/\(operations.count) mode \(mode)"
            let dir = sandbox.root / "cut"
            try? ScratchDirectory.removeTree(dir)
            // On the recording's kind of file system: the records name it.
            let mirror = (cutMirrorParent ?? dir) / "M", state = dir / "T"
            try? ScratchDirectory.removeTree(mirror)
            let inodes = try model.materialize(mirror: mirror, state: state, versions: versions)
            // I2
            for (path, file) in model.mirrorFiles() {
                let content = model.content(of: file, versions: versions)
                // keepsync's temp names, and what is below one (the mirror probe's directory).
                if path.contains(where: { $0.starts(with: Array(".keepsync-tmp-".utf8)) }) {
                    if content.map({ !versions.all.contains($0) }) ?? true { tally.tornFiles += 1 }
                    continue
                }
                if content.map({ !versions.all.contains($0) }) ?? true {
                    tally.violations.append("\(where_): I2: \(ByteEscaping.escape(Array(path.joined(separator: [0x2F])))) is not a complete version (\(content?.count ?? -1) bytes)")
                }
            }
            // I6
            let store = try JournalBookmarkStore(directory: state)
            let loaded: RecordSet
            do { loaded = try store.load() } catch {
                tally.violations.append("\(where_): I6: the store does not load: \(error)")
                continue
            }
            tally.violations += also(model, loaded, mode, where_)
            // I5, and the records mapped onto the materialized inodes for the restart.
            var mapped = loaded
            let reused = reusedBefore(cut)
            for (path, record) in loaded.table where record.kind == .regular {
                // A record that names no mirror inode (FUSE: inode numbers do not survive a
                // remount, so records keep none) says nothing of which install it describes;
                // the model's 0 is "not known", not a number: judged by path below.
                let named = record.mirrorInode != 0
                let certain = named && !reused.contains(record.mirrorInode)
                if named && !certain { tally.reusedInodes += 1 }
                // Durable: the install of the inode it names was not undone by the cut.
                if certain, let i = installs[path.bytes]?.last(where: { $0 < cut && model.nodes[operations[$0].installed!.node]?.originalInode == record.mirrorInode }),
                   !kept[i] {
                    tally.violations.append("\(where_): Durable: \(path.escaped) is recorded as mirror inode \(record.mirrorInode), whose install (operation \(i)) the power cut undid")
                }
                let components = path.components
                var moved = record
                moved.mirrorInode = inodes[record.mirrorInode] ?? (UInt64.max - record.mirrorInode)
                mapped.table[path] = moved
                guard certain, let id = model.lookup(components, in: model.mirrorRoot), model.nodes[id]?.originalInode == record.mirrorInode,
                      let node = model.nodes[id] else { continue }
                let content = model.content(of: id, versions: versions)
                let wanted = (content?.count).map { UInt64($0) == record.size } ?? false
                if !wanted || content.map({ !versions.all.contains($0) }) ?? true || node.mtime != record.mtime
                    || node.mode & 0o7777 != record.mode & 0o7777 {
                    tally.violations.append("\(where_): I5: the record of \(path.escaped) is trusted for mirror inode \(record.mirrorInode), which holds \(content?.count ?? -1) bytes, mode \(String(node.mode, radix: 8)), mtime \(node.mtime) (the record: \(record.size) bytes, mode \(String(record.mode, radix: 8)), mtime \(record.mtime))")
                }
            }
            // Durable, by path (where records name no mirror inode, as on FUSE, too): a record
            // that was true of the mirror right before the cut is true after it.
            var live = start
            for op in operations[..<cut] { live.apply(op) }
            for (path, record) in loaded.table where !path.isRoot {
                let kind: FileModel.Kind
                switch record.kind {
                case .regular: kind = .file
                case .directory: kind = .directory
                case .symlink: kind = .symlink
                default: continue
                }
                guard let was = live.lookup(path.components, in: live.mirrorRoot), let wasNode = live.nodes[was], wasNode.kind == kind,
                      kind != .file || wasNode.size == Int(record.size) else { continue }
                tally.durableChecked += 1
                let now = model.lookup(path.components, in: model.mirrorRoot).flatMap { model.nodes[$0] }
                if now?.kind != kind || (kind == .file && now?.size != Int(record.size)) {
                    tally.violations.append("\(where_): Durable: \(path.escaped) is recorded (\(record.kind), \(record.size) bytes) and was in the mirror before the cut; after it the mirror holds \(now.map { "\($0.kind), \($0.size) bytes" } ?? "nothing")")
                }
            }
            // The mirror root survives a power cut as itself: its recorded identity follows
            // the materialized root, as the records' inodes follow the materialized files.
            if var root = mapped.mirror, let now = FS.lstat(mirror) {
                root.identity = FileIdentity(device: now.device, inode: now.inode)
                mapped.mirror = root
            }
            try store.compact(mapped)
            // A restart converges.
            let result = try ChildProcess.run(sandbox.binary, arguments: (["sync", "--source", sandbox.source, "--mirror", mirror, "--state", state] as [any CommandArgument]).map(\.argumentBytes) + options,
                                              environment: sandbox.environment, timeout: .seconds(60))
            let differences = CrashTests.treeDifferences(sandbox.source, mirror, limit: 5, except: unmirrored)
            if result.status != 0 || !differences.isEmpty {
                tally.violations.append("\(where_): the restart did not converge (exit \(result.status)): \(differences) \(result.errorLines.prefix(3))")
            } else {
                tally.restarts += 1
            }
        }
        return tally
    }
}

// MARK: - The file model

/// The mirror and the state directory as inodes and directory entries, built from disk and
/// changed by recorded operations; what a crash state keeps is replayed onto a copy.
struct FileModel {
    enum Kind { case file, directory, symlink }

    struct Node {
        var kind: Kind
        var mode: UInt32
        var mtime: Timespec
        var target: [UInt8] = []
        /// Content written, in order, as (offset, bytes) or a copy resolved at the end.
        var size = 0
        var writes: [(offset: Int, payload: Payload)] = []
        /// The inode number it had on the recorded disk (for the records' mirrorInode).
        var originalInode: UInt64 = 0
        var children: [[UInt8]: Int] = [:]
    }

    enum Payload {
        case bytes([UInt8])
        /// `length` bytes at `offset` of the version of `source` that was `total` long.
        case copy(source: [UInt8], offset: Int, length: Int, total: Int)
    }

    struct Operation {
        enum Kind {
            case create(dir: Int, name: [UInt8], node: Int, as: Node)
            case link(dir: Int, name: [UInt8], node: Int)
            case rename(fromDir: Int, from: [UInt8], toDir: Int, to: [UInt8])
            case exchange(fromDir: Int, from: [UInt8], toDir: Int, to: [UInt8])
            case remove(dir: Int, name: [UInt8])
            case write(node: Int, offset: Int, payload: Payload)
            case truncate(node: Int, size: Int)
            case chmod(node: Int, mode: UInt32)
            case mtime(node: Int, Timespec)
            case fsync(node: Int, dataOnly: Bool)
            case syncfs(root: Int)
            /// Not a change: the inode number the disk gave it (from a stat).
            case inode(node: Int, number: UInt64)
        }
        var kind: Kind
        /// 0: the mirror's file system, 1: the state directory's.
        var fs: Int
        /// The traced call it came from (a large write is split into pieces).
        var call = 0
        /// The store's file it changes: "records.log", or a rename's target in the state directory.
        var storeFile: [UInt8]?
        /// A regular file it puts at a mirror path (relative), by rename, create or link.
        var installed: (path: [UInt8], node: Int)?
        var isBarrier: Bool { switch kind { case .fsync, .syncfs: true; default: false } }
        var isData: Bool { switch kind { case .write, .truncate: true; default: false } }
        var isRename: Bool { if case .rename = kind { true } else { false } }
    }

    var nodes: [Int: Node] = [:]
    var nextID = 0
    var mirrorRoot = 0, stateRoot = 0
    var mirrorPath: [UInt8] = [], statePath: [UInt8] = []

    init(mirror: [UInt8], state: [UInt8]) throws {
        mirrorPath = FS.realpath(mirror)
        statePath = FS.realpath(state)
        mirrorRoot = try load(mirrorPath)
        stateRoot = try load(statePath)
    }

    private mutating func load(_ path: [UInt8]) throws -> Int {
        let info = try #require(FS.lstat(path), "\(ByteEscaping.escape(path)) is missing")
        let id = newID()
        var node = Node(kind: .directory, mode: info.permissions, mtime: Timespec(seconds: Int64(info.mtimeSeconds), nanoseconds: Int64(info.mtimeNanoseconds)))
        node.originalInode = info.inode
        switch info.kind {
        case .directory:
            for name in try FS.list(path) { node.children[name] = try load(path / name) }
        case .symlink:
            node.kind = .symlink
            node.target = try FS.readlink(path)
        default:
            node.kind = .file
            let content = try FS.readFile(path)
            node.size = content.count
            node.writes = [(0, .bytes(content))]
        }
        nodes[id] = node
        return id
    }

    mutating func newID() -> Int { nextID += 1; return nextID }

    /// The inode at `dir`/`name` just before operation `i` of `ops`, everything kept.
    func lookupAt(_ i: Int, dir: Int, name: [UInt8], in ops: [Operation]) -> Int? {
        var model = self
        for op in ops[..<i] { model.apply(op) }
        return model.nodes[dir]?.children[name]
    }

    /// The path of a mirror directory, relative to the mirror.
    func relativePath(ofDirectory id: Int) -> [UInt8]? {
        if id == mirrorRoot { return [] }
        var queue: [(Int, [UInt8])] = [(mirrorRoot, [])]
        while let (dir, path) = queue.popLast() {
            for (name, child) in nodes[dir]?.children ?? [:] where nodes[child]?.kind == .directory {
                let p = path.isEmpty ? name : path + [0x2F] + name
                if child == id { return p }
                queue.append((child, p))
            }
        }
        return nil
    }

    func lookup(_ components: [[UInt8]], in root: Int) -> Int? {
        var id = root
        for c in components {
            guard let next = nodes[id]?.children[c] else { return nil }
            id = next
        }
        return id
    }

    /// The (parent, name) of an absolute path in the mirror or the state directory.
    func place(_ path: [UInt8]) -> (dir: Int, name: [UInt8])? {
        for (rootPath, root) in [(mirrorPath, mirrorRoot), (statePath, stateRoot)] where path.starts(with: rootPath + [0x2F]) {
            let parts = path.dropFirst(rootPath.count + 1).split(separator: 0x2F, omittingEmptySubsequences: true).map(Array.init)
            guard let name = parts.last, let dir = lookup(Array(parts.dropLast()), in: root) else { return nil }
            return (dir, name)
        }
        return nil
    }

    func node(at path: [UInt8]) -> Int? {
        if path == mirrorPath { return mirrorRoot }
        if path == statePath { return stateRoot }
        guard let (dir, name) = place(path) else { return nil }
        return nodes[dir]?.children[name]
    }

    /// Applies one operation; one whose entry is not there (a crash state lost what it
    /// needed) does nothing.
    mutating func apply(_ op: Operation) {
        switch op.kind {
        case .create(let dir, let name, let id, let node):
            guard nodes[dir] != nil else { return }
            if nodes[id] == nil { nodes[id] = node }
            nodes[dir]!.children[name] = id
        case .link(let dir, let name, let id):
            guard nodes[dir] != nil, nodes[id] != nil else { return }
            nodes[dir]!.children[name] = id
        case .rename(let fromDir, let from, let toDir, let to):
            guard let id = nodes[fromDir]?.children[from], nodes[toDir] != nil else { return }
            nodes[fromDir]!.children[from] = nil
            nodes[toDir]!.children[to] = id
        case .exchange(let fromDir, let from, let toDir, let to):
            guard let a = nodes[fromDir]?.children[from], let b = nodes[toDir]?.children[to] else { return }
            nodes[fromDir]!.children[from] = b
            nodes[toDir]!.children[to] = a
        case .remove(let dir, let name):
            nodes[dir]?.children[name] = nil
        case .write(let id, let offset, let payload):
            guard nodes[id] != nil else { return }
            let length: Int
            switch payload {
            case .bytes(let b): length = b.count
            case .copy(_, _, let n, _): length = n
            }
            nodes[id]!.writes.append((offset, payload))
            nodes[id]!.size = max(nodes[id]!.size, offset + length)
        case .truncate(let id, let size):
            guard nodes[id] != nil else { return }
            nodes[id]!.size = size
            nodes[id]!.writes.append((size, .bytes([])))
        case .chmod(let id, let mode):
            nodes[id]?.mode = mode
        case .mtime(let id, let t):
            nodes[id]?.mtime = t
        case .inode(let id, let number):
            nodes[id]?.originalInode = number
        case .fsync, .syncfs:
            break
        }
    }

    /// The file's bytes, or nil when a copy names a version the test never wrote.
    func content(of id: Int, versions: Versions) -> [UInt8]? {
        guard let node = nodes[id] else { return nil }
        var bytes = [UInt8]()
        for (offset, payload) in node.writes {
            switch payload {
            case .bytes(let b):
                if b.isEmpty {
                    // A truncation to `offset`.
                    if bytes.count > offset { bytes.removeLast(bytes.count - offset) } else { bytes += [UInt8](repeating: 0, count: offset - bytes.count) }
                    continue
                }
                if bytes.count < offset + b.count { bytes += [UInt8](repeating: 0, count: offset + b.count - bytes.count) }
                bytes.replaceSubrange(offset..<offset + b.count, with: b)
            case .copy(let source, let from, let length, let total):
                guard let version = versions.content(of: source, length: total), from + length <= version.count else { return nil }
                if bytes.count < offset + length { bytes += [UInt8](repeating: 0, count: offset + length - bytes.count) }
                bytes.replaceSubrange(offset..<offset + length, with: version[from..<from + length])
            }
        }
        if bytes.count < node.size { bytes += [UInt8](repeating: 0, count: node.size - bytes.count) }
        return bytes
    }

    /// Every regular file reachable in the mirror, by path components.
    func mirrorFiles() -> [([[UInt8]], Int)] {
        var out: [([[UInt8]], Int)] = []
        func visit(_ id: Int, _ path: [[UInt8]]) {
            guard let node = nodes[id] else { return }
            switch node.kind {
            case .file: out.append((path, id))
            case .directory: for (name, child) in node.children { visit(child, path + [name]) }
            case .symlink: break
            }
        }
        visit(mirrorRoot, [])
        return out
    }

    /// Writes the mirror and the state directory out; returns recorded inode numbers → new.
    func materialize(mirror: [UInt8], state: [UInt8], versions: Versions) throws -> [UInt64: UInt64] {
        var map: [UInt64: UInt64] = [:]
        var made: [Int: [UInt8]] = [:]
        var directories: [([UInt8], Node, Int)] = []
        func write(_ id: Int, _ path: [UInt8], depth: Int) throws {
            guard let node = nodes[id] else { return }
            switch node.kind {
            case .directory:
                try FS.mkdirs(path)
                for (name, child) in node.children { try write(child, path / name, depth: depth + 1) }
                directories.append((path, node, depth))
            case .symlink:
                try FS.symlink(target: node.target, at: path)
            case .file:
                if let first = made[id] {
                    try FS.check(Glibc.link(ByteEscaping.escape(first), ByteEscaping.escape(path)), "link", path)
                    return
                }
                try FS.writeFile(path, content(of: id, versions: versions) ?? [], mode: mode_t(node.mode & 0o7777))
                try FS.chmod(path, mode_t(node.mode & 0o7777))
                try FS.setTimes(path, seconds: Int(node.mtime.seconds), nanoseconds: Int(node.mtime.nanoseconds))
                made[id] = path
                if node.originalInode != 0, let info = FS.lstat(path) { map[node.originalInode] = info.inode }
            }
        }
        try write(mirrorRoot, mirror, depth: 0)
        try write(stateRoot, state, depth: 0)
        for (path, node, _) in directories.sorted(by: { $0.2 > $1.2 }) {
            try FS.chmod(path, mode_t(node.mode & 0o7777))
            try FS.setTimes(path, seconds: Int(node.mtime.seconds), nanoseconds: Int(node.mtime.nanoseconds))
        }
        return map
    }

    /// For each operation, the index of the first barrier after it that makes it durable
    /// (Int.max when none): an fsync of its file (fdatasync: its data only), an fsync of
    /// the directory an entry changed in (both, for a rename), a syncfs of its tree.
    static func coverage(_ ops: [Operation], syncfsReachesMirror: Bool = true) -> [Int] {
        var covered = [Int](repeating: Int.max, count: ops.count)
        // Operations not covered yet, by what would cover them.
        var byNode: [Int: [Int]] = [:], byDirectory: [Int: [Int]] = [:], byFS: [Int: [Int]] = [:]
        var needsBoth: [Int: Int] = [:]
        for (i, op) in ops.enumerated() {
            switch op.kind {
            case .create(let dir, _, _, _), .link(let dir, _, _), .remove(let dir, _):
                byDirectory[dir, default: []].append(i)
                byFS[op.fs, default: []].append(i)
            case .rename(let a, _, let b, _), .exchange(let a, _, let b, _):
                byDirectory[a, default: []].append(i)
                if a != b { byDirectory[b, default: []].append(i); needsBoth[i] = 2 }
                byFS[op.fs, default: []].append(i)
            case .write(let node, _, _), .truncate(let node, _), .chmod(let node, _), .mtime(let node, _):
                byNode[node, default: []].append(i)
                byFS[op.fs, default: []].append(i)
            case .fsync(let node, let dataOnly):
                var rest: [Int] = []
                for j in byNode[node] ?? [] {
                    if dataOnly && !ops[j].isData { rest.append(j) } else { covered[j] = min(covered[j], i) }
                }
                byNode[node] = rest
                if !dataOnly {
                    for j in byDirectory[node] ?? [] {
                        if let n = needsBoth[j], n > 1 { needsBoth[j] = n - 1; continue }
                        covered[j] = min(covered[j], i)
                    }
                    byDirectory[node] = nil
                }
            case .syncfs where op.fs == 0 && !syncfsReachesMirror:
                break
            case .syncfs:
                for j in byFS[op.fs] ?? [] { covered[j] = min(covered[j], i) }
                byFS[op.fs] = nil
            case .inode:
                covered[i] = i
            }
        }
        return covered
    }
}

// MARK: - Reading the trace

extension FileModel {
    /// The operations an `strace -f -y -v -xx` log made on the mirror and the state
    /// directory, in order, with ids from this model (a copy of it follows them).
    func operations(fromTrace log: [UInt8]) throws -> [Operation] {
        var live = self
        var ops: [Operation] = []
        var fdPaths: [[UInt8]: [UInt8]] = [:]
        var copied: [Int: Int] = [:]
        var callIndex = 0
        func add(_ kind: Operation.Kind, fs: Int, storeFile: [UInt8]? = nil) {
            var op = Operation(kind: kind, fs: fs, call: callIndex, storeFile: storeFile)
            if fs == 0 {
                var target: (dir: Int, name: [UInt8], node: Int?, kind: Kind?)?
                switch kind {
                case .create(let dir, let name, let node, let made): target = (dir, name, node, made.kind)
                case .link(let dir, let name, let node): target = (dir, name, node, live.nodes[node]?.kind)
                case .rename(let fromDir, let from, let toDir, let to):
                    let node = live.nodes[fromDir]?.children[from]
                    target = (toDir, to, node, node.flatMap { live.nodes[$0]?.kind })
                default: break
                }
                if let target, let node = target.node, target.kind == .file, let base = live.relativePath(ofDirectory: target.dir) {
                    op.installed = (base.isEmpty ? target.name : base + [0x2F] + target.name, node)
                }
            }
            live.apply(op)
            ops.append(op)
        }
        for call in TraceCall.calls(in: log) {
            callIndex += 1
            let a = call.arguments
            func at(_ dir: Int, _ name: Int) -> [UInt8]? {
                guard a.count > name, let n = TraceCall.string(a[name]) else { return nil }
                if n.first == 0x2F { return n }
                if n.isEmpty { return TraceCall.fdPath(a[dir]) }
                return TraceCall.fdPath(a[dir]).map { $0 + [0x2F] + n }
            }
            func fs(_ path: [UInt8]) -> Int? {
                if path == live.mirrorPath || path.starts(with: live.mirrorPath + [0x2F]) { return 0 }
                if path == live.statePath || path.starts(with: live.statePath + [0x2F]) { return 1 }
                return nil
            }
            func fdNode(_ i: Int) -> (Int, Int)? {
                guard a.count > i, let p = TraceCall.fdPath(a[i]), let f = fs(p), let id = live.node(at: p) else { return nil }
                return (id, f)
            }
            switch call.name {
            case "openat", "openat2":
                guard let path = call.returnedPath else { continue }
                fdPaths[call.returned] = path
                let flags = call.name == "openat" ? (a.count > 2 ? a[2] : []) : (a.count > 2 ? a[2] : [])
                guard let f = fs(path), flags.firstRange(of: Array("O_CREAT".utf8)) != nil || flags.firstRange(of: Array("O_TRUNC".utf8)) != nil else { continue }
                if let id = live.node(at: path) {
                    if flags.firstRange(of: Array("O_TRUNC".utf8)) != nil { add(.truncate(node: id, size: 0), fs: f) }
                } else if let (dir, name) = live.place(path) {
                    add(.create(dir: dir, name: name, node: live.newID(), as: Node(kind: .file, mode: 0o600, mtime: Timespec(seconds: 1, nanoseconds: 0))), fs: f)
                }
            case "write", "pwrite64":
                guard let (id, f) = fdNode(0), let data = TraceCall.string(a[1]), let n = Int(call.returnedText) else { continue }
                let offset = call.name == "pwrite64" ? (a.count > 3 ? Int(String(decoding: a[3], as: UTF8.self)) ?? 0 : 0) : live.nodes[id]!.size
                var piece = 0
                let journal = f == 1 && TraceCall.fdPath(a[0]).map { $0 == live.statePath + Array("/records.log".utf8) } == true
                while piece < n {
                    let end = min(n, piece + 4096)
                    add(.write(node: id, offset: offset + piece, payload: .bytes(Array(data[piece..<end]))), fs: f,
                        storeFile: journal ? Array("records.log".utf8) : nil)
                    piece = end
                }
            case "copy_file_range", "sendfile":
                let (inIndex, outIndex) = call.name == "sendfile" ? (1, 0) : (0, 2)
                guard let (id, f) = fdNode(outIndex), let source = TraceCall.fdPath(a[inIndex]), let n = Int(call.returnedText), n > 0 else { continue }
                let offset = live.nodes[id]!.size
                copied[id, default: 0] += n
                var piece = 0
                while piece < n {
                    let end = min(n, piece + 65536)
                    add(.write(node: id, offset: offset + piece, payload: .copy(source: source, offset: offset + piece, length: end - piece, total: -1)), fs: f)
                    piece = end
                }
            case "ftruncate":
                guard let (id, f) = fdNode(0), let size = Int(String(decoding: a[1], as: UTF8.self)) else { continue }
                add(.truncate(node: id, size: size), fs: f)
            case "fsync", "fdatasync":
                guard let (id, f) = fdNode(0) else { continue }
                add(.fsync(node: id, dataOnly: call.name == "fdatasync"), fs: f)
            case "syncfs":
                guard let p = TraceCall.fdPath(a[0]), let f = fs(p) else { continue }
                add(.syncfs(root: f), fs: f)
            case "rename", "renameat", "renameat2":
                let (from, to) = call.name == "rename" ? (TraceCall.string(a[0]), TraceCall.string(a[1])) : (at(0, 1), at(2, 3))
                guard let from, let to, let f = fs(to) ?? fs(from) else { continue }
                let exchange = a.count > 4 && a[4].firstRange(of: Array("RENAME_EXCHANGE".utf8)) != nil
                switch (live.place(from), live.place(to)) {
                case let ((fd, fn)?, (td, tn)?):
                    add(exchange ? .exchange(fromDir: fd, from: fn, toDir: td, to: tn) : .rename(fromDir: fd, from: fn, toDir: td, to: tn), fs: f,
                        storeFile: f == 1 && td == live.stateRoot && tn.starts(with: Array("records.".utf8)) ? tn : nil)
                case let ((fd, fn)?, nil): add(.remove(dir: fd, name: fn), fs: f)
                default: continue
                }
            case "unlink", "unlinkat", "rmdir":
                guard let path = call.name == "unlinkat" ? at(0, 1) : TraceCall.string(a[0]), let f = fs(path), let (dir, name) = live.place(path) else { continue }
                add(.remove(dir: dir, name: name), fs: f)
            case "mkdir", "mkdirat":
                guard let path = call.name == "mkdirat" ? at(0, 1) : TraceCall.string(a[0]), let f = fs(path), let (dir, name) = live.place(path) else { continue }
                let mode = UInt32(String(decoding: a[call.name == "mkdirat" ? 2 : 1], as: UTF8.self), radix: 8) ?? 0o700
                add(.create(dir: dir, name: name, node: live.newID(), as: Node(kind: .directory, mode: mode & ~0o022, mtime: Timespec(seconds: 1, nanoseconds: 0))), fs: f)
            case "symlinkat":
                guard let target = TraceCall.string(a[0]), let path = at(1, 2), let f = fs(path), let (dir, name) = live.place(path) else { continue }
                add(.create(dir: dir, name: name, node: live.newID(), as: Node(kind: .symlink, mode: 0o777, mtime: Timespec(seconds: 1, nanoseconds: 0), target: target)), fs: f)
            case "linkat":
                guard let from = at(0, 1), let to = at(2, 3), let f = fs(to), let id = live.node(at: from), let (dir, name) = live.place(to) else { continue }
                add(.link(dir: dir, name: name, node: id), fs: f)
            case "fchmod", "fchmodat", "chmod":
                var path: [UInt8]?
                var modeArg = 1
                if call.name == "fchmod" { path = TraceCall.fdPath(a[0]) } else if call.name == "fchmodat" { path = at(0, 1); modeArg = 2 } else if let p = TraceCall.string(a[0]) {
                    let proc = Array("/proc/self/fd/".utf8)
                    path = p.starts(with: proc) ? fdPaths[Array(p.dropFirst(proc.count))] : p
                }
                guard let path, let f = fs(path), let id = live.node(at: path), let mode = UInt32(String(decoding: a[modeArg], as: UTF8.self), radix: 8) else { continue }
                add(.chmod(node: id, mode: mode), fs: f)
            case "utimensat":
                guard let path = String(decoding: a[1], as: UTF8.self) == "NULL" ? TraceCall.fdPath(a[0]) : at(0, 1),
                      let f = fs(path), let id = live.node(at: path), let time = TraceCall.mtime(a[2]) else { continue }
                add(.mtime(node: id, time), fs: f)
            case "statx", "newfstatat":
                guard let path = at(0, 1), fs(path) == 0, let id = live.node(at: path), live.nodes[id]?.kind == .file,
                      let ino = TraceCall.field(call.name == "statx" ? "stx_ino=" : "st_ino=", in: a[call.name == "statx" ? 4 : 2]) else { continue }
                live.nodes[id]!.originalInode = ino
                // The starting model and the crash states learn it too: it names the inode.
                ops.append(Operation(kind: .inode(node: id, number: ino), fs: 0))
            default:
                continue
            }
        }
        // A copy's length names the version it copied.
        return ops.map { op in
            guard case .write(let id, let offset, .copy(let source, let from, let length, _)) = op.kind else { return op }
            var done = op
            done.kind = .write(node: id, offset: offset, payload: .copy(source: source, offset: from, length: length, total: copied[id] ?? 0))
            return done
        }
    }
}

/// One strace line: `name(arguments) = result`, split at top-level commas.
struct TraceCall {
    /// The calls of an `strace -f -xx` log that succeeded, in order, each whole (a call
    /// split by `<unfinished ...>` is joined with its resumption).
    static func calls(in log: [UInt8]) -> [TraceCall] {
        var unfinished: [ArraySlice<UInt8>: [UInt8]] = [:]
        var out: [TraceCall] = []
        for raw in log.split(separator: 0x0A) {
            guard let space = raw.firstIndex(of: 0x20) else { continue }
            let pid = raw[..<space]
            // The pid column is padded to five places: `8891  write(…`.
            var line = Array(raw[space...].drop { $0 == 0x20 })
            if line.ends(with: Array("<unfinished ...>".utf8)) {
                unfinished[pid] = Array(line.dropLast("<unfinished ...>".count))
                continue
            }
            if line.starts(with: Array("<... ".utf8)), let r = line.firstRange(of: Array(" resumed>".utf8)) {
                line = (unfinished.removeValue(forKey: pid) ?? []) + line[r.upperBound...]
            }
            if let call = TraceCall(line) { out.append(call) }
        }
        return out
    }

    var name: String
    var arguments: [[UInt8]]
    var returnedText: String
    var returned: [UInt8]
    var returnedPath: [UInt8]?

    init?(_ line: [UInt8]) {
        // `name(arguments) = result`; a resumed call pads before its ` = `.
        guard let open = line.firstIndex(of: 0x28), let equals = line.lastRange(of: Array(" = ".utf8)),
              let close = line[..<equals.lowerBound].lastIndex(where: { $0 != 0x20 }), line[close] == 0x29, close > open else { return nil }
        let eq = close..<equals.upperBound
        name = String(decoding: line[..<open], as: UTF8.self)
        let result = line[eq.upperBound...]
        guard let first = result.first, first != 0x2D, first != 0x3F else { return nil }
        let number = result.prefix { $0 >= 0x30 && $0 <= 0x39 }
        returned = Array(number)
        returnedText = String(decoding: number, as: UTF8.self)
        returnedPath = Self.fdPath(Array(result.prefix { $0 != 0x20 }))
        var args: [[UInt8]] = []
        var depth = 0, quoted = false, current: [UInt8] = []
        for b in line[(open + 1)..<eq.lowerBound] {
            if b == 0x22 { quoted.toggle() }
            if !quoted {
                if b == 0x28 || b == 0x5B || b == 0x7B || b == 0x3C { depth += 1 }
                if b == 0x29 || b == 0x5D || b == 0x7D || b == 0x3E { depth -= 1 }
                if b == 0x2C && depth == 0 { args.append(current); current = []; continue }
                if b == 0x20 && current.isEmpty { continue }
            }
            current.append(b)
        }
        args.append(current)
        // An unfinished call ends in a blank before its resumption.
        arguments = args.map { Array($0.reversed().drop { $0 == 0x20 }.reversed()) }
    }

    static func hex(_ s: ArraySlice<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        var i = s.startIndex
        while i < s.endIndex {
            if s[i] == 0x5C, i + 3 < s.endIndex + 1, s[i + 1] == 0x78, let v = UInt8(String(decoding: s[(i + 2)..<(i + 4)], as: UTF8.self), radix: 16) {
                out.append(v)
                i += 4
            } else {
                out.append(s[i])
                i += 1
            }
        }
        return out
    }

    /// `"\x2f…"` as bytes.
    static func string(_ arg: [UInt8]) -> [UInt8]? {
        guard arg.first == 0x22, let end = arg.lastIndex(of: 0x22), end > 0 else { return nil }
        return hex(arg[1..<end])
    }

    /// `5<\x2f…>` as the path bytes.
    static func fdPath(_ arg: [UInt8]) -> [UInt8]? {
        guard let lt = arg.firstIndex(of: 0x3C), let gt = arg.lastIndex(of: 0x3E), lt < gt else { return nil }
        let path = hex(arg[(lt + 1)..<gt])
        return path.first == 0x2F ? path : nil
    }

    /// The mtime of utimensat's `[atime, mtime]`.
    static func mtime(_ arg: [UInt8]) -> Timespec? {
        let text = String(decoding: arg, as: UTF8.self)
        guard let comma = text.range(of: "}, {") ?? text.range(of: "UTIME_OMIT, {") else { return nil }
        let m = String(text[comma.upperBound...])
        guard let s = field("tv_sec=", in: Array(m.utf8)), let n = field("tv_nsec=", in: Array(m.utf8)) else { return nil }
        return Timespec(seconds: Int64(s), nanoseconds: Int64(n))
    }

    static func field(_ name: String, in arg: [UInt8]) -> UInt64? {
        guard let r = arg.firstRange(of: Array(name.utf8)) else { return nil }
        return UInt64(String(decoding: arg[r.upperBound...].prefix { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
    }
}

extension Array where Element == UInt8 {
    func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }

    func lastRange(of pattern: [UInt8]) -> Range<Int>? {
        guard count >= pattern.count else { return nil }
        var i = count - pattern.count
        while i >= 0 {
            if self[i..<(i + pattern.count)].elementsEqual(pattern) { return i..<(i + pattern.count) }
            i -= 1
        }
        return nil
    }
}
