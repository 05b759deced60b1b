import Foundation
import Glibc
import Testing
import KeepSyncCore
import KeepSyncTestSupport

/// Issue 16: a mirror on a file system that holds less than the source (SPEC "Mirrors on
/// file systems that hold less", "Vanished or replaced mirror"), on real file systems the
/// test mounts itself: exFAT (exfat-fuse), NTFS (ntfs-3g, default and `windows_names`) on a
/// loop device, and a tmpfs that holds everything, for comparison. Each case runs the built
/// binary on a source that has what such disks refuse: a symlink, a `:` name, a Latin-1
/// (not UTF-8) name, two names differing only in case, modes 0755 and 0600, nanosecond mtimes.
@Suite(.serialized, .offThePool, .enabled(if: LoopMount.available,
                             "needs root, /dev/fuse, loop devices and mkfs.exfat, mount.exfat-fuse, mkntfs, ntfs-3g (.ci/run installs them)"))
struct LimitedMirrorTests {
    // MARK: sync and check

    @Test(arguments: LoopMount.Kind.allCases)
    func aFirstSyncSkipsWhatTheDiskCannotHoldASecondCopiesNothingAndCheckFindsNoDifference(_ kind: LoopMount.Kind) throws {
        let pair = try Pair(kind)
        try pair.buildSource()

        let first = try pair.sync()
        #expect(first.status == 0, "what the disk cannot hold is skipped, not failed: \(first)")
        let copied = Self.copiedBySync(first)
        #expect(copied == pair.expectedCopies, "first sync: \(pair.expectedCopies) files to copy (all regular files but the skipped ones): \(first)")
        let diff = pair.differences()
        #expect(diff.isEmpty, "mirror differs within the limits of \(kind):\n\(diff.joined(separator: "\n"))")

        // What the disk cannot hold, in status.json.
        let status = RunCommandTests.status(pair.sandbox)
        let limits = status?["mirrorLimits"] as? [String: Any]
        #expect(limits != nil, "status.json has no \"mirrorLimits\" object: \(RunCommandTests.statusText(pair.sandbox))")
        if kind.isFuse { #expect(limits?.isEmpty == false, "\(kind) holds less than the source, yet mirrorLimits is empty") }
        let skipped = status?["skipped"] as? [String: Any]
        #expect(skipped != nil, "status.json has no \"skipped\" object: \(RunCommandTests.statusText(pair.sandbox))")
        let count = (skipped?["count"] as? NSNumber)?.intValue
        #expect(count == pair.expectedSkipped.count, "skipped count on \(kind), expected \(pair.expectedSkippedText): \(RunCommandTests.statusText(pair.sandbox))")
        let listed = Set(skipped?["paths"] as? [String] ?? [])
        #expect(listed == Set(pair.expectedSkippedText), "skipped paths on \(kind): \(RunCommandTests.statusText(pair.sandbox))")
        // One warning per skipped path (a line naming it as a whole path, not `link` in `symlinks`).
        for path in pair.expectedSkippedText {
            let warnings = first.stderrLines.filter { Self.names($0, path) }
            #expect(warnings.count == 1, "\(warnings.count) log lines name skipped \(path) (one warning expected): \(first)")
        }

        let second = try pair.sync()
        #expect(second.status == 0, "\(second)")
        let again = Self.copiedBySync(second)
        #expect(again == 0, "an unchanged source must copy nothing on \(kind): \(second)")

        let check = try pair.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "check right after sync on \(kind): \(check)")

        print("LimitedMirrorTests: \(kind): mirrorLimits \(Self.compact(status?["mirrorLimits"])); first sync copied \(copied.map(String.init) ?? "?") (exit \(first.status)), skipped \(count.map(String.init) ?? "?") \(listed.sorted()); second sync copied \(again.map(String.init) ?? "?") (exit \(second.status)); check: \(check.stdoutLines.last ?? "?") (exit \(check.status))")
    }

