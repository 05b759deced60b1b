import Foundation
import Glibc
import Testing
import KeepSyncCore
import KeepSyncTestSupport

/// Versions on the disks of issue 16 (issue 40, item 2): exFAT keeps no hard links, so a
/// replaced file is moved aside before the new one takes its name; NTFS (ntfs-3g) and
/// tmpfs link it. Either way the old content is in the versions directory and the new at
/// the name.
extension LimitedMirrorTests {
    @Test(arguments: LoopMount.Kind.allCases)
    func versionsAreKeptWithOrWithoutHardLinks(_ kind: LoopMount.Kind) throws {
        let pair = try Pair(kind)
        let s = pair.sandbox.source
        try FS.mkdirs(s / "docs")
        try FS.mkdirs(s / "old")
        try FS.writeFile(s / "docs/report.odt", "one")
        try FS.writeFile(s / "old/a.txt", "a")
        let keep: [any CommandArgument] = ["--keep-versions", "30d"]
        let first = try pair.sandbox.keepsync(["sync"] + pair.paths + keep)
        #expect(first.status == 0, "\(first)")
        try FS.overwrite(s / "docs/report.odt", Array("two".utf8))
        try FS.unlink(s / "old/a.txt")
        try ScratchDirectory.removeTree(s / "old")
        let second = try pair.sandbox.keepsync(["sync"] + pair.paths + keep)
        #expect(second.status == 0, "\(second)")
        #expect(try FS.readFile(pair.mirror / "docs/report.odt") == Array("two".utf8))
        let versions = pair.mirror / ".keepsync-versions"
        let docs = ((try? FS.list(versions / "docs")) ?? []).map { String(decoding: $0, as: UTF8.self) }
        #expect(docs.count == 1 && docs.first.map { $0.hasPrefix("report~") && $0.hasSuffix("Z.odt") } == true, "\(kind): \(docs)")
        if let name = docs.first { #expect(try FS.readFile(versions / "docs/\(name)") == Array("one".utf8), "\(kind)") }
        let top = ((try? FS.list(versions)) ?? []).map { String(decoding: $0, as: UTF8.self) }
        let old = top.first { $0.hasPrefix("old~") }
        #expect(old != nil, "\(kind): \(top)")
        if let old { #expect(try FS.readFile(versions / "\(old)/a.txt") == Array("a".utf8), "\(kind)") }
        let check = try pair.sandbox.keepsync(["check"] + pair.paths)
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(kind): \(check)")
        print("LimitedMirrorTests: \(kind): versions \(top.sorted()) and docs/\(docs)")
    }
}

extension LimitedMirrorTests {
    @Test("a versions directory beside the mirror on the same disk: the replaced file (linked, or moved on exFAT) and the deleted directory land there, none in the mirror", arguments: LoopMount.Kind.allCases)
    func versionsElsewhereOnTheDisk(_ kind: LoopMount.Kind) throws {
        let pair = try Pair(kind)
        let s = pair.sandbox.source, versions = pair.disk.path / "versions"
        try FS.mkdirs(s / "docs")
        try FS.mkdirs(s / "old")
        try FS.writeFile(s / "docs/report.odt", "one")
        try FS.writeFile(s / "old/a.txt", "a")
        let keep: [any CommandArgument] = ["--keep-versions", "30d", "--versions-dir", versions]
        let first = try pair.sandbox.keepsync(["sync"] + pair.paths + keep)
        #expect(first.status == 0, "\(kind): \(first)")
        try FS.overwrite(s / "docs/report.odt", Array("two".utf8))
        try ScratchDirectory.removeTree(s / "old")
        let second = try pair.sandbox.keepsync(["sync"] + pair.paths + keep)
        #expect(second.status == 0, "\(kind): \(second)")
        #expect(try FS.readFile(pair.mirror / "docs/report.odt") == Array("two".utf8))
        let docs = ((try? FS.list(versions / "docs")) ?? []).map { String(decoding: $0, as: UTF8.self) }
        #expect(docs.count == 1 && docs.first.map { $0.hasPrefix("report~") } == true, "\(kind): \(docs)")
        if let name = docs.first { #expect(try FS.readFile(versions / "docs/\(name)") == Array("one".utf8), "\(kind)") }
        let old = ((try? FS.list(versions)) ?? []).map { String(decoding: $0, as: UTF8.self) }.first { $0.hasPrefix("old~") }
        if let old { #expect(try FS.readFile(versions / "\(old)/a.txt") == Array("a".utf8), "\(kind)") } else { Issue.record("\(kind): no old~") }
        #expect(!FS.exists(pair.mirror / ".keepsync-versions"), "\(kind)")
        let check = try pair.sandbox.keepsync(["check"] + pair.paths)
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(kind): \(check)")
    }

    @Test("a 16 MiB file system filled to its last 5 % beside the mirror: the next sync removes the oldest versions until it is out of it, with one warning, and keeps the mirror whole; with the versions directory in the mirror or beside it", arguments: [false, true])
    func versionsNeverTakeTheLastFivePercent(elsewhere: Bool) throws {
        let sandbox = try Sandbox()
        let disk = try LoopMount(.tmpfs, sizeMiB: 16)
        defer { disk.destroy() }
        let mirror = disk.path / "mirror"
        let kept = elsewhere ? disk.path / "versions" : mirror / ".keepsync-versions"
        let paths: [any CommandArgument] = ["--source", sandbox.source, "--mirror", mirror, "--state", sandbox.state,
                                            "--keep-versions", "30d"] + (elsewhere ? ["--versions-dir", kept] : [])
        for i in 0..<4 { try FS.writeFile(sandbox.source / "f\(i)", FS.pattern(count: 1 << 20, seed: UInt64(i))) }
        #expect(try sandbox.keepsync(["sync"] + paths).status == 0)
        for i in 0..<4 { try FS.overwrite(sandbox.source / "f\(i)", FS.pattern(count: 1 << 20, seed: UInt64(10 + i))) }
        let second = try sandbox.keepsync(["sync"] + paths)
        #expect(second.status == 0, "\(second)")
        func versions() -> [[UInt8]] { (try? FS.list(kept)) ?? [] }
        #expect(versions().count == 4)

        // Ballast beside the mirror until less than 5 % is free (400 KiB left).
        var space = statvfs()
        #expect(statvfs(String(decoding: disk.path, as: UTF8.self), &space) == 0)
        let free = Int(space.f_bavail) * Int(space.f_frsize), total = Int(space.f_blocks) * Int(space.f_frsize)
        try FS.writeFile(disk.path / "ballast", [UInt8](repeating: 7, count: free - (400 << 10)))
        #expect(statvfs(String(decoding: disk.path, as: UTF8.self), &space) == 0)
        let filled = Int(space.f_bavail) * Int(space.f_frsize)
        #expect(filled < total / 20, "\(filled) of \(total) bytes free")

        let third = try sandbox.keepsync(["sync"] + paths)
        #expect(third.status == 0, "\(third)")
        #expect(statvfs(String(decoding: disk.path, as: UTF8.self), &space) == 0)
        let after = Int(space.f_bavail) * Int(space.f_frsize)
        #expect(after >= total / 100 * 5, "\(after) of \(total) bytes free after the sync")
        #expect(versions().count == 3, "the oldest one went: \(versions().map { String(decoding: $0, as: UTF8.self) })")
        let warnings = third.stderrLines.filter { $0.contains("last 5 %") }
        #expect(warnings.count == 1, "\(third)")
        for i in 0..<4 { #expect(try FS.readFile(mirror / "f\(i)") == FS.pattern(count: 1 << 20, seed: UInt64(10 + i))) }
        print("LimitedMirrorTests: 16 MiB tmpfs: \(filled) bytes free with the ballast, \(after) after the sync; versions 4 -> \(versions().count)")
    }
}
