import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The watch tree without inotify: watch descriptors are plain numbers, and the watches
/// the tree lets go of are recorded instead of removed from a kernel.
@Suite("WatchTree")
struct WatchTreeTests {
    /// Records what the tree releases.
    final class Released {
        var wds: [Int32] = []
    }

    /// A tree: root (wd 1) with a (2) holding b (3) holding c (4), and d (5).
    static func sample(_ released: Released) -> WatchTree {
        let tree = WatchTree(rootWatch: 1, identity: id(1)) { released.wds.append($0) }
        let a = tree.add(bytes("a"), under: tree.root, wd: 2, identity: id(2))
        let b = tree.add(bytes("b"), under: a, wd: 3, identity: id(3))
        tree.add(bytes("c"), under: b, wd: 4, identity: id(4))
        tree.add(bytes("d"), under: tree.root, wd: 5, identity: id(5))
        return tree
    }

    static func id(_ inode: UInt64) -> FileIdentity { FileIdentity(device: 1, inode: inode) }
    static func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

    @Test("a new tree holds the root, watched, at the root path")
    func rootOnly() {
        let tree = WatchTree(rootWatch: 7, identity: Self.id(1)) { _ in }
        #expect(tree.node(for: 7) == tree.root)
        #expect(tree.path(of: 7) == .root)
        #expect(tree.watches.count == 1 && tree.unwatched.isEmpty)
    }

    @Test("each watch descriptor maps to its directory's path")
    func pathsOfWatches() {
        let tree = Self.sample(Released())
        #expect(tree.path(of: 2) == RelativePath("a"))
        #expect(tree.path(of: 3) == RelativePath("a/b"))
        #expect(tree.path(of: 4) == RelativePath("a/b/c"))
        #expect(tree.path(of: 5) == RelativePath("d"))
        #expect(tree.path(of: 99) == nil)
    }

    @Test("renaming a directory moves its whole subtree, and releases no watch")
    func renameSubtree() throws {
        let released = Released()
        let tree = Self.sample(released)
        let a = try #require(tree.node(for: 2))
        let d = try #require(tree.node(for: 5))
        tree.move(a, to: d, name: Self.bytes("x"))
        #expect(tree.path(of: 2) == RelativePath("d/x"))
        #expect(tree.path(of: 4) == RelativePath("d/x/b/c"))
        #expect(tree.root.child(Self.bytes("a")) == nil)
        #expect(released.wds.isEmpty)
    }

    @Test("a directory moved over another replaces it: the replaced subtree's watches are released")
    func renameOverExisting() throws {
        let released = Released()
        let tree = Self.sample(released)
        let d = try #require(tree.node(for: 5))
        tree.move(d, to: tree.root, name: Self.bytes("a"))
        #expect(tree.path(of: 5) == RelativePath("a"))
        #expect(Set(released.wds) == [2, 3, 4])
        #expect(tree.node(for: 2) == nil && tree.node(for: 4) == nil)
        #expect(tree.watches.count == 2)
    }

    @Test("removing a subtree releases every watch in it, detaches its nodes and keeps the rest")
    func removeSubtree() throws {
        let released = Released()
        let tree = Self.sample(released)
        let b = try #require(tree.node(for: 3))
        let c = try #require(tree.node(for: 4))
        tree.removeSubtree(b)
        #expect(Set(released.wds) == [3, 4])
        #expect(b.detached && c.detached)
        #expect(tree.path(of: 2) == RelativePath("a") && tree.path(of: 5) == RelativePath("d"))
        #expect(tree.node(for: 2)?.hasNoChildren == true)
    }

    @Test("a directory the watch limit left unwatched is counted, and forgotten with its parent")
    func unwatched() throws {
        let released = Released()
        let tree = Self.sample(released)
        let a = try #require(tree.node(for: 2))
        let lost = tree.add(Self.bytes("lost"), under: a, wd: nil, identity: Self.id(9))
        #expect(tree.unwatched.count == 1)
        #expect(lost.path == RelativePath("a/lost"))
        tree.removeSubtree(a)
        #expect(tree.unwatched.isEmpty)
        #expect(Set(released.wds) == [2, 3, 4])
    }

    @Test("adding under a taken name replaces what was there")
    func addReplaces() {
        let released = Released()
        let tree = Self.sample(released)
        tree.add(Self.bytes("a"), under: tree.root, wd: 8, identity: Self.id(8))
        #expect(tree.path(of: 8) == RelativePath("a"))
        #expect(Set(released.wds) == [2, 3, 4])
    }