    @Test(arguments: LoopMount.Kind.allCases)
    func afterAReplugSyncCopiesNothingAndCheckFindsNoDifference(_ kind: LoopMount.Kind) throws {
        let pair = try Pair(kind)
        try pair.buildSource()
        let first = try pair.sync()
        #expect(first.status == 0, "\(first)")

        try pair.disk.unmount()
        try pair.disk.mount()   // the same disk again: on exFAT every inode number has changed
        let after = try pair.sync()
        #expect(after.status == 0, "sync after a replug of \(kind): \(after)")
        #expect(Self.copiedBySync(after) == 0, "a replug of an unchanged \(kind) disk must copy nothing: \(after)")
        let check = try pair.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "check after a replug of \(kind): \(check)")
        let diff = pair.differences()
        #expect(diff.isEmpty, "\(diff.joined(separator: "\n"))")
    }

    @Test(arguments: LoopMount.Kind.allCases)
    func aCaseOnlyRenameInTheSourceIsARenameInTheMirror(_ kind: LoopMount.Kind) throws {
        let pair = try Pair(kind)
        try pair.buildSource()
        let first = try pair.sync()
        #expect(first.status == 0, "\(first)")
        try #require(FS.exists(pair.mirror / "Photo.JPG"), "Photo.JPG not mirrored: \(first)")

        try FS.rename(pair.sandbox.source / "Photo.JPG", pair.sandbox.source / "photo.jpg")
        let renamed = try pair.sync()
        #expect(renamed.status == 0, "\(renamed)")
        let names = try FS.list(pair.mirror)
        #expect(names.contains(bytes("photo.jpg")) && !names.contains(bytes("Photo.JPG")),
                "the mirror lists \(names.map { ByteEscaping.escape($0) }) after Photo.JPG -> photo.jpg on \(kind)\n\(renamed)")
        let intact = (try? RunCommandTests.sameContent(pair.sandbox.source / "photo.jpg", pair.mirror / "photo.jpg")) == true
        #expect(intact, "photo.jpg in the mirror is missing or not the source's content on \(kind)\n\(renamed)")
        let check = try pair.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "check after a case-only rename on \(kind): \(check)")
        let diff = pair.differences()
        #expect(diff.isEmpty, "\(diff.joined(separator: "\n"))")
    }

    // MARK: run

    @Test(arguments: LoopMount.Kind.allCases)
    func aLiveAgentConvergesAndCopiesNothingAgainAfterARestart(_ kind: LoopMount.Kind) async throws {
        let pair = try Pair(kind)
        try pair.buildSource()
        let agent = try await FaultInjectionTests.startRun(pair.sandbox, mirror: pair.mirror)
        defer { agent.killNow() }
        #expect(await pair.converges(), "initial pass on \(kind):\n\(pair.differences().joined(separator: "\n"))\n\(RunCommandTests.statusText(pair.sandbox))\n\(agent.stderrText)")

        // A new file, a changed one, a removed one.
        try FS.writeFile(pair.sandbox.source / "docs/new.txt", "new while running\n")
        try FS.writeFile(pair.sandbox.source / "docs/notes.txt", "notes, changed and longer\n")
        try FS.unlink(pair.sandbox.source / "docs/deep/small.bin")
        #expect(await pair.converges(), "live changes on \(kind):\n\(pair.differences().joined(separator: "\n"))\n\(RunCommandTests.statusText(pair.sandbox))\n\(agent.stderrText)")
        try await FaultInjectionTests.stop(agent, pair.sandbox)
        let firstRun = Self.copiedByRun(agent.stderrLines)

        // A restart over an unchanged pair copies nothing.
        let again = try await FaultInjectionTests.startRun(pair.sandbox, mirror: pair.mirror)
        defer { again.killNow() }
        let quiet = await eventually(timeout: .seconds(20)) {
            (RunCommandTests.status(pair.sandbox)?["pending"] as? NSNumber)?.intValue == 0
        }
        #expect(quiet, "the restarted agent never has 0 pending: \(RunCommandTests.statusText(pair.sandbox))\n\(again.stderrText)")
        try await FaultInjectionTests.stop(again, pair.sandbox)
        let restarted = Self.copiedByRun(again.stderrLines)
        #expect(restarted == 0, "the restarted agent copied \(restarted.map(String.init) ?? "? (no `stopped after` line)") files on an unchanged \(kind) mirror\n\(again.stderrText)")
        let diff = pair.differences()
        #expect(diff.isEmpty, "\(diff.joined(separator: "\n"))")
        print("LimitedMirrorTests: \(kind): run copied \(firstRun.map(String.init) ?? "?") files; after a restart \(restarted.map(String.init) ?? "?")")
    }

    // MARK: The disk unplugged

    @Test(arguments: LoopMount.Kind.allCases)
    func aDiskUnpluggedWhileStoppedMakesSyncExitThreeAndFillsNothingBelowTheMountPoint(_ kind: LoopMount.Kind) throws {
        let pair = try Pair(kind)
        try pair.buildSource()
        let first = try pair.sync()
        #expect(first.status == 0, "\(first)")

        try pair.disk.unmount()
        try FS.writeFile(pair.sandbox.source / "docs/while-unplugged.txt", "written while the disk was away\n")
        let refused = try pair.sync()
        #expect(refused.status == 3, "a sync onto an unplugged \(kind) disk: \(refused)")
        let mirrorName = ByteEscaping.escape(pair.mirror)
        #expect(refused.errorLines.contains { $0.contains(mirrorName) }, "the error must name the mirror \(mirrorName): \(refused)")
        let below = try FS.list(pair.disk.path)
        #expect(below.isEmpty, "written below the missing mount: \(below.map { ByteEscaping.escape($0) })")
        // What was written there is cleared as a user would have to: FUSE (exfat-fuse) refuses to
        // mount over a directory that is not empty.
        for name in below { try ScratchDirectory.removeTree(pair.disk.path / name) }

        try pair.disk.mount()
        let back = try pair.sync()
        #expect(back.status == 0, "\(back)")
        #expect(Self.copiedBySync(back) == 1, "only the file written while the disk was away is copied: \(back)")
        let diff = pair.differences()
        #expect(diff.isEmpty, "\(diff.joined(separator: "\n"))")
    }

    @Test(arguments: LoopMount.Kind.allCases)
    func aDiskUnpluggedWhileRunWatchesIsReportedFillsNothingAndTheAgentResumesWhenItIsBack(_ kind: LoopMount.Kind) async throws {
        let pair = try Pair(kind)
        try pair.buildSource()
        let agent = try await FaultInjectionTests.startRun(pair.sandbox, mirror: pair.mirror)
        defer { agent.killNow() }
        #expect(await pair.converges(), "initial pass on \(kind):\n\(pair.differences().joined(separator: "\n"))\n\(agent.stderrText)")

        try pair.disk.unmount(lazy: true)   // pulled out: the agent may hold descriptors inside
        let gone = ContinuousClock.now
        let reported = await eventually(timeout: .seconds(10)) {
            RunCommandTests.statusText(pair.sandbox).contains("mirror unavailable")
        }
        let took = ContinuousClock.now - gone
        #expect(reported, "status.json never says `mirror unavailable`: \(RunCommandTests.statusText(pair.sandbox))\n\(agent.stderrText)")
        #expect(took <= .seconds(5), "reported \(took) after the unplug")

        // A change while the disk is away reaches nothing below the mount point. The window
        // is a span to watch (settle is 20 ms), ended early by the first entry that appears.
        try FS.writeFile(pair.sandbox.source / "docs/while-unplugged.txt", "written while the disk was away\n")
        let filled = await eventually(timeout: .seconds(2)) { !((try? FS.list(pair.disk.path)) ?? []).isEmpty }
        #expect(!filled, "written below the missing mount: \(((try? FS.list(pair.disk.path)) ?? []).map { ByteEscaping.escape($0) })")
        #expect(agent.poll() == nil, "the agent ended while the disk was away\n\(agent.stderrText)")
        for name in (try? FS.list(pair.disk.path)) ?? [] { try ScratchDirectory.removeTree(pair.disk.path / name) }  // else exfat-fuse refuses to mount

        try pair.disk.mount()
        let resumed = await eventually(timeout: .seconds(20)) {
            FS.exists(pair.mirror / "docs/while-unplugged.txt") && pair.differences().isEmpty
        }
        #expect(resumed, "not resumed after the replug of \(kind) (\(pair.disk.replugNotes)):\n\(pair.differences().joined(separator: "\n"))\n\(RunCommandTests.statusText(pair.sandbox))\n\(agent.stderrText)")
        try await FaultInjectionTests.stop(agent, pair.sandbox)
        print("LimitedMirrorTests: \(kind): unplugged while running: reported \(reported ? "after \(took)" : "never"), \(filled ? "wrote below the mount point" : "nothing below the mount point"), \(resumed ? "resumed" : "not resumed") on replug\(pair.disk.replugNotes.isEmpty ? "" : " (\(pair.disk.replugNotes.joined(separator: "; ")))")")
    }
}

