import Glibc
import Testing
import KeepSyncTestSupport

/// What `keepsync check` prints and returns.
@Suite(.serialized, .offThePool)
struct CheckOutputTests {
    @Test func aSameSizeContentChangeWithANewMtimeIsOneTildeLine() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.overwrite(sandbox.source / "dir/file.txt", bytes("HELLO WORLD\n"))
        try FS.setTimes(sandbox.source / "dir/file.txt", seconds: pastSeconds + 1000, nanoseconds: 5)
        let mirrorBefore = try sandbox.mirrorSnapshot()

        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutText == "~ dir/file.txt\n1 difference\n", "\(check)")
        let mirrorAfter = try sandbox.mirrorSnapshot()
        #expect(mirrorBefore.differences(to: mirrorAfter).isEmpty, "check must change nothing")
        #expect(mirrorBefore.infos[bytes("dir/file.txt")]?.inode == mirrorAfter.infos[bytes("dir/file.txt")]?.inode)
    }

    @Test func aFileMissingInTheMirrorIsAPlusLine() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.unlink(sandbox.mirror / "dir/file.txt")
        try FS.copyMtime(from: sandbox.source / "dir", to: sandbox.mirror / "dir")

        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutText == "+ dir/file.txt\n1 difference\n", "\(check)")
    }

    @Test func aDirectoryMissingInTheMirrorListsEveryEntry() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try ScratchDirectory.removeTree(sandbox.mirror / "dir")
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)

        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutText == "+ dir\n+ dir/file.txt\n+ dir/sub\n+ dir/sub/x\n4 differences\n", "\(check)")
    }

    @Test func anExtraMirrorDirectoryWithTwoFilesIsThreeMinusLines() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.mkdir(sandbox.mirror / "extra")
        try FS.writeFile(sandbox.mirror / "extra/one", "1")
        try FS.writeFile(sandbox.mirror / "extra/two", "2")
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)

        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutText == "- extra\n- extra/one\n- extra/two\n3 differences\n", "\(check)")
    }

    @Test func noDeleteHidesMinusLinesAndTheyDoNotCount() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.mkdir(sandbox.mirror / "extra")
        try FS.writeFile(sandbox.mirror / "extra/one", "1")
        try FS.writeFile(sandbox.mirror / "extra/two", "2")
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)

        let clean = try sandbox.check("--no-delete")
        #expect(clean.status == 0, "\(clean)")
        #expect(clean.stdoutText == "0 differences\n", "\(clean)")

        try FS.overwrite(sandbox.source / "top.txt", bytes("TOP\n"))
        try FS.setTimes(sandbox.source / "top.txt", seconds: pastSeconds + 1000, nanoseconds: 0)
        let changed = try sandbox.check("--no-delete")
        #expect(changed.status == 1, "\(changed)")
        #expect(changed.stdoutText == "~ top.txt\n1 difference\n", "\(changed)")
    }

    @Test func namesArePrintedWithNonPrintableBytesAndBackslashEscaped() throws {
        let sandbox = try Sandbox()
        let names = [bytes("back\\slash"), bytes("caf") + [0xE9], bytes("new\nline"), bytes("tab\there")]
        for name in names { try FS.writeFile(sandbox.source / name, "x") }
        try FS.setPastTimes(under: sandbox.source)
        try #require(try sandbox.sync().status == 0)
        try sandbox.expectMirrorEqualsSource()
        for name in names { try FS.unlink(sandbox.mirror / name) }
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)

        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutText == "+ back\\x5cslash\n+ caf\\xe9\n+ new\\x0aline\n+ tab\\x09here\n4 differences\n",
                "\(check)")
    }

    @Test func aDirectoryWhoseOnlyDifferenceIsItsMtimeIsATildeLine() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.setTimes(sandbox.mirror / "dir/sub", seconds: pastSeconds - 50, nanoseconds: 1)

        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutText == "~ dir/sub\n1 difference\n", "\(check)")
    }

    @Test func theMirrorRootIsNamedDot() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.chmod(sandbox.mirror, 0o700)

        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutText == "~ .\n1 difference\n", "\(check)")
        #expect(try sandbox.sync().status == 0)
        #expect(FS.lstat(sandbox.mirror)?.permissions == 0o755)
    }
}