    @Test("a watch the kernel dropped is forgotten without releasing it again")
    func watchVanished() throws {
        let released = Released()
        let tree = Self.sample(released)
        let node = try #require(tree.watchVanished(5))
        #expect(node.wd == nil && tree.node(for: 5) == nil)
        #expect(tree.watchVanished(5) == nil)
        #expect(released.wds.isEmpty)
    }

    @Test("a rebuild drops and releases exactly the directories it did not reach")
    func rebuild() throws {
        let released = Released()
        let tree = Self.sample(released)
        let a = try #require(tree.node(for: 2))
        let b = try #require(tree.node(for: 3))
        #expect(tree.beginRebuild() == 5)
        for node in [tree.root, a, b] { tree.markReached(node) }
        tree.discardUnreached()
        #expect(Set(released.wds) == [4, 5])
        #expect(tree.watches.count == 3)
    }

    @Test("ancestry: a node is above itself and its subtree, not above its parent or siblings")
    func ancestry() throws {
        let tree = Self.sample(Released())
        let a = try #require(tree.node(for: 2))
        let c = try #require(tree.node(for: 4))
        let d = try #require(tree.node(for: 5))
        #expect(a.isAncestor(of: a) && a.isAncestor(of: c) && tree.root.isAncestor(of: d))
        #expect(!c.isAncestor(of: a) && !a.isAncestor(of: d))
    }

    @Test("a handle whose directory left the tree stays detached when its slot holds another directory")
    func detachedHandleAfterReuse() throws {
        let tree = Self.sample(Released())
        let c = try #require(tree.node(for: 4))
        tree.removeSubtree(c)
        let e = tree.add(Self.bytes("e"), under: tree.root, wd: 6, identity: Self.id(6))
        #expect(e.index == c.index, "the freed slot is taken again")
        #expect(c.detached && !e.detached && c != e)
        #expect(tree.path(of: 6) == RelativePath("e"))
    }

    @Test("thousands of random adds, moves and removals leave every watch at the path a plain model gives",
          arguments: [1, 2, 3] as [UInt64])
    func randomOperationsMatchAModel(seed: UInt64) throws {
        var rng = SplitMix64(seed: seed)
        let tree = WatchTree(rootWatch: 1, identity: Self.id(1)) { _ in }
        var model: [RelativePath: Int32] = [.root: 1]  // watched directories by path
        var nextWD: Int32 = 2
        var gone: [WatchNode] = []
        var counts = (adds: 0, moves: 0, removals: 0, detached: 0)
        func within(_ path: RelativePath, _ top: RelativePath) -> Bool { path.isWithin(top) }
        for _ in 0..<3000 {
            let paths = model.keys.sorted()
            let pick = paths[rng.below(paths.count)]
            let node = try #require(tree.node(for: model[pick]!))
            let name = Self.bytes("n\(rng.below(6))")
            switch rng.below(10) {
            case 0..<5:
                let target = pick.appending(name)
                for p in model.keys where within(p, target) { gone.append(tree.node(for: model[p]!)!); model[p] = nil }
                tree.add(name, under: node, wd: nextWD, identity: Self.id(UInt64(nextWD)))
                model[target] = nextWD
                nextWD += 1
                counts.adds += 1
            case 5..<8:
                guard !pick.isRoot else { continue }
                let to = paths[rng.below(paths.count)]
                guard !within(to, pick) else { continue }
                let target = to.appending(name)
                let toNode = try #require(tree.node(for: model[to]!))
                let moving = model.filter { within($0.key, pick) }
                for p in model.keys where within(p, target) && !within(p, pick) { gone.append(tree.node(for: model[p]!)!); model[p] = nil }
                for (p, _) in moving { model[p] = nil }
                for (p, wd) in moving { model[p.rebased(from: pick, to: target)!] = wd }
                tree.move(node, to: toNode, name: name)
                counts.moves += 1
            default:
                guard !pick.isRoot else { continue }
                for p in model.keys where within(p, pick) { gone.append(tree.node(for: model[p]!)!); model[p] = nil }
                tree.removeSubtree(node)
                counts.removals += 1
            }
        }
        #expect(tree.watches.count == model.count)
        for (path, wd) in model {
            #expect(tree.path(of: wd) == path)
            // Each directory is found again by name from its parent.
            if let parent = path.parent, let parentWD = model[parent], let node = tree.node(for: parentWD) {
                #expect(node.child(path.name) == tree.node(for: wd), "\(path.escaped)")
            }
        }
        for node in gone where node.detached { counts.detached += 1 }
        #expect(counts.detached == gone.count, "\(gone.count - counts.detached) removed directories still in the tree")
        #expect(counts.adds > 1000 && counts.moves > 300 && counts.removals > 200, "\(counts)")
    }
}