// MARK: - The pair

extension LimitedMirrorTests {
    /// A sandbox whose mirror is `DISK/mirror` on a disk of `kind`. The disk goes first at the end.
    final class Pair {
        let kind: LoopMount.Kind
        let sandbox: Sandbox
        let disk: LoopMount
        var mirror: [UInt8] { disk.path / "mirror" }

        init(_ kind: LoopMount.Kind) throws {
            self.kind = kind
            sandbox = try Sandbox()
            disk = try LoopMount(kind)
        }

        deinit { disk.destroy() }

        var paths: [any CommandArgument] { ["--source", sandbox.source, "--mirror", mirror, "--state", sandbox.state] }

        /// `keepsync sync`; afterwards no temp file may be left in the mirror.
        func sync() throws -> ProcessResult {
            let result = try sandbox.keepsync(["sync"] + paths)
            if disk.mounted, FS.exists(mirror) {
                let temps = try FaultInjectionTests.temporaryFiles(mirror)
                #expect(temps.isEmpty, "temp files left in the mirror: \(temps)")
            }
            return result
        }

        func check() throws -> ProcessResult { try sandbox.keepsync(["check"] + paths) }

        /// The source tree: what every disk holds and what some refuse. Regular files:
        /// 11, of which exFAT refuses 3 (`a:b.txt`, `caf\xe9.txt`, `case/Readme.md`).
        func buildSource() throws {
            let s = sandbox.source
            try FS.mkdirs(s / "docs/deep/er")
            try FS.writeFile(s / "docs/notes.txt", "notes\n")
            try FS.writeFile(s / "docs/deep/er/data.bin", FS.pattern(count: 200_000, seed: 16))
            try FS.writeFile(s / "docs/deep/small.bin", FS.pattern(count: 3_001, seed: 17))
            try FS.writeFile(s / "empty.txt", [])
            try FS.mkdir(s / "bin")
            try FS.writeFile(s / "bin/tool.sh", "#!/bin/sh\necho tool\n", mode: 0o755)
            try FS.writeFile(s / "private.txt", "only for me\n", mode: 0o600)
            try FS.symlink(target: bytes("docs/notes.txt"), at: s / "link")
            try FS.writeFile(s / "a:b.txt", "colon\n")
            try FS.writeFile(s / [0x63, 0x61, 0x66, 0xE9, 0x2E, 0x74, 0x78, 0x74], "Latin-1 name\n")   // caf\xe9.txt
            try FS.mkdir(s / "case")
            try FS.writeFile(s / "case/README.md", "upper\n")
            try FS.writeFile(s / "case/Readme.md", "mixed, and longer\n")
            try FS.writeFile(s / "Photo.JPG", FS.pattern(count: 5_000, seed: 18))
            try FS.setPastTimes(under: s)   // mtimes with nanoseconds: finer than either disk keeps
        }

