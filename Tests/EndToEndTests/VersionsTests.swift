import Foundation
import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// `--keep-versions` as a user runs it (issue 40): `sync` and `run` keep what the source
/// replaced or deleted in `MIRROR/.keepsync-versions`, by inode, and nothing for a mode
/// change or a rename; the directory is left alone by passes, `check` and a run with
/// versions off.
@Suite("Versions, end to end", .serialized, .offThePool)
struct VersionsTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    /// The versions directory's entries below `relative` (a directory of it), as names.
    static func versions(_ sandbox: Sandbox, _ relative: String = "") -> [String] {
        let dir = sandbox.mirror / (".keepsync-versions" + (relative.isEmpty ? "" : "/" + relative))
        return ((try? FS.list(dir)) ?? []).map { String(decoding: $0, as: UTF8.self) }.sorted()
    }

    /// `name`'s tag as seconds since the epoch, from the version name `version`.
    static func tagSeconds(_ version: String, isDirectory: Bool = false) -> Int64? {
        VersionName(parsing: Array(version.utf8), isDirectory: isDirectory)?.seconds
    }

    @Test("sync keeps a replaced file's old inode and a deleted directory whole; a mode change and a rename keep nothing; check and a sync with versions off leave the versions alone; a source entry at that path is skipped with one warning")
    func syncKeepsVersions() throws {
        let sandbox = try Sandbox()
        try FS.mkdirs(sandbox.source / "docs")
        try FS.mkdirs(sandbox.source / "old/deep")
        try FS.writeFile(sandbox.source / "docs/report.odt", "one")
        try FS.writeFile(sandbox.source / "old/deep/f.txt", "f")
        try FS.writeFile(sandbox.source / "mode.sh", "echo")
        try FS.writeFile(sandbox.source / "moved.txt", "moved")
        let first = try sandbox.keepsync(["sync"] + sandbox.paths + ["--keep-versions", "30d"])
        #expect(first.status == 0, "\(first)")
        let oldReport = try #require(FS.lstat(sandbox.mirror / "docs/report.odt")).inode
        let oldDirectory = try #require(FS.lstat(sandbox.mirror / "old")).inode

        let before = Int64(time(nil))
        try FS.overwrite(sandbox.source / "docs/report.odt", Self.b("two"))
        try ScratchDirectory.removeTree(sandbox.source / "old")
        try FS.chmod(sandbox.source / "mode.sh", 0o755)
        try FS.rename(sandbox.source / "moved.txt", sandbox.source / "renamed.txt")
        let second = try sandbox.keepsync(["sync"] + sandbox.paths + ["--keep-versions", "30d"])
        let after = Int64(time(nil))
        #expect(second.status == 0, "\(second)")
        #expect(try FS.readFile(sandbox.mirror / "docs/report.odt") == Self.b("two"))

        #expect(Self.versions(sandbox).filter { $0 != "docs" }.count == 1, "only old~…: \(Self.versions(sandbox))")
        let report = try #require(Self.versions(sandbox, "docs").first, "\(Self.versions(sandbox))")
        #expect(Self.versions(sandbox, "docs").count == 1 && report.hasPrefix("report~") && report.hasSuffix("Z.odt"), "\(report)")
        #expect((Self.tagSeconds(report).map { $0 >= before && $0 <= after }) == true, "\(report) tagged between \(before) and \(after)")
        #expect(try FS.readFile(sandbox.mirror / ".keepsync-versions/docs/\(report)") == Self.b("one"))
        #expect(FS.lstat(sandbox.mirror / ".keepsync-versions/docs/\(report)")?.inode == oldReport, "linked, not copied")
        let old = try #require(Self.versions(sandbox).first { $0.hasPrefix("old~") })
        #expect(FS.lstat(sandbox.mirror / ".keepsync-versions/\(old)")?.inode == oldDirectory, "moved whole")
        #expect(try FS.readFile(sandbox.mirror / ".keepsync-versions/\(old)/deep/f.txt") == Self.b("f"))

        let check = try sandbox.keepsync(["check"] + sandbox.paths)
        #expect(check.status == 0 && check.stdoutLines == ["0 differences"], "\(check)")
        // Versions off: the versions stay (SPEC: until removed by hand), nothing new is kept.
        try FS.overwrite(sandbox.source / "docs/report.odt", Self.b("three"))
        let off = try sandbox.keepsync(["sync"] + sandbox.paths)
        #expect(off.status == 0, "\(off)")
        #expect(Self.versions(sandbox, "docs") == [report] && Self.versions(sandbox).contains(old))

        // A source entry at the versions directory's path: not mirrored, one warning.
        try FS.mkdirs(sandbox.source / ".keepsync-versions")
        try FS.writeFile(sandbox.source / ".keepsync-versions/mine.txt", "the user's")
        let named = try sandbox.keepsync(["sync"] + sandbox.paths + ["--keep-versions", "30d"])
        #expect(named.status == 0, "\(named)")
        #expect(named.stderrLines.filter { $0.contains("versions directory") }.count == 1, "\(named)")
        #expect(!Self.versions(sandbox).contains("mine.txt") && FS.lstat(sandbox.mirror / ".keepsync-versions/mine.txt") == nil)
        #expect(try FS.readFile(sandbox.source / ".keepsync-versions/mine.txt") == Self.b("the user's"), "the source untouched")
    }

    @Test("run keeps the old content of a file overwritten while it watches, and a removed file")
    func runKeepsVersions() async throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "notes.txt", "first")
        try FS.writeFile(sandbox.source / "gone.txt", "gone")
        let agent = try await RunCommandTests.start(sandbox, ["--keep-versions", "1d"])
        defer { agent.killNow() }
        let synced = await eventually(timeout: .seconds(30)) {
            (try? FS.readFile(sandbox.mirror / "gone.txt")) == Self.b("gone")
        }
        try #require(synced, "\(agent.stderrText)")
        try FS.overwrite(sandbox.source / "notes.txt", Self.b("second"))
        try FS.unlink(sandbox.source / "gone.txt")
        let kept = await eventually(timeout: .seconds(30)) {
            (try? FS.readFile(sandbox.mirror / "notes.txt")) == Self.b("second") && Self.versions(sandbox).count == 2
        }
        #expect(kept, "versions: \(Self.versions(sandbox))\n\(agent.stderrText)")
        let notes = try #require(Self.versions(sandbox).first { $0.hasPrefix("notes~") })
        #expect(try FS.readFile(sandbox.mirror / ".keepsync-versions/\(notes)") == Self.b("first"))
        let gone = try #require(Self.versions(sandbox).first { $0.hasPrefix("gone~") })
        #expect(try FS.readFile(sandbox.mirror / ".keepsync-versions/\(gone)") == Self.b("gone"))
        try await RunCommandTests.stop(agent, sandbox)
    }
}
