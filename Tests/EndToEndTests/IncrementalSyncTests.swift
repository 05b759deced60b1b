import Foundation
import Glibc
import KeepSyncTestSupport
import Testing
import KeepSyncCore

/// A resync touches only what differs, and repairs a mirror changed behind keepsync's back.
@Suite(.serialized, .offThePool)
struct IncrementalSyncTests {
    /// A source with several files, a link and nested directories, synced once.
    static func prepare(_ sandbox: Sandbox) throws {
        try FS.mkdirs(sandbox.source / "docs/deep")
        try FS.writeFile(sandbox.source / "a.txt", "alpha\n")
        try FS.writeFile(sandbox.source / "b.bin", FS.pattern(count: 70_000, seed: 7))
        try FS.writeFile(sandbox.source / "docs/c.txt", "charlie\n", mode: 0o600)
        try FS.writeFile(sandbox.source / "docs/deep/d.txt", "delta\n")
        try FS.writeFile(sandbox.source / "docs/deep/e.txt", "echo\n")
        try FS.symlink(target: bytes("docs/c.txt"), at: sandbox.source / "link")
        try FS.setPastTimes(under: sandbox.source)
        let result = try sandbox.sync()
        try #require(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
    }

    /// Expects every non-directory mirror entry except `changed` to keep its inode and ctime.
    static func expectUntouched(_ before: TreeSnapshot, _ after: TreeSnapshot, except changed: [[UInt8]],
                                sourceLocation: SourceLocation = #_sourceLocation) {
        let touched = before.removing(changed).identityChanges(to: after.removing(changed), only: [.regular, .symlink])
        #expect(touched.isEmpty, "unchanged entries were rewritten: \(touched)", sourceLocation: sourceLocation)
    }

