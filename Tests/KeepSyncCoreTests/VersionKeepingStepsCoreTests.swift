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

    @Test("the store lists what the keeper kept (files, a deleted directory, -2 in one second) with their original paths, and thins by retention through the steps")
    func storeListsAndThins() throws {
        let mirror = InMemoryTree(device: 2), source = InMemoryTree()
        let clock = Clock(1_796_607_000)
        let keeper = VersionKeepingSteps(mirror, directory: RelativePath(".keepsync-versions"), now: { clock.now })
        mirror.makeDirectory(RelativePath("docs"))
        source.makeDirectory(RelativePath("docs"))
        let report = RelativePath("docs/report.odt")
        mirror.writeFile(report, Self.b("v0"))
        for i in 1...3 {
            source.writeFile(report, Self.b("v\(i)"))
            _ = try keeper.install(report, from: try source.open(report))
            clock.now += i == 1 ? 0 : 40
        }
        mirror.makeDirectory(RelativePath("old"))
        mirror.writeFile(RelativePath("old/a.txt"), Self.b("a"))
        try keeper.remove(RelativePath("old"))
        let store = VersionStore(steps: keeper, directory: keeper.directory)
        let listed = try store.list().sorted { ($0.isDirectory ? 1 : 0, $0.seconds, $0.sequence) < ($1.isDirectory ? 1 : 0, $1.seconds, $1.sequence) }
        #expect(listed.map(\.original) == [RelativePath("docs/report.odt"), RelativePath("docs/report.odt"),
                                            RelativePath("docs/report.odt"), RelativePath("old")], "\(listed.map(\.path))")
        #expect(listed.map(\.sequence) == [1, 2, 1, 1] && listed.last?.isDirectory == true)
        #expect(listed.first?.size == 2)
        // Two in the first 30 s stretch: the later one stays; past the kept day, all go.
        let thinned = try store.thin(now: clock.now, keep: 86_400)
        #expect(thinned.removed.map(\.path) == [RelativePath(".keepsync-versions/docs/report~20261207-013000Z.odt")]
                && thinned.failed.isEmpty, "\(thinned.removed.map(\.path))")
        let gone = try store.thin(now: clock.now + 86_401, keep: 86_400)
        let left = try store.list()
        #expect(gone.removed.count == 3 && left.isEmpty, "\(left.map(\.path))")
        #expect(mirror.node(report)?.content == Self.b("v3"), "the mirror's own files untouched")
    }

    @Test("in the file system's last 5 %, the oldest versions go, across files, until it is out of it; young ones too")
    func floorRemovesOldestFirst() throws {
        let mirror = InMemoryTree(device: 2), source = InMemoryTree()
        let clock = Clock(1_796_607_000)
        // 100 bytes in all; each version takes 1 of the 10 free.
        let used = Clock(94)
        let keeper = VersionKeepingSteps(mirror, directory: RelativePath(".keepsync-versions"), now: { clock.now })
        for name in ["a", "b"] { mirror.writeFile(RelativePath(name), Self.b("0")) }
        for i in 1...3 {
            for name in ["a", "b"] {
                source.writeFile(RelativePath(name), Self.b("\(i)"))
                _ = try keeper.install(RelativePath(name), from: try source.open(RelativePath(name)))
            }
            clock.now += 60
        }
        let store = VersionStore(steps: keeper, directory: keeper.directory, space: {
            (free: UInt64(100 - used.now - Int64(mirror.nodes.keys.filter { $0.isWithin(RelativePath(".keepsync-versions")) && mirror.node($0)?.kind == .regular }.count)), total: 100)
        })
        // 6 versions: 100 - 94 - 6 = 0 free, under the floor of 5: the oldest go until one
        // is left (5 free), one of the last minute.
        let thinned = try store.thin(now: clock.now, keep: 86_400)
        #expect(thinned.floored == 5, "\(thinned.removed.map(\.path))")
        #expect(thinned.removed.allSatisfy { $0.seconds <= 1_796_607_000 + 120 })
        #expect(try store.list().count == 1 && (try store.list().first?.seconds) == 1_796_607_000 + 120)
        // Out of the floor, nothing more goes.
        #expect(try store.thin(now: clock.now, keep: 86_400).removed.isEmpty)
    }

    @Test("on a mirror syncfs does not reach, a power cut right after the change's barrier keeps the new content at the name and the old in the versions directory; with the keeper under the entry-synced steps, the version is lost")
    func versionIsDurableWithTheChange() throws {
        let report = RelativePath("docs/report.odt")
        let version = RelativePath(".keepsync-versions/docs/report~20261207-013000Z.odt")
        var limits = MirrorLimits.none
        limits.syncfsReaches = false
        func cut(_ order: String) throws -> InMemoryTree {
            let source = InMemoryTree(), mirror = InMemoryTree(device: 2, syncfsReaches: false)
            for tree in [source, mirror] { tree.makeDirectory(RelativePath("docs")) }
            mirror.writeFile(report, Self.b("old"))
            source.writeFile(report, Self.b("new"))
            mirror.tracksDurability()
            let local: LocalMirror
            if order == "keeper above" {
                local = LocalMirror(mirror, limits: limits, versions: (.inMirror(RelativePath(".keepsync-versions")), { 1_796_607_000 }, nil))
            } else {
                local = LocalMirror(EntrySyncedSteps(VersionKeepingSteps(mirror, directory: RelativePath(".keepsync-versions"),
                                                                          now: { 1_796_607_000 })), limits: limits)
            }
            let results = local.install([report], from: source, io: .serial, logger: .silent)
            guard case .success(_?) = results[0].result else { throw KeepSyncError(.io, "\(results[0].result)") }
            // What the engine does before it records the change.
            local.willRecord(report)
            try local.barrier()
            let lost = mirror.powerCut(.nothingKept) { false }
            #expect(lost.pending - lost.kept > 0 || order == "keeper above", "\(order): the cut took something (\(lost))")
            return mirror
        }
        let right = try cut("keeper above")
        #expect(right.node(report)?.content == Self.b("new"))
        #expect(right.node(version)?.content == Self.b("old"), "the version survives the cut")
        let wrong = try cut("keeper below")
        #expect(wrong.node(report)?.content == Self.b("new"))
        #expect(wrong.node(version) == nil, "the model loses a version no barrier covered")
    }

    /// A settable clock for tags.
    final class Clock: @unchecked Sendable {
        var now: Int64
        init(_ now: Int64) { self.now = now }
    }
}
