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
