import Foundation
import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// `--versions-dir` outside the mirror, on its file system (SPEC "Versions": "elsewhere on
/// the mirror's file system, exit 2 when it is on another one"): `sync` and `run` link a
/// replaced file there and move a removed one there, by inode (no byte copied); `versions`
/// lists them, `restore` brings one back, status.json counts them; the mirror holds no
/// versions directory of its own. Another file system (a tmpfs) is exit 2 naming the path.
@Suite("Versions elsewhere on the mirror's file system, end to end", .serialized, .offThePool)
struct VersionsElsewhereTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    /// The versions directory's entries below `relative`, as names.
    static func names(_ versions: [UInt8], _ relative: String = "") -> [String] {
        let dir = relative.isEmpty ? versions : versions / relative
        return ((try? FS.list(dir)) ?? []).map { String(decoding: $0, as: UTF8.self) }.sorted()
    }

    /// `docs/report.odt`, `old/deep/f.txt` and `gone.txt` in the source.
    static func plant(_ sandbox: Sandbox) throws {
        try FS.mkdirs(sandbox.source / "docs")
        try FS.mkdirs(sandbox.source / "old/deep")
        try FS.writeFile(sandbox.source / "docs/report.odt", "one")
        try FS.writeFile(sandbox.source / "old/deep/f.txt", "f")
        try FS.writeFile(sandbox.source / "gone.txt", "gone")
    }

    /// The report overwritten, `old/` and `gone.txt` removed (`old/` moved out of the
    /// source at once when `watched`: one event for the directory, whatever the timing).
    static func damage(_ sandbox: Sandbox, watched: Bool = false) throws {
        try FS.overwrite(sandbox.source / "docs/report.odt", b("two"))
        if watched {
            try FS.rename(sandbox.source / "old", sandbox.root / "old-out-of-the-source")
        } else {
            try ScratchDirectory.removeTree(sandbox.source / "old")
        }
        try FS.unlink(sandbox.source / "gone.txt")
    }

    /// The mirror's inodes of what `damage` replaces or removes.
    struct Inodes {
        var report: UInt64, old: UInt64, gone: UInt64
        init(_ mirror: [UInt8]) throws {
            report = try #require(FS.lstat(mirror / "docs/report.odt")).inode
            old = try #require(FS.lstat(mirror / "old")).inode
            gone = try #require(FS.lstat(mirror / "gone.txt")).inode
        }
    }

    /// What `damage` left in `versions`: each with its old content and its old inode.
    static func expectKept(_ versions: [UInt8], _ inodes: Inodes, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let report = try #require(names(versions, "docs").first { $0.hasPrefix("report~") && $0.hasSuffix("Z.odt") },
                                  "\(names(versions)) docs: \(names(versions, "docs"))", sourceLocation: sourceLocation)
        #expect(try FS.readFile(versions / "docs/\(report)") == b("one"), sourceLocation: sourceLocation)
        #expect(FS.lstat(versions / "docs/\(report)")?.inode == inodes.report, "linked, not copied", sourceLocation: sourceLocation)
        let old = try #require(names(versions).first { $0.hasPrefix("old~") }, "\(names(versions))", sourceLocation: sourceLocation)
        #expect(FS.lstat(versions / old)?.inode == inodes.old, "moved whole", sourceLocation: sourceLocation)
        #expect(try FS.readFile(versions / "\(old)/deep/f.txt") == b("f"), sourceLocation: sourceLocation)
        let gone = try #require(names(versions).first { $0.hasPrefix("gone~") && $0.hasSuffix("Z.txt") }, "\(names(versions))",
                                sourceLocation: sourceLocation)
        #expect(FS.lstat(versions / gone)?.inode == inodes.gone, "moved", sourceLocation: sourceLocation)
        #expect(try FS.readFile(versions / gone) == b("gone"), sourceLocation: sourceLocation)
    }

    @Test("sync keeps versions in a directory beside the mirror by inode, made 0700; versions lists them by absolute path, restore brings one back, status.json counts them, the mirror has no versions directory")
    func syncKeepsVersionsElsewhere() throws {
        let sandbox = try Sandbox()
        let versions = sandbox.root / "V/kept"
        let keep: [any CommandArgument] = ["--keep-versions", "30d", "--versions-dir", versions]
        try Self.plant(sandbox)
        let first = try sandbox.sync(keep)
        #expect(first.status == 0, "\(first)")
        #expect(FS.lstat(versions).map { $0.kind == .directory && $0.permissions & 0o777 == 0o700 } == true, "made at start, 0700")
        let inodes = try Inodes(sandbox.mirror)
        try Self.damage(sandbox)
        let second = try sandbox.sync(keep)
        #expect(second.status == 0, "\(second)")
        #expect(try FS.readFile(sandbox.mirror / "docs/report.odt") == Self.b("two"))
        #expect(FS.lstat(sandbox.mirror / "old") == nil && FS.lstat(sandbox.mirror / "gone.txt") == nil)
        try Self.expectKept(versions, inodes)
        #expect(FS.lstat(sandbox.mirror / ".keepsync-versions") == nil, "nothing kept in the mirror")
        let check = try sandbox.check()
        #expect(check.status == 0 && check.stdoutLines == ["0 differences"], "\(check)")
        let status = try #require(RunCommandTests.status(sandbox)?["versions"] as? [String: Any], "\(RunCommandTests.statusText(sandbox))")
        #expect(status["count"] as? Int == 3 && status["bytes"] as? Int == 3 + 1 + 4, "\(status)")

        let listed = try sandbox.keepsync(["versions"] + sandbox.paths + ["--versions-dir", versions])
        #expect(listed.status == 0 && listed.stdoutLines.count == 3, "\(listed)")
        #expect(Set(listed.stdoutLines.map { String($0.split(separator: " ").last!) }) == ["docs/report.odt", "old/", "gone.txt"], "\(listed)")
        let json = try sandbox.keepsync(["versions"] + sandbox.paths + ["--versions-dir", versions, "--json", "gone.txt"])
        let items = try #require(JSONSerialization.jsonObject(with: Data(json.stdout)) as? [[String: Any]], "\(json)")
        let named = try #require(items.first?["version"] as? String, "\(json)")
        #expect(items.count == 1 && named.hasPrefix(String(decoding: versions, as: UTF8.self) + "/gone~"), "\(json)")
        #expect(try FS.readFile(Self.b(named)) == Self.b("gone"), "an absolute path to the version")

        let restored = try sandbox.keepsync(["restore"] + sandbox.paths + ["--versions-dir", versions, "gone.txt"])
        #expect(restored.status == 0 && restored.stdoutLines.first?.hasPrefix("restored gone.txt from the version of ") == true, "\(restored)")
        #expect(try FS.readFile(sandbox.source / "gone.txt") == Self.b("gone"))
        let deep = try sandbox.keepsync(["restore"] + sandbox.paths + ["--versions-dir", versions, "old/deep/f.txt"])
        #expect(deep.status == 0 && (try? FS.readFile(sandbox.source / "old/deep/f.txt")) == Self.b("f"), "\(deep)")
    }

    @Test("run keeps a file overwritten and a file and a directory removed while it watches in the directory elsewhere, by inode")
    func runKeepsVersionsElsewhere() async throws {
        let sandbox = try Sandbox()
        let versions = sandbox.root / "V"
        try Self.plant(sandbox)
        let agent = try await RunCommandTests.start(sandbox, ["--keep-versions", "1d", "--versions-dir", versions])
        defer { agent.killNow() }
        let synced = await eventually(timeout: .seconds(30)) {
            (try? FS.readFile(sandbox.mirror / "old/deep/f.txt")) == Self.b("f") && FS.exists(sandbox.mirror / "gone.txt")
        }
        try #require(synced, "\(agent.stderrText)")
        let inodes = try Inodes(sandbox.mirror)
        try Self.damage(sandbox, watched: true)
        let kept = await eventually(timeout: .seconds(30)) {
            (try? FS.readFile(sandbox.mirror / "docs/report.odt")) == Self.b("two") && Self.names(versions).count == 3
                && !FS.exists(sandbox.mirror / "old")
        }
        #expect(kept, "versions: \(Self.names(versions))\n\(agent.stderrText)")
        try Self.expectKept(versions, inodes)
        #expect(FS.lstat(sandbox.mirror / ".keepsync-versions") == nil, "nothing kept in the mirror")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test("a versions directory on another file system than the mirror (a tmpfs) is exit 2 naming the flag and the path; nothing is synced")
    func anotherFileSystemIsRefused() throws {
        guard geteuid() == 0 else { try Test.cancel("needs root to mount a tmpfs") }
        let disk: LoopMount
        do { disk = try LoopMount(.tmpfs, sizeMiB: 8) } catch { try Test.cancel("cannot mount a tmpfs here: \(error)") }
        defer { disk.destroy() }
        let sandbox = try Sandbox()
        try Self.plant(sandbox)
        for versions in [disk.path / "versions", disk.path] {
            let refused = try sandbox.keepsync(["sync"] + sandbox.paths + ["--keep-versions", "30d", "--versions-dir", versions])
            let shown = String(decoding: versions, as: UTF8.self)
            #expect(refused.status == 2, "\(refused)")
            #expect(refused.errorLines == ["keepsync: error: --versions-dir \(shown): is on another file system than the mirror "
                                           + "(\(String(decoding: sandbox.mirror, as: UTF8.self))); versions are hard links and "
                                           + "renames, which stay on one file system"], "\(refused)")
        }
        #expect(!FS.exists(sandbox.mirror) && !FS.exists(disk.path / "versions"), "nothing made")
        let run = try sandbox.keepsync(["run"] + sandbox.paths + ["--keep-versions", "1d", "--versions-dir", disk.path / "v"])
        #expect(run.status == 2 && run.errorLines.first?.contains("--versions-dir \(String(decoding: disk.path / "v", as: UTF8.self)): is on another file system") == true, "\(run)")
    }
}
