import Glibc
import KeepSyncTestSupport
import Testing

/// The first `sync` of a tree with every kind of entry and awkward name.
@Suite(.serialized, .offThePool)
struct MirrorFidelityTests {
    static let cafe = bytes("caf") + [0xE9]
    static let newline = bytes("new\nline")
    static let longName = [UInt8](repeating: UInt8(ascii: "n"), count: 251) + bytes(".txt")
    static let fifo = bytes("a/b/pipe")

    /// Builds the rich tree in `root`, with past nanosecond mtimes set after all contents.
    static func buildRichTree(in root: [UInt8]) throws {
        try FS.writeFile(root / "zero", [])
        try FS.writeFile(root / "one", [0x41])
        try FS.writeFile(root / "four-kib", FS.pattern(count: 4096, seed: 4))
        try FS.writeFile(root / "one-mib", FS.pattern(count: 1 << 20, seed: 1))
        try FS.writeFile(root / "nine-mib", FS.pattern(count: 9 << 20, seed: 9))
        try FS.mkdir(root / "empty")
        try FS.mkdirs(root / "a/b/c/d")
        try FS.writeFile(root / "a/b/c/d/deep.txt", "deep\n")
        try FS.mkdir(root / "a/b/c/d/empty-deep")
        try FS.mkdir(root / "links")
        try FS.symlink(target: bytes("/usr/share/absolute/target"), at: root / "links/absolute")
        try FS.symlink(target: bytes("../one"), at: root / "links/relative")
        try FS.symlink(target: bytes("missing/nowhere"), at: root / "links/dangling")
        try FS.symlink(target: cafe, at: root / "links/to-cafe")
        try FS.writeFile(root / cafe, "latin-1 name\n")
        try FS.writeFile(root / newline, "newline in name\n")
        try FS.writeFile(root / "back\\slash", "backslash\n")
        try FS.writeFile(root / longName, "255-byte name\n")
        try FS.writeFile(root / "private", "secret\n", mode: 0o600)
        try FS.mkdir(root / "locked", mode: 0o700)
        try FS.writeFile(root / "locked/inner", "inside 0700\n", mode: 0o640)
        try FS.writeFile(root / "script", "#!/bin/sh\n", mode: 0o755)
        try FS.mkfifo(root / fifo)
        try FS.symlink(target: bytes("../a/b"), at: root / "links/to-directory")
        try FS.writeFile(root / "setuid", "#!/bin/sh\n", mode: 0o4755)
        try FS.mkdir(root / "sticky", mode: 0o1777)
        try FS.mkdir(root / "read-only", mode: 0o555)
        try FS.writeFile(root / "read-only/file", "in a 0555 directory\n", mode: 0o444)
        try FS.chmod(root / "read-only", 0o555)
        try FS.writeFile(root / "hard-1", "hard linked\n")
        try FS.check(FS.withCPath(root / "hard-1") { a in FS.withCPath(root / "hard-2") { link(a, $0) } }, "link", root / "hard-2")
        try FS.writeFile(root / "no-access", "mode 0000\n", mode: 0)
        try FS.mkdir(root / "closed")
        try FS.writeFile(root / "closed/file", "in a 0000 directory\n")
        try FS.chmod(root / "closed", 0)
        try FS.chmod(root, 0o750)
        // Past mtimes with distinct nanoseconds, set after all contents.
        try FS.setPastTimes(under: root)
    }

    @Test func aFirstSyncMirrorsEveryNameKindModeMtimeAndTargetExactly() throws {
        let sandbox = try Sandbox()
        try Self.buildRichTree(in: sandbox.source)
        let before = try sandbox.sourceSnapshot()
        try #require(before.entries[Self.fifo]?.kind == .fifo)
        try #require(before.entries[[]]?.mtimeNanoseconds != 0)

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")

        let mirror = try sandbox.mirrorSnapshot()
        let diff = before.removing([Self.fifo]).differences(to: mirror)
        #expect(diff.isEmpty, "mirror differs from source:\n\(diff.joined(separator: "\n"))")
        #expect(mirror.entries[Self.fifo] == nil, "the FIFO must not be mirrored")
        #expect(mirror.entries[Self.cafe]?.content == bytes("latin-1 name\n"))
        #expect(mirror.entries[Self.longName]?.kind == .regular)
        #expect(mirror.entries[bytes("nine-mib")]?.content?.count == 9 << 20)
        #expect(mirror.entries[bytes("private")]?.permissions == 0o600)
        #expect(mirror.entries[bytes("locked")]?.permissions == 0o700)
        #expect(mirror.entries[[]]?.permissions == 0o750, "the mirror root gets the source root's mode")
        #expect(mirror.entries[bytes("setuid")]?.permissions == 0o4755)
        #expect(mirror.entries[bytes("sticky")]?.permissions == 0o1777)
        #expect(mirror.entries[bytes("links/to-directory")]?.kind == .symlink, "a link to a directory stays a link")
        #expect(mirror.infos[bytes("hard-1")]?.inode != mirror.infos[bytes("hard-2")]?.inode,
                "hard links become independent copies")
        #expect(mirror.entries[[]]?.mtimeSeconds == before.entries[[]]?.mtimeSeconds)
        #expect(mirror.entries[[]]?.mtimeNanoseconds == before.entries[[]]?.mtimeNanoseconds)
        #expect(try sandbox.sourceSnapshot().differences(to: before).isEmpty, "sync must not change the source")
    }

    @Test func aSkippedFifoIsWarnedAboutOnceOnStderr() throws {
        let sandbox = try Sandbox()
        try Self.buildRichTree(in: sandbox.source)
        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        let mentions = result.stderrLines.filter { $0.contains("a/b/pipe") }
        #expect(mentions.count == 1, "expected one warning naming a/b/pipe:\n\(result.stderrText)")
        #expect(mentions.first?.contains("warning") == true, "\(mentions)")
        #expect(result.errorLines.isEmpty, "\(result)")
    }

    @Test func checkAfterTheFirstSyncFindsZeroDifferences() throws {
        let sandbox = try Sandbox()
        try Self.buildRichTree(in: sandbox.source)
        try #require(try sandbox.sync().status == 0)
        let check = try sandbox.check()
        #expect(check.status == 0, "\(check)")
        #expect(check.stdoutText == "0 differences\n", "\(check)")
    }

    @Test func aSecondSyncOfAnUnchangedTreeRewritesNothing() throws {
        let sandbox = try Sandbox()
        try Self.buildRichTree(in: sandbox.source)
        try #require(try sandbox.sync().status == 0)
        let first = try sandbox.mirrorSnapshot()
        let again = try sandbox.sync()
        #expect(again.status == 0, "\(again)")
        let second = try sandbox.mirrorSnapshot()
        #expect(first.differences(to: second).isEmpty)
        let touched = first.identityChanges(to: second, only: [.regular, .symlink])
        #expect(touched.isEmpty, "a sync with nothing to do rewrote: \(touched)")
    }
}
