import Foundation
import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// `--keep-versions` with a remote mirror (issue 40): the layout of a local mirror's, the
/// old inode kept (rsync's backup links it, no byte copied), a removed directory moved
/// whole, nothing for a mode change or a rename, nothing left in the staging directory.
extension RemoteMirrorEndToEndTests {
    /// The versions directory's entries below `relative`, as names.
    static func versions(_ r: Remote, _ relative: String = "") -> [String] {
        let dir = r.sandbox.mirror / (".keepsync-versions" + (relative.isEmpty ? "" : "/" + relative))
        return ((try? FS.list(dir)) ?? []).map { String(decoding: $0, as: UTF8.self) }.sorted()
    }

    /// Files left in rsync's staging directory (none once a transfer is done).
    static func staged(_ r: Remote) -> Int {
        (try? TreeSnapshot.take(r.sandbox.mirror / ".keepsync-versions/.keepsync-incoming", contentLimit: 0))?
            .entries.filter { $0.value.kind != .directory }.count ?? 0
    }

    @Test("sync to a remote keeps a replaced file's old inode, a replaced symlink, a file renamed over, and a deleted directory whole; a mode change and a rename keep nothing; check and passes leave the versions alone; versions and restore read them over the connection",
          .timeLimit(.minutes(3)))
    func syncKeepsVersionsOnTheRemote() async throws {
        try await offThePool {
            let r = try Remote("syncKeepsVersionsOnTheRemote")
            let s = r.sandbox.source
            try FS.mkdirs(s / "docs")
            try FS.mkdirs(s / "old/deep")
            try FS.writeFile(s / "docs/report.odt", "one")
            try FS.writeFile(s / "old/deep/f.txt", "f")
            try FS.writeFile(s / "mode.sh", "echo")
            try FS.writeFile(s / "moved.txt", "moved")
            try FS.writeFile(s / "a.txt", "a")
            try FS.writeFile(s / "b.txt", "b")
            try FS.symlink(target: Self.b("docs"), at: s / "link")
            let first = try r.run("sync", ["--keep-versions", "30d"])
            #expect(first.status == 0, "\(first)")
            let oldReport = try #require(FS.lstat(r.sandbox.mirror / "docs/report.odt")).inode
            let oldDirectory = try #require(FS.lstat(r.sandbox.mirror / "old")).inode
            let oldB = try #require(FS.lstat(r.sandbox.mirror / "b.txt")).inode

            let before = Int64(time(nil))
            try FS.overwrite(s / "docs/report.odt", Self.b("two"))
            try ScratchDirectory.removeTree(s / "old")
            try FS.chmod(s / "mode.sh", 0o755)
            try FS.rename(s / "moved.txt", s / "renamed.txt")
            try FS.rename(s / "a.txt", s / "b.txt")
            try FS.unlink(s / "link")
            try FS.symlink(target: Self.b("old"), at: s / "link")
            let second = try r.run("sync", ["--keep-versions", "30d"])
            let after = Int64(time(nil))
            #expect(second.status == 0, "\(second)")
            #expect(try FS.readFile(r.sandbox.mirror / "docs/report.odt") == Self.b("two"))
            #expect(try FS.readFile(r.sandbox.mirror / "b.txt") == Self.b("a"))

            let report = try #require(Self.versions(r, "docs").first, "\(Self.versions(r))")
            #expect(Self.versions(r, "docs").count == 1 && report.hasPrefix("report~") && report.hasSuffix("Z.odt"), "\(report)")
            let tag = VersionName(parsing: Array(report.utf8))?.seconds
            #expect((tag.map { $0 >= before && $0 <= after }) == true, "\(report) tagged between \(before) and \(after)")
            #expect(try FS.readFile(r.sandbox.mirror / ".keepsync-versions/docs/\(report)") == Self.b("one"))
            #expect(FS.lstat(r.sandbox.mirror / ".keepsync-versions/docs/\(report)")?.inode == oldReport, "linked, not copied")
            let old = try #require(Self.versions(r).first { $0.hasPrefix("old~") }, "\(Self.versions(r))")
            #expect(FS.lstat(r.sandbox.mirror / ".keepsync-versions/\(old)")?.inode == oldDirectory, "moved whole")
            #expect(try FS.readFile(r.sandbox.mirror / ".keepsync-versions/\(old)/deep/f.txt") == Self.b("f"))
            // b.txt: replaced by a rename (or by a copy of a.txt's content: either keeps it).
            let b = try #require(Self.versions(r).first { $0.hasPrefix("b~") }, "\(Self.versions(r))")
            #expect(FS.lstat(r.sandbox.mirror / ".keepsync-versions/\(b)")?.inode == oldB)
            let link = try #require(Self.versions(r).first { $0.hasPrefix("link~") }, "\(Self.versions(r))")
            #expect(try FS.readlink(r.sandbox.mirror / ".keepsync-versions/\(link)") == Self.b("docs"))
            // No version for the mode change or the rename. A pass sees a.txt moved onto
            // b.txt as a copy and a removal, as on a local mirror: a.txt is kept too.
            let names = Self.versions(r).filter { $0 != "docs" && $0 != ".keepsync-incoming" }
            #expect(names.count == 4 && names.contains { $0.hasPrefix("a~") }, "only a~, old~, b~ and link~: \(names)")
            #expect(Self.staged(r) == 0, "rsync's staging is emptied")

            let check = try r.run("check")
            #expect(check.status == 0 && check.stdoutLines == ["0 differences"], "\(check)")
            let again = try r.run("sync", ["--keep-versions", "30d"])
            #expect(again.status == 0 && Self.versions(r, "docs") == [report], "\(again)")

            // Listed and restored over the connection.
            let listed = try r.run("versions", ["docs", "--json"])
            let array = (try? JSONSerialization.jsonObject(with: Data(listed.stdout))) as? [[String: Any]]
            #expect(listed.status == 0 && array?.count == 1 && array?.first?["path"] as? String == "docs/report.odt", "\(listed)")
            let into = r.sandbox.root / "restored"
            try FS.mkdirs(into)
            let restored = try r.run("restore", ["docs/report.odt", "--to", into])
            #expect(restored.status == 0 && (try? FS.readFile(into / "report.odt")) == Self.b("one"), "\(restored)")
            let folder = try r.run("restore", ["old", "--to", into])
            #expect(folder.status == 0 && (try? FS.readFile(into / "old/deep/f.txt")) == Self.b("f"), "\(folder)")
            let none = try r.run("restore", ["docs/none.txt"])
            #expect(none.status == 1 && none.errorLines == ["keepsync: error: restore: no version of docs/none.txt"], "\(none)")
        }
    }

