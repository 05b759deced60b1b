import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

/// Versions in the built binary's crash states (issue 40 item 3, SPEC "Versions": durable
/// with the change): `sync --keep-versions 30d` recorded under strace while it replaces
/// and deletes recorded files (a group of rewrites, an `rm -r`, deletions, then a file
/// rewritten alone), each crash state built as `PowerCutTests` builds them, and on each:
/// - every change the cut state's records hold (a recorded file whose record is gone or
///   names another file) has its old content in `.keepsync-versions` (or, renamed, at
///   another name in the mirror);
/// - where the cut kept what barriers made durable and every entry, or nothing past them
///   (all modes but the random subset), a change not recorded has its old content at its
///   name or in the versions directory. A random subset may keep the new file's rename and
///   lose the link before it, an order no journaling file system keeps: SPEC promises the
///   versions of recorded changes, and those are checked in every mode;
/// - the usual checks (complete files, true records, a restart with versions converges).
extension PowerCutTests {
    /// Crash states over both versioned recordings (`KEEPSYNC_POWERCUT_VERSION_STATES=N`).
    static var versionStates: Int {
        ProcessInfo.processInfo.environment["KEEPSYNC_POWERCUT_VERSION_STATES"].flatMap { Int($0) } ?? 120
    }

    @Test func withVersionsEveryStateAPowerCutCanLeaveKeepsTheOldContentOfEachRecordedChange() throws {
        let strace = try SyscallCrashTests.requireProgram("strace", package: "strace")
        let sandbox = try Sandbox()
        let seed = ProcessInfo.processInfo.environment["KEEPSYNC_POWERCUT_SEED"].flatMap(UInt64.init) ?? UInt64(time(nil))
        print("PowerCutTests (versions): seed \(seed) (KEEPSYNC_POWERCUT_SEED replays it)")
        var rng = SplitMix64(seed: seed)
        let versions = Versions()
        let keep = ["--keep-versions", "30d"].map { Array($0.utf8) }

        // A tree, mirrored by a sync that is not recorded.
        for d in 0..<3 {
            try FS.mkdirs(sandbox.source / "d\(d)/sub")
            for f in 0..<6 { try versions.write(sandbox.source / "d\(d)/f\(f)", seed: UInt64(d * 100 + f), length: 300 + d * 40 + f) }
            try versions.write(sandbox.source / "d\(d)/sub/deep", seed: UInt64(d), length: 900 + d)
        }
        try versions.write(sandbox.source / "lone", seed: 9, length: 5_000)
        try FS.setPastTimes(under: sandbox.source)
        try FS.mkdirs(sandbox.mirror)
        try FS.mkdirs(sandbox.state)
        let initial = try sandbox.keepsync(["sync"] + sandbox.paths + keep.map { $0 as any CommandArgument })
        try #require(initial.status == 0, "\(initial)")

        var totals = PowerCutTally()
        let counts = VersionCrashCounts()
        // 1. Replaced and deleted in one sync: rewrites (a group), deletions, an `rm -r`, a
        // rename onto a recorded file.
        for f in 0..<4 { try versions.write(sandbox.source / "d1/f\(f)", seed: UInt64(500 + f), length: 1_000 + f) }
        for f in 4..<6 { try FS.unlink(sandbox.source / "d0/f\(f)") }
        try ScratchDirectory.removeTree(sandbox.source / "d2")
        try FS.rename(sandbox.source / "d0/f0", sandbox.source / "d0/f1")
        versions.fileRenamed(sandbox.source / "d0/f0", to: sandbox.source / "d0/f1")
        totals.add(try Self.recordVersioned(sandbox, strace: strace, label: "versioned replaces and deletes", options: keep,
                                            versions: versions, states: Self.versionStates * 5 / 8, counts: counts, rng: &rng))
        // 2. One file rewritten alone (a lone install, its own fsync), one deleted.
        try versions.write(sandbox.source / "lone", seed: 10, length: 5_001)
        try FS.unlink(sandbox.source / "d1/f5")
        totals.add(try Self.recordVersioned(sandbox, strace: strace, label: "versioned lone replace", options: keep,
                                            versions: versions, states: Self.versionStates * 3 / 8, counts: counts, rng: &rng))

        print("PowerCutTests (versions): \(totals.states) crash states from \(totals.operations) recorded operations (\(counts.links) links, \(counts.renamesIntoVersions) renames into the versions directory); \(counts.recordedChecked) recorded changes' old content found in .keepsync-versions, \(counts.moved) renamed; \(counts.unrecordedChecked) changes not recorded with their old content kept (\(counts.unrecordedInVersions) of them in .keepsync-versions), \(counts.unrecordedLostInRandomSubset) not (random subsets); \(totals.restarts) restarts converged; \(totals.violations.count) violations")
        #expect(totals.violations.isEmpty, "\(totals.violations.count) violations (seed \(seed)):\n\(totals.violations.prefix(12).joined(separator: "\n"))")
        #expect(totals.states >= Self.versionStates - 1 && totals.restarts == totals.states, "\(totals.states) crash states, \(totals.restarts) restarts")
        // The checks ran on what they are about: versions linked and moved, recorded changes
        // found, changes not yet recorded found.
        #expect(counts.links >= 5 && counts.renamesIntoVersions >= 3 && counts.recordedChecked > 0 && counts.unrecordedChecked > 0,
                "\(counts.links) links, \(counts.renamesIntoVersions) renames into .keepsync-versions, \(counts.recordedChecked) recorded, \(counts.unrecordedChecked) unrecorded checked")
    }

    /// Records a `sync` with `options` and checks its crash states, versions included.
    static func recordVersioned(_ sandbox: Sandbox, strace: [UInt8], label: String, options: [[UInt8]], versions: Versions,
                                states: Int, counts: VersionCrashCounts, rng: inout SplitMix64) throws -> PowerCutTally {
        // What each record claims before the sync: the recorded file's bytes.
        let before = try JournalBookmarkStore(directory: sandbox.state).load()
        var old: [RelativePath: (record: FileRecord, content: [UInt8])] = [:]
        for (path, record) in before.table where record.kind == .regular {
            let file = sandbox.mirror / path.bytes
            guard FS.lstat(file)?.inode == record.mirrorInode else { continue }
            old[path] = (record, try FS.readFile(file))
        }
        let recording = try Recording.sync(sandbox, mirror: sandbox.mirror, strace: strace, label: label, options: options)
        let directory = Array(VersionSettings.defaultDirectoryName.utf8)
        var live = recording.start
        for op in recording.operations { live.apply(op) }
        guard let versionsID = live.lookup([directory], in: live.mirrorRoot) else {
            Issue.record("\(label): no \(VersionSettings.defaultDirectoryName) after the sync")
            return PowerCutTally()
        }
        for op in recording.operations where op.fs == 0 {
            switch op.kind {
            case .link: counts.links += 1
            case .rename(_, _, let toDir, _) where live.isBelow(toDir, versionsID): counts.renamesIntoVersions += 1
            default: break
            }
        }
        return try recording.check(sandbox, versions: versions, states: states, rng: &rng) { model, loaded, mode, where_ in
            let kept = model.versionContents(directory, versions: versions)
            let elsewhere = Set(model.mirrorFiles().filter { $0.0.first != directory }.compactMap { model.content(of: $0.1, versions: versions) })
            var out: [String] = []
            for (path, was) in old.sorted(by: { $0.key < $1.key }) {
                let now = loaded.table[path]
                let recorded = now.map { $0.mirrorInode != was.record.mirrorInode || $0.size != was.record.size || $0.kind != .regular } ?? true
                let atName = model.lookup(path.components, in: model.mirrorRoot).flatMap { model.content(of: $0, versions: versions) }
                if kept.contains(was.content) {
                    if recorded { counts.recordedChecked += 1 } else { counts.unrecordedChecked += 1; counts.unrecordedInVersions += 1 }
                } else if !recorded && atName == was.content {
                    counts.unrecordedChecked += 1
                } else if recorded && elsewhere.contains(was.content) {
                    counts.moved += 1
                } else if recorded {
                    out.append("\(where_): Versions: the change of \(path.escaped) is recorded (\(now.map { "\($0.size) bytes" } ?? "removed")), and its old content (\(was.content.count) bytes) is neither in \(VersionSettings.defaultDirectoryName) nor at another name")
                } else if mode == 2 {
                    counts.unrecordedLostInRandomSubset += 1
                } else {
                    out.append("\(where_): Versions: the change of \(path.escaped) is not recorded, and its old content (\(was.content.count) bytes) is neither at its name nor in \(VersionSettings.defaultDirectoryName)")
                }
            }
            return out
        }
    }
}

