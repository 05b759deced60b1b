import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// `VersionKeepingSteps` with the versions directory elsewhere on the mirror's file system
/// (two in-memory trees for its two roots: one device, inode ranges of their own; no hard
/// links, so a replaced file crosses by a move): what lands there, what the store reads,
/// and the barrier that makes it durable where `syncfs` does not reach.
@Suite("Versions elsewhere on the mirror's file system")
struct VersionsElsewhereCoreTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }
    static let report = RelativePath("docs/report.odt")
    /// The report's version at 2026-12-07 01:30:00 UTC, below the versions root.
    static let version = RelativePath("docs/report~20261207-013000Z.odt")

    /// A source, a mirror and a versions root holding `docs/` ("old" in the mirror's report).
    static func trees(syncfsReaches: Bool = true) -> (source: InMemoryTree, mirror: InMemoryTree, versions: InMemoryTree) {
        let source = InMemoryTree()
        let mirror = InMemoryTree(device: 2, syncfsReaches: syncfsReaches)
        let versions = InMemoryTree(device: 2, syncfsReaches: syncfsReaches, inodesAfter: 1_000_000)
        for tree in [source, mirror] { tree.makeDirectory(RelativePath("docs")) }
        mirror.writeFile(report, b("old"))
        source.writeFile(report, b("new"))
        return (source, mirror, versions)
    }

    @Test("a replaced file and a removed directory move to the versions root with their inodes; the mirror keeps no versions directory; the store of the mirror reads and thins the versions root")
    func keptElsewhere() throws {
        let (source, mirror, versions) = Self.trees()
        mirror.makeDirectory(RelativePath("old"))
        mirror.writeFile(RelativePath("old/a.txt"), Self.b("a"))
        let old = try #require(mirror.node(Self.report)?.inode), directory = try #require(mirror.node(RelativePath("old"))?.inode)
        let local = LocalMirror(mirror, versions: (.elsewhere(versions), { 1_796_607_000 }, nil))
        let results = local.install([Self.report], from: source, io: .serial, logger: .silent)
        guard case .success(_?) = results[0].result else { throw KeepSyncError(.io, "\(results[0].result)") }
        try local.remove(RelativePath("old"))

        #expect(mirror.node(Self.report)?.content == Self.b("new") && mirror.node(RelativePath("old")) == nil)
        #expect(versions.node(Self.version)?.content == Self.b("old") && versions.node(Self.version)?.inode == old)
        let kept = RelativePath("old~20261207-013000Z")
        #expect(versions.node(kept)?.inode == directory && versions.node(kept.appending(Self.b("a.txt")))?.content == Self.b("a"))
        #expect(mirror.nodes.keys.allSatisfy { !$0.isWithin(RelativePath(".keepsync-versions")) }, "\(mirror.nodes.keys)")

        let (store, _) = try #require(VersionStore.of(local))
        #expect(store.directory == .root && (store.steps as? any FileAccessorProviding)?.innermost as? InMemoryTree === versions)
        #expect(Set(try store.list().map(\.original)) == [Self.report, RelativePath("old")])
        #expect(try store.thin(now: 1_796_607_000 + 86_401, keep: 86_400).removed.count == 2)
        #expect(try store.list().isEmpty && versions.node(Self.version) == nil)
        #expect(mirror.node(Self.report)?.content == Self.b("new"), "the mirror's own files untouched")
    }

    @Test("where syncfs does not reach, a power cut right after the change's barrier keeps the new content at the name and the old in the versions root: the versions' entries are fsynced by that barrier too")
    func durableWithTheChange() throws {
        let (source, mirror, versions) = Self.trees(syncfsReaches: false)
        for tree in [mirror, versions] { tree.tracksDurability() }
        var limits = MirrorLimits.none
        limits.syncfsReaches = false
        let local = LocalMirror(mirror, limits: limits, versions: (.elsewhere(versions), { 1_796_607_000 }, nil))
        let results = local.install([Self.report], from: source, io: .serial, logger: .silent)
        guard case .success(_?) = results[0].result else { throw KeepSyncError(.io, "\(results[0].result)") }
        // What the engine does before it records the change.
        local.willRecord(Self.report)
        try local.barrier()
        for tree in [mirror, versions] { _ = tree.powerCut(.nothingKept) { false } }
        #expect(mirror.node(Self.report)?.content == Self.b("new"))
        #expect(versions.node(Self.version)?.content == Self.b("old"), "the version survives the cut")
    }
}
