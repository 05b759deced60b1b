import Glibc
import Testing
import KeepSyncTestSupport
import KeepSyncCore

/// Type changes, content comparison and confinement to the mirror.
@Suite(.serialized, .offThePool)
struct TreeChangeTests {
    @Test func typeChangesInTheSourceAreMirrored() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file-becomes-dir", "f\n")
        try FS.mkdir(sandbox.source / "dir-becomes-file")
        try FS.writeFile(sandbox.source / "dir-becomes-file/inner", "i\n")
        try FS.symlink(target: bytes("somewhere"), at: sandbox.source / "link-becomes-file")
        try FS.writeFile(sandbox.source / "file-becomes-link", "l\n")
        try FS.writeFile(sandbox.source / "steady", "s\n")
        try FS.setPastTimes(under: sandbox.source)
        try #require(try sandbox.sync().status == 0)
        try sandbox.expectMirrorEqualsSource()

        try FS.unlink(sandbox.source / "file-becomes-dir")
        try FS.mkdir(sandbox.source / "file-becomes-dir")
        try FS.writeFile(sandbox.source / "file-becomes-dir/child", "c\n")
        try ScratchDirectory.removeTree(sandbox.source / "dir-becomes-file")
        try FS.writeFile(sandbox.source / "dir-becomes-file", "now a file\n")
        try FS.unlink(sandbox.source / "link-becomes-file")
        try FS.writeFile(sandbox.source / "link-becomes-file", "now a file\n")
        try FS.unlink(sandbox.source / "file-becomes-link")
        try FS.symlink(target: bytes("steady"), at: sandbox.source / "file-becomes-link")

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
        let check = try sandbox.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(check)")
    }

    @Test func contentComparisonFindsAndRepairsAChangeThatMetadataHides() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        // Same size, same mtime, different bytes, same inode in the mirror.
        try FS.overwrite(sandbox.mirror / "dir/file.txt", bytes("HELLO WORLD\n"))
        try FS.copyMtime(from: sandbox.source / "dir/file.txt", to: sandbox.mirror / "dir/file.txt")

        let quick = try sandbox.check()
        #expect(quick.status == 0 && quick.stdoutText == "0 differences\n", "metadata alone cannot see it: \(quick)")
        let thorough = try sandbox.check("--content")
        #expect(thorough.status == 1, "\(thorough)")
        #expect(thorough.stdoutText == "~ dir/file.txt\n1 difference\n", "\(thorough)")

        let repaired = try sandbox.sync("--content")
        #expect(repaired.status == 0, "\(repaired)")
        try sandbox.expectMirrorEqualsSource()
        let after = try sandbox.check("--content")
        #expect(after.status == 0 && after.stdoutText == "0 differences\n", "\(after)")
    }

    @Test func aMirrorDirectorySwappedForALinkIsNotFollowed() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let outside = sandbox.root / "outside"
        try FS.mkdir(outside)
        try ScratchDirectory.removeTree(sandbox.mirror / "dir")
        try FS.symlink(target: outside, at: sandbox.mirror / "dir")
        try FS.writeFile(sandbox.source / "dir/file.txt", "changed content\n")
        try FS.writeFile(sandbox.source / "dir/new.txt", "new\n")

        let result = try sandbox.sync()
        #expect(result.status == 0 || result.status == 1, "\(result)")
        let leaked = try FS.list(outside)
        #expect(leaked.isEmpty, "keepsync wrote through a link out of the mirror: \(leaked.map { ByteEscaping.escape($0) })")
        let again = try sandbox.sync()
        #expect(again.status == 0, "\(again)")
        try sandbox.expectMirrorEqualsSource()
        #expect(try FS.list(outside).isEmpty)
    }

    @Test func aMirrorPathThatIsALinkIsResolvedToItsTarget() throws {
        // `--mirror` itself naming a link is resolved like any path (realpath): the
        // resolved directory is the mirror. Only links *inside* the mirror are never followed.
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        let real = sandbox.root / "real-mirror"
        try FS.mkdir(real)
        try FS.symlink(target: real, at: sandbox.mirror)
        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        #expect(try FS.readFile(real / "file") == bytes("data\n"))
    }
}