extension Versions {
    /// A file renamed: copies at `to` may hold its versions too.
    func fileRenamed(_ from: [UInt8], to: [UInt8]) {
        byPath[to, default: [:]].merge(byPath[from] ?? [:]) { a, _ in a }
    }
}

/// What the versioned crash states showed.
final class VersionCrashCounts {
    /// Recorded `linkat`s and renames into the versions directory.
    var links = 0, renamesIntoVersions = 0
    /// Recorded changes whose old content was in the versions directory, or at another name.
    var recordedChecked = 0, moved = 0
    /// Changes not recorded whose old content was kept (at its name or in the versions
    /// directory; of those, in it), and those a random subset lost.
    var unrecordedChecked = 0, unrecordedInVersions = 0, unrecordedLostInRandomSubset = 0
}

extension FileModel {
    /// True when directory `id` is `ancestor` or below it.
    func isBelow(_ id: Int, _ ancestor: Int) -> Bool {
        if id == ancestor { return true }
        var stack = [ancestor]
        while let dir = stack.popLast() {
            for child in nodes[dir].map({ Array($0.children.values) }) ?? [] where nodes[child]?.kind == .directory {
                if child == id { return true }
                stack.append(child)
            }
        }
        return false
    }

    /// The bytes of every file below the mirror's `directory` (the versions directory).
    func versionContents(_ directory: [UInt8], versions: Versions) -> Set<[UInt8]> {
        guard let top = lookup([directory], in: mirrorRoot) else { return [] }
        var out: Set<[UInt8]> = []
        var stack = [top]
        while let id = stack.popLast() {
            guard let node = nodes[id] else { continue }
            switch node.kind {
            case .directory: stack += node.children.values
            case .file: if let content = content(of: id, versions: versions) { out.insert(content) }
            case .symlink: break
            }
        }
        return out
    }
}