        /// What this file system can hold, as Part 1 of issue 16 measured it (/tmp/fuse-facts.md):
        /// - exFAT (exfat-fuse): no symlinks (ENOSYS), no permission bits (always 0777), mtimes
        ///   floored to 1 s, names compared without case (Unicode too), refuses `:*?"<>|\` and
        ///   0x01-0x1f (ENOENT) and invalid UTF-8 (EILSEQ);
        /// - NTFS (ntfs-3g, default): symlinks kept, no permission bits (0777), mtimes to 100 ns,
        ///   case-sensitive, refuses only invalid UTF-8 (EILSEQ);
        /// - NTFS with `windows_names`: as NTFS, and refuses `:*?"<>|\`, 0x01-0x1f, a trailing
        ///   space or dot and DOS device names (EINVAL); still case-sensitive;
        /// - tmpfs: everything.
        struct Limits {
            var symlinks = true
            var modes = true
            var mtimeGranularityNanoseconds = 1
            var foldsCase = false
            var refuses: ([UInt8]) -> Bool = { _ in false }
        }

        static func limits(_ kind: LoopMount.Kind) -> Limits {
            let invalidUTF8: ([UInt8]) -> Bool = { Array(String(decoding: $0, as: UTF8.self).utf8) != $0 }
            let windowsSpecial: ([UInt8]) -> Bool = { name in
                name.contains { $0 < 0x20 || Array(":*?\"<>|\\".utf8).contains($0) }
            }
            switch kind {
            case .exfat:
                return Limits(symlinks: false, modes: false, mtimeGranularityNanoseconds: 1_000_000_000, foldsCase: true,
                              refuses: { invalidUTF8($0) || windowsSpecial($0) })
            case .ntfs:
                return Limits(symlinks: true, modes: false, mtimeGranularityNanoseconds: 100, foldsCase: false, refuses: invalidUTF8)
            case .ntfsWindowsNames:
                let reserved = ["con", "prn", "aux", "nul"] + (1...9).flatMap { ["com\($0)", "lpt\($0)"] }
                return Limits(symlinks: true, modes: false, mtimeGranularityNanoseconds: 100, foldsCase: false, refuses: { name in
                    let stem = String(decoding: name, as: UTF8.self).lowercased().split(separator: ".", maxSplits: 1).first.map(String.init) ?? ""
                    return invalidUTF8(name) || windowsSpecial(name) || name.last == 0x20 || name.last == 0x2E || reserved.contains(stem)
                })
            case .tmpfs:
                return Limits()
            }
        }

