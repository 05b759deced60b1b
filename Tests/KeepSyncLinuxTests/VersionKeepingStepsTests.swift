import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// `VersionKeepingSteps` over `AtomicFileAccessor` on this machine's disk (issue 40,
/// items 1-2): what a replace, a rename onto a name and a removal leave in the versions
/// directory, by inode (a link or a move, never a copy), and what leaves none.
@Suite("Versions on a local mirror")
struct VersionKeepingStepsTests {
    typealias LiveFS = LiveMirrorTests.LiveFS
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }
    /// 2026-12-07 01:30:00 UTC.
    static let t: Int64 = 1_796_607_000

    final class Fixture {
        let base: [UInt8], source: [UInt8], mirror: [UInt8]
        let sourceFS: PosixFileSystem
        let keeper: VersionKeepingSteps

        init() throws {
            base = try ScratchDirectory.make(prefix: "keepsync-versions")
            source = base + VersionKeepingStepsTests.b("/source")
            mirror = base + VersionKeepingStepsTests.b("/mirror")
            for dir in [source, mirror] { try LiveFS.mkdir(dir, mode: 0o755) }
            sourceFS = try PosixFileSystem(rootPath: source)
            keeper = VersionKeepingSteps(try AtomicFileAccessor(rootPath: mirror), directory: RelativePath(".keepsync-versions"),
                                         now: { VersionKeepingStepsTests.t })
        }

        deinit { try? ScratchDirectory.removeTree(base) }

        func src(_ p: String) -> [UInt8] { source + [0x2F] + VersionKeepingStepsTests.b(p) }
        func mir(_ p: String) -> [UInt8] { mirror + [0x2F] + VersionKeepingStepsTests.b(p) }
        func inode(_ p: String) -> UInt64? { LiveFS.lstat(mir(p)).map { UInt64($0.st_ino) } }

        /// The source's `p` installed into the mirror through the keeper.
        func install(_ p: String) throws {
            _ = try keeper.install(RelativePath(p), from: try sourceFS.open(RelativePath(p)))
        }
    }

    @Test("a replaced file's old inode gets a second name in the versions directory before the new one is renamed over the name; a second replace in that second is -2")
    func replaceLinksTheOldFile() throws {
        let f = try Fixture()
        try LiveFS.mkdir(f.src("docs"), mode: 0o755)
        try LiveFS.mkdir(f.mir("docs"), mode: 0o755)
        try LiveFS.writeFile(f.mir("docs/report.odt"), Self.b("old"))
        let old = try #require(f.inode("docs/report.odt"))
        try LiveFS.writeFile(f.src("docs/report.odt"), Self.b("new"))
        try f.install("docs/report.odt")
        let version = ".keepsync-versions/docs/report~20261207-013000Z.odt"
        #expect(try LiveFS.readFile(f.mir("docs/report.odt")) == Self.b("new"))
        #expect(try LiveFS.readFile(f.mir(version)) == Self.b("old"))
        #expect(f.inode(version) == old, "the old inode itself, no byte copied")
        #expect(f.inode("docs/report.odt") != old)

        try LiveFS.writeFile(f.src("docs/report.odt"), Self.b("newer"))
        try f.install("docs/report.odt")
        #expect(try LiveFS.readFile(f.mir(".keepsync-versions/docs/report~20261207-013000Z-2.odt")) == Self.b("new"))
        #expect(f.keeper.kept.linked == 2 && f.keeper.kept.moved == 0, "\(f.keeper.kept)")
        #expect(LiveFS.lstat(f.mir(".keepsync-versions")).map { $0.st_mode & 0o777 } == 0o700, "private to its owner")
    }

    @Test("a removed directory moves whole (its own inode, every file in it) in one rename; a removed file and symlink move too")
    func removeMovesWhole() throws {
        let f = try Fixture()
        try LiveFS.mkdir(f.mir("photos.2020"), mode: 0o755)
        try LiveFS.mkdir(f.mir("photos.2020/june"), mode: 0o755)
        try LiveFS.writeFile(f.mir("photos.2020/june/a.jpg"), Self.b("jpeg"))
        try LiveFS.writeFile(f.mir("Makefile"), Self.b("all:"))
        #expect(symlink("target", String(decoding: f.mir("link"), as: UTF8.self)) == 0)
        let directory = try #require(f.inode("photos.2020"))
        for p in ["photos.2020", "Makefile", "link"] { try f.keeper.remove(RelativePath(p)) }
        #expect(LiveFS.lstat(f.mir("photos.2020")) == nil && LiveFS.lstat(f.mir("Makefile")) == nil && LiveFS.lstat(f.mir("link")) == nil)
        #expect(f.inode(".keepsync-versions/photos.2020~20261207-013000Z") == directory)
        #expect(try LiveFS.readFile(f.mir(".keepsync-versions/photos.2020~20261207-013000Z/june/a.jpg")) == Self.b("jpeg"))
        #expect(try LiveFS.readFile(f.mir(".keepsync-versions/Makefile~20261207-013000Z")) == Self.b("all:"))
        #expect(LiveFS.lstat(f.mir(".keepsync-versions/link~20261207-013000Z")).map { $0.st_mode & S_IFMT == S_IFLNK } == true)
        #expect(f.keeper.kept.moved == 3 && f.keeper.kept.linked == 0)
        // Inside the versions directory, a removal removes (retention).
        try f.keeper.remove(RelativePath(".keepsync-versions/Makefile~20261207-013000Z"))
        #expect(LiveFS.lstat(f.mir(".keepsync-versions/Makefile~20261207-013000Z")) == nil)
        #expect(f.keeper.kept.moved == 3)
    }

    @Test("a rename onto a file keeps the file it replaces; a rename to a free name, a mode or mtime change and a new file keep nothing")
    func renamesAndAttributes() throws {
        let f = try Fixture()
        try LiveFS.writeFile(f.mir("a"), Self.b("a"))
        try LiveFS.writeFile(f.mir("b"), Self.b("b"))
        let b = try #require(f.inode("b"))
        try f.keeper.rename(RelativePath("a"), to: RelativePath("b"))
        #expect(try LiveFS.readFile(f.mir("b")) == Self.b("a"))
        #expect(f.inode(".keepsync-versions/b~20261207-013000Z") == b)
        try f.keeper.rename(RelativePath("b"), to: RelativePath("c"))
        try f.keeper.setAttributes(RelativePath("c"), mode: 0o600, mtime: Timespec(seconds: 5, nanoseconds: 0))
        try LiveFS.writeFile(f.src("new"), Self.b("new"))
        try f.install("new")
        #expect(try LiveFS.list(f.mir(".keepsync-versions")) == [Self.b("b~20261207-013000Z")])
        #expect(f.keeper.kept.linked == 1 && f.keeper.kept.moved == 0)
    }
}