    /// SPEC "Mirrors on file systems that hold less": the file-system probe runs once per
    /// mirror; every other start reuses the recorded limits, so a no-op `sync` and a
    /// restart change nothing in the mirror, not even the root's ctime.
    @Test func aNoOpSyncAndARestartLeaveTheMirrorRootsCtimeAlone() async throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let before = try #require(FS.lstat(sandbox.mirror))
        let again = try sandbox.sync()
        #expect(again.status == 0, "\(again)")
        let afterSync = try #require(FS.lstat(sandbox.mirror))
        #expect(afterSync.ctimeNanosecondsTotal == before.ctimeNanosecondsTotal,
                "a no-op sync changed the mirror root's ctime (\(before.ctimeNanosecondsTotal) -> \(afterSync.ctimeNanosecondsTotal))")
        let agent = try sandbox.spawnRun()
        let watching = await eventually(timeout: .seconds(30)) {
            sandbox.statusJSON?["state"] as? String == "watching" || agent.poll() != nil
        }
        try #require(watching && agent.poll() == nil, "not watching\n\(agent.diagnostics)")
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "\(agent.diagnostics)")
        let afterRestart = try #require(FS.lstat(sandbox.mirror))
        #expect(afterRestart.ctimeNanosecondsTotal == before.ctimeNanosecondsTotal,
                "a restart changed the mirror root's ctime (\(before.ctimeNanosecondsTotal) -> \(afterRestart.ctimeNanosecondsTotal))")
        #expect(afterRestart.mtimeSeconds == before.mtimeSeconds && afterRestart.mtimeNanoseconds == before.mtimeNanoseconds)
    }

    @Test func aResyncGivesOnlyTheChangedFileANewInode() throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        let changed = bytes("docs/deep/d.txt")
        try FS.overwrite(sandbox.source / changed, bytes("DELTA\n"))
        try FS.setTimes(sandbox.source / changed, seconds: pastSeconds + 5000, nanoseconds: 42)
        let before = try sandbox.mirrorSnapshot()

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
        let after = try sandbox.mirrorSnapshot()
        #expect(after.infos[changed]?.inode != before.infos[changed]?.inode, "the changed file must be replaced atomically")
        #expect(after.entries[changed]?.content == bytes("DELTA\n"))
        Self.expectUntouched(before, after, except: [changed])
        for path in before.paths where before.entries[path]?.kind == .directory {
            #expect(before.infos[path]?.inode == after.infos[path]?.inode, "directory \(ByteEscaping.escape(path)) was replaced")
        }
    }

    @Test func aMirrorFileAppendedToBehindKeepsyncsBackIsRepaired() throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        let victim = bytes("docs/c.txt")
        try FS.append(sandbox.mirror / victim, bytes("garbage"))
        try FS.copyMtime(from: sandbox.source / victim, to: sandbox.mirror / victim)
        let before = try sandbox.mirrorSnapshot()

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
        Self.expectUntouched(before, try sandbox.mirrorSnapshot(), except: [victim])
    }

    @Test func aMirrorFileReplacedBySameSizeSameMtimeCopyWithANewInodeIsRepaired() throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        let victim = bytes("a.txt")
        let impostor = sandbox.mirror / "impostor"
        try FS.writeFile(impostor, bytes("ALPHA\n"), mode: 0o644)
        try FS.copyMtime(from: sandbox.source / victim, to: impostor)
        try FS.rename(impostor, sandbox.mirror / victim)
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)
        let planted = try #require(FS.lstat(sandbox.mirror / victim))
        let original = try #require(FS.lstat(sandbox.source / victim))
        try #require(planted.size == original.size && planted.mtimeSeconds == original.mtimeSeconds
                     && planted.mtimeNanoseconds == original.mtimeNanoseconds && planted.permissions == original.permissions)
        let before = try sandbox.mirrorSnapshot()

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
        #expect(try FS.readFile(sandbox.mirror / victim) == bytes("alpha\n"))
        Self.expectUntouched(before, try sandbox.mirrorSnapshot(), except: [victim])
    }

    @Test func aMirrorFileWithChangedModeOrALinkWithAChangedTargetIsRepaired() throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        try FS.chmod(sandbox.mirror / "docs/c.txt", 0o666)
        try FS.unlink(sandbox.mirror / "link")
        try FS.symlink(target: bytes("elsewhere"), at: sandbox.mirror / "link")
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
    }

    /// Whether the file system under `path` reports birth times (`stat -c %W` > 0).
    static func reportsBirthTime(_ sandbox: Sandbox, _ path: [UInt8]) throws -> Bool {
        let stat = try ChildProcess.run(bytes("/usr/bin/stat"), arguments: [bytes("-c"), bytes("%W"), path],
                                        environment: ["LANG": "C"])
        return stat.status == 0 && (Int(stat.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) > 0
    }

    @Test func aFileRenamedInTheSourceBetweenSyncsIsRenamedInTheMirrorNotCopied() throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        // The identity is only certain where the file system reports a birth time or generation.
        guard try Self.reportsBirthTime(sandbox, sandbox.source / "b.bin") else { return }
        // Hold the mirror file open: its inode number cannot be handed out again while we do,
        // so an equal inode afterwards proves a rename and not a delete plus a copy.
        let held = FS.withCPath(sandbox.mirror / "b.bin") { open($0, O_RDONLY | O_CLOEXEC) }
        try #require(held >= 0)
        defer { close(held) }
        let before = try #require(FS.lstat(sandbox.mirror / "b.bin"))
        try FS.rename(sandbox.source / "b.bin", sandbox.source / "docs/b-renamed.bin")

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
        let after = FS.lstat(sandbox.mirror / "docs/b-renamed.bin")
        #expect(after?.inode == before.inode,
                "a rename whose identity is certain (dev, inode, size, mtime, birth time) must be a rename in the mirror, not a copy")
    }

    /// Renames `docs` to `papers`, `papers/deep` to `papers/deeper`, moves `a.txt` into it
    /// and changes `papers/deeper/e.txt`; returns the mirror directory's inode before.
    static func renameFoldersWhileStopped(_ sandbox: Sandbox) throws -> UInt64 {
        guard try reportsBirthTime(sandbox, sandbox.source / "docs") else {
            try Test.cancel("the file system under /tmp reports no birth time: a rename cannot be certain")
        }
        let before = try #require(FS.lstat(sandbox.mirror / "docs")).inode
        try FS.rename(sandbox.source / "docs", sandbox.source / "papers")
        try FS.rename(sandbox.source / "papers/deep", sandbox.source / "papers/deeper")
        try FS.rename(sandbox.source / "a.txt", sandbox.source / "papers/deeper/a.txt")
        try FS.overwrite(sandbox.source / "papers/deeper/e.txt", bytes("ECHO!\n"))
        return before
    }

    @Test func aFolderRenamedBetweenSyncsIsRenamedInTheMirrorAndOnlyWhatChangedInsideIsCopied() throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        // The mirror directory stays open: its inode cannot be reused meanwhile.
        let held = FS.withCPath(sandbox.mirror / "docs") { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        try #require(held >= 0)
        defer { close(held) }
        let inode = try Self.renameFoldersWhileStopped(sandbox)

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        #expect(result.stderrText.contains("renamed docs to papers"), "\(result)")
        #expect(result.stderrText.contains("sync done: 1 file copied (6 B), 3 renamed"), "\(result)")
        #expect(!result.stderrText.contains("created directory") && !result.stderrText.contains("removed"), "\(result)")
        try sandbox.expectMirrorEqualsSource()
        #expect(FS.lstat(sandbox.mirror / "papers")?.inode == inode, "the mirror's folder itself was renamed")
        let check = try sandbox.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "one pass leaves nothing for the next: \(check)")
    }

    @Test func aFolderRenamedWhileTheAgentWasStoppedIsRenamedWhenItStartsAgain() async throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        var agent = try await RunCommandTests.start(sandbox)
        try await RunCommandTests.stop(agent, sandbox)
        let held = FS.withCPath(sandbox.mirror / "docs") { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        try #require(held >= 0)
        defer { close(held) }
        let inode = try Self.renameFoldersWhileStopped(sandbox)

        agent = try await RunCommandTests.start(sandbox)
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after the restart")
        #expect(FS.lstat(sandbox.mirror / "papers")?.inode == inode, "the mirror's folder itself was renamed\n\(agent.stderrText)")
        #expect(agent.stderrLines.contains { $0.contains("renamed docs to papers") }, "\(agent.stderrText)")
        #expect(!agent.stderrLines.contains { $0.contains("removed docs") }, "\(agent.stderrText)")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func aNewFileThatReusesAVanishedFilesInodeSizeAndMtimeIsCopiedNotRenamed() throws {
        let sandbox = try Sandbox()
        try Self.prepare(sandbox)
        let old = try #require(FS.lstat(sandbox.source / "a.txt"))
        // Unlink and create at once: ext4 and tmpfs usually hand out the freed inode number again.
        try FS.unlink(sandbox.source / "a.txt")
        try FS.writeFile(sandbox.source / "z.txt", "ALPHA!")
        try FS.setTimes(sandbox.source / "z.txt", seconds: old.mtimeSeconds, nanoseconds: old.mtimeNanoseconds)
        let new = try #require(FS.lstat(sandbox.source / "z.txt"))
        try #require(new.size == old.size)

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
        #expect(try FS.readFile(sandbox.mirror / "z.txt") == bytes("ALPHA!"),
                "inode reused: \(new.inode == old.inode); an inode number alone must not make a rename")
    }
}