    @Test("run with a remote mirror keeps each overwrite's old content at once (the latency path, an rsync started ahead) and a removed file",
          .timeLimit(.minutes(3)))
    func runKeepsVersionsOnTheRemote() async throws {
        try await offThePool {
            let r = try Remote("runKeepsVersionsOnTheRemote")
            try FS.writeFile(r.sandbox.source / "notes.txt", "v0")
            try FS.writeFile(r.sandbox.source / "gone.txt", "gone")
            let agent = try await r.start(["--keep-versions", "1d", "-v"])
            defer { agent.killNow() }
            try await r.expectConverges(agent, "the first pass")
            // Three overwrites one at a time: each replaced content is kept, the later ones
            // of one second as -2, -3.
            for i in 1...3 {
                try FS.overwrite(r.sandbox.source / "notes.txt", Self.b("v\(i)"))
                let arrived = await eventually(timeout: .seconds(30)) {
                    (try? FS.readFile(r.sandbox.mirror / "notes.txt")) == Self.b("v\(i)")
                        && Self.versions(r).filter { $0.hasPrefix("notes~") }.count == i
                }
                #expect(arrived, "overwrite \(i): \(Self.versions(r))\n\(agent.stderrText)")
            }
            // Ten files overwritten one after another, as an editor saves: each goes to an
            // rsync started ahead (one of the same arguments, versions' included), so a change
            // with versions waits no longer than one without; each old content is kept.
            for i in 0..<10 { try FS.writeFile(r.sandbox.source / "o\(i).dat", "old \(i)") }
            let ten = await eventually(timeout: .seconds(30)) {
                (0..<10).allSatisfy { (try? FS.readFile(r.sandbox.mirror / "o\($0).dat")) == Self.b("old \($0)") }
            }
            try #require(ten, "ten new files: \(agent.stderrText)")
            let before = agent.stderrText.split(separator: "\n").filter { $0.contains("(started ahead)") }.count
            for i in 0..<10 {
                try FS.overwrite(r.sandbox.source / "o\(i).dat", Self.b("new \(i)"))
                let arrived = await eventually(timeout: .seconds(30)) { (try? FS.readFile(r.sandbox.mirror / "o\(i).dat")) == Self.b("new \(i)") }
                #expect(arrived, "o\(i).dat")
            }
            let keptTen = await eventually(timeout: .seconds(30)) { Self.versions(r).filter { $0.hasPrefix("o") }.count == 10 }
            #expect(keptTen, "\(Self.versions(r))")
            let ahead = agent.stderrText.split(separator: "\n").filter { $0.contains("(started ahead)") }.count - before
            #expect(ahead >= 8, "\(ahead) of 10 overwrites went to an rsync started ahead:\n\(agent.stderrText)")
            try FS.unlink(r.sandbox.source / "gone.txt")
            let removed = await eventually(timeout: .seconds(30)) { Self.versions(r).contains { $0.hasPrefix("gone~") } }
            #expect(removed, "\(Self.versions(r))\n\(agent.stderrText)")
            let contents = Set(Self.versions(r).filter { $0.hasPrefix("notes~") }.compactMap {
                try? FS.readFile(r.sandbox.mirror / ".keepsync-versions/\($0)")
            })
            #expect(contents == Set(["v0", "v1", "v2"].map(Self.b)), "every replaced content once")
            #expect(Self.staged(r) == 0, "rsync's staging is emptied")
            try await RunCommandTests.stop(agent, r.sandbox)
        }
    }
}