        var limits: Limits { Self.limits(kind) }

        /// Source paths this disk cannot hold: symlinks where there are none, names with a
        /// refused byte, and of two names equal without case the one sorted second (bytewise:
        /// `case/README.md` < `case/Readme.md`, so `Readme.md` is skipped on exFAT).
        var expectedSkipped: [[UInt8]] {
            guard let snapshot = try? sandbox.sourceSnapshot() else { return [] }
            let limits = self.limits
            var skipped: [[UInt8]] = []
            var seenFolded = Set<[UInt8]>()
            for path in snapshot.paths where !path.isEmpty {
                if skipped.contains(where: { path.starts(with: $0 + [0x2F]) }) { continue }   // below a skipped directory
                let name = Array(path.split(separator: 0x2F, omittingEmptySubsequences: false).last ?? [])
                let folded = Array(String(decoding: path, as: UTF8.self).lowercased().utf8)
                if (!limits.symlinks && snapshot.entries[path]?.kind == .symlink) || limits.refuses(name)
                    || (limits.foldsCase && seenFolded.contains(folded)) {
                    skipped.append(path)
                } else {
                    seenFolded.insert(folded)
                }
            }
            return skipped
        }

        var expectedSkippedText: [String] { expectedSkipped.map { ByteEscaping.escape($0) } }

        /// Regular files the first sync copies: all but the skipped ones.
        var expectedCopies: Int {
            guard let snapshot = try? sandbox.sourceSnapshot() else { return -1 }
            return snapshot.removing(expectedSkipped).regularFiles.count
        }

