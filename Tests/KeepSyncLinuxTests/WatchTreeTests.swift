import KeepSyncCore
@testable import KeepSyncLinux
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
        #expect(tree.node(for: 7) === tree.root)
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
        #expect(tree.root.children[Self.bytes("a")] == nil)
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
        #expect(tree.node(for: 2)?.children.isEmpty == true)
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
        let before = tree.beginRebuild()
        #expect(before.count == 5)
        tree.discard(before, keeping: [ObjectIdentifier(tree.root), ObjectIdentifier(a), ObjectIdentifier(b)])
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
}
