import Dispatch
import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// `LocalMirror`: the group commit over the local steps, against the in-memory tree's
/// counters and its power-cut model.
@Suite("LocalMirror")
struct LocalMirrorTests {
    static func p(_ s: String) -> RelativePath { RelativePath(s) }
    static let paths = ["a", "b", "c"].map(p)
    static func content(_ path: RelativePath) -> [UInt8] { Array("the bytes of \(path.escaped)".utf8) }

    let source = InMemoryTree(device: 1)
    let tree = InMemoryTree(device: 2)
    var mirror: LocalMirror { LocalMirror(tree) }

    init() {
        for path in Self.paths { source.writeFile(path, Self.content(path)) }
    }

    /// Temp files left in the mirror.
    var temporaries: [RelativePath] { tree.nodes.keys.filter { TemporaryName.matches($0.name) } }

    @Test("a group is staged, shares one barrier, and each file is published in place")
    func groupSharesOneBarrier() throws {
        let results = mirror.install(Self.paths, from: source, io: .serial, logger: .silent)
        #expect(results.map(\.path) == Self.paths)
        for (path, result) in results {
            let copied = try #require(try result.get(), "\(path.escaped)")
            #expect(copied.installed.inode == tree.node(path)?.inode)
            #expect(tree.node(path)?.content == Self.content(path))
        }
        #expect(tree.count(.barrier) == 1 && tree.count(.sync) == 0)
        #expect(temporaries.isEmpty)
    }

    @Test("a group let go of before its renames discards its temp files: nothing of it appears in the mirror")
    func abandonedGroupInstallsNothing() throws {
        let io = ParallelIO(width: 2)
        let letGo = DispatchSemaphore(value: 0)
        // The first group's staging waits until the group was let go of.
        tree.failure.withLock {
            $0 = { op, path in
                if op == .install && path == Self.p("a") { letGo.wait() }
                return nil
            }
        }
        _ = mirror.beginInstall([Self.p("a"), Self.p("b")], from: source, io: io, logger: .silent)
        letGo.signal()
        // Each lane runs in order: once a later group's renames are done, so are the first's.
        let later = mirror.beginInstall([Self.p("c")], from: source, io: io, logger: .silent)
        #expect(try later.finish().first?.result.get()?.path == Self.p("c"))
        #expect(tree.node(Self.p("a")) == nil && tree.node(Self.p("b")) == nil)
        #expect(tree.count(.install) == 3, "all three were staged")
        #expect(temporaries.isEmpty, "\(temporaries)")
    }

    @Test("a lone file is installed on its own: its own fsync, no barrier")
    func loneFileTakesItsOwnFsync() throws {
        let results = mirror.install([Self.p("a")], from: source, io: .serial, logger: .silent)
        #expect(try results.first?.result.get()?.path == Self.p("a"))
        #expect(tree.count(.sync) == 1 && tree.count(.barrier) == 0)
        #expect(tree.node(Self.p("a"))?.content == Self.content(Self.p("a")))
    }

    @Test("a failed barrier installs nothing of the group and leaves no temp file")
    func failedBarrierInstallsNothing() throws {
        tree.failure.withLock { $0 = { op, path in op == .barrier ? KeepSyncError(.io, "syncfs: EIO", path: path) : nil } }
        let results = mirror.install(Self.paths, from: source, io: .serial, logger: .silent)
        for (path, result) in results {
            #expect(throws: KeepSyncError.self) { try result.get() }
            #expect(tree.node(path) == nil)
        }
        #expect(temporaries.isEmpty)
    }

    @Test("a pending group shows nothing until finish; then no power cut leaves a torn file", arguments: InMemoryTree.PowerCut.allCases)
    func pendingGroupIsInvisibleThenNeverTorn(cut: InMemoryTree.PowerCut) throws {
        tree.tracksDurability()
        let pending = mirror.beginInstall(Self.paths, from: source, io: .serial, logger: .silent)
        pending.commit()
        for path in Self.paths { #expect(tree.node(path) == nil, "\(path.escaped) visible before finish") }
        let results = pending.finish()
        #expect(results.allSatisfy { (try? $0.result.get()) != nil })
        var draws = 0
        tree.powerCut(cut) { draws += 1; return draws % 2 == 0 }
        for path in Self.paths {
            guard let node = tree.node(path) else { continue }
            #expect(node.content == Self.content(path), "\(path.escaped) torn after \(cut.rawValue)")
        }
        if cut == .everythingKept { #expect(Self.paths.allSatisfy { tree.node($0) != nil }) }
    }
}