        /// The mirror against the source within this disk's limits: every path but the
        /// skipped ones, of the same kind, content and link target, mtimes (files and
        /// directories) within the granularity, modes where the disk keeps them; nothing else.
        func differences() -> [String] {
            let expected: TreeSnapshot, actual: TreeSnapshot
            do {
                expected = try sandbox.sourceSnapshot().removing(expectedSkipped)
                actual = try TreeSnapshot.take(mirror)
            } catch {
                return ["cannot snapshot: \(error)"]
            }
            let limits = self.limits
            var lines: [String] = []
            for path in expected.paths {
                let name = path.isEmpty ? "." : ByteEscaping.escape(path)
                guard let e = expected.entries[path] else { continue }
                guard let a = actual.entries[path] else { lines.append("\(name): missing"); continue }
                guard e.kind == a.kind else { lines.append("\(name): kind \(e.kind) vs \(a.kind)"); continue }
                if e.content != a.content { lines.append("\(name): content differs") }
                if e.target != a.target { lines.append("\(name): link target differs") }
                if e.kind == .regular || e.kind == .directory {
                    let delta = (e.mtimeSeconds - a.mtimeSeconds) * 1_000_000_000 + (e.mtimeNanoseconds - a.mtimeNanoseconds)
                    if abs(delta) >= limits.mtimeGranularityNanoseconds {
                        lines.append("\(name): mtime \(e.mtimeSeconds).\(e.mtimeNanoseconds) vs \(a.mtimeSeconds).\(a.mtimeNanoseconds)")
                    }
                    if limits.modes && e.permissions != a.permissions {
                        lines.append("\(name): mode \(String(e.permissions, radix: 8)) vs \(String(a.permissions, radix: 8))")
                    }
                }
            }
            for path in actual.paths where expected.entries[path] == nil {
                lines.append("\(ByteEscaping.escape(path)): extra in the mirror")
            }
            return lines
        }

        /// Waits up to 30 s for the mirror to match within the limits with nothing pending.
        /// Waits up to 30 s for `other` (a second mirror, skipping nothing) to equal the source.
        func convergesOn(_ other: [UInt8]) async -> Bool {
            await eventually(timeout: .seconds(30)) {
                ((try? sandbox.sourceSnapshot().differences(to: TreeSnapshot.take(other))) ?? ["?"]).isEmpty
            }
        }

        func converges() async -> Bool {
            await eventually(timeout: .seconds(30)) {
                differences().isEmpty && (RunCommandTests.status(sandbox)?["pending"] as? NSNumber)?.intValue == 0
            }
        }
    }

    /// N of the `sync done: N files copied` line, nil when there is none.
    static func copiedBySync(_ result: ProcessResult) -> Int? {
        for line in result.stderrLines.reversed() {
            if let match = line.firstMatch(of: #/sync done: ([0-9]+) files? copied/#) { return Int(match.1) }
        }
        return nil
    }

    /// N of run's `stopped after Ts: N files copied` line, nil when there is none.
    static func copiedByRun(_ lines: [String]) -> Int? {
        for line in lines.reversed() {
            if let match = line.firstMatch(of: #/stopped after [0-9]+s: ([0-9]+) files? copied/#) { return Int(match.1) }
        }
        return nil
    }

    /// Whether `line` names `path` as a whole (not as part of a longer word or path).
    static func names(_ line: String, _ path: String) -> Bool {
        let edges: Set<Character> = [" ", "'", "\"", "`", ":", ",", "(", ")"]
        var rest = line[...]
        while let range = rest.range(of: path) {
            let before = range.lowerBound == line.startIndex ? nil : line[line.index(before: range.lowerBound)]
            let after = range.upperBound == line.endIndex ? nil : line[range.upperBound]
            if before.map(edges.contains) ?? true, after.map(edges.contains) ?? true { return true }
            rest = line[range.upperBound...]
        }
        return false
    }

    /// A JSON value on one line, for the summary.
    static func compact(_ value: Any?) -> String {
        guard let value, JSONSerialization.isValidJSONObject(value),
              let data = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]) else { return "(none)" }
        return String(decoding: data, as: UTF8.self)
    }
}
