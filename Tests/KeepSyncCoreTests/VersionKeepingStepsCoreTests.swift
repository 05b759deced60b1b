import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// `VersionKeepingSteps` over a mirror with no hard links (the in-memory tree, as exFAT
/// and FAT: `link` is `.unsupported`): a replaced file is moved aside before the new one
/// takes its name (SPEC "Versions": a moment without the name, never a torn file).
@Suite("Versions without hard links")
struct VersionKeepingStepsCoreTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    @Test("a replaced file is moved into the versions directory, then the new one published; the same inode, no copy")
    func replaceMovesAside() throws {
        let source = InMemoryTree(), mirror = InMemoryTree(device: 2)
        let path = RelativePath("notes/todo.txt")
        source.makeDirectory(RelativePath("notes"))
        mirror.makeDirectory(RelativePath("notes"))
        source.writeFile(path, Self.b("new"))
        mirror.writeFile(path, Self.b("old"))
        let old = try #require(mirror.node(path)?.inode)
        let keeper = VersionKeepingSteps(mirror, directory: RelativePath(".keepsync-versions"), now: { 1_796_607_000 })
        _ = try keeper.install(path, from: try source.open(path))
        let version = RelativePath(".keepsync-versions/notes/todo~20261207-013000Z.txt")
        #expect(mirror.node(path)?.content == Self.b("new"))
        #expect(mirror.node(version)?.content == Self.b("old") && mirror.node(version)?.inode == old)
        #expect(keeper.kept.moved == 1 && keeper.kept.linked == 0, "\(keeper.kept)")
        // Once a link was refused, none is tried again.
        source.writeFile(path, Self.b("newer"))
        _ = try keeper.install(path, from: try source.open(path))
        #expect(mirror.node(RelativePath(".keepsync-versions/notes/todo~20261207-013000Z-2.txt"))?.content == Self.b("new"))
        #expect(keeper.kept.moved == 2)
    }
}
