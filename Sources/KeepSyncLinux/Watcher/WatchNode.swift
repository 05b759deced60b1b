import KeepSyncCore

/// One directory of the watched tree, as a handle into its `WatchTree`: its watch (nil
/// when the limit left it unwatched), its place (so a moved directory takes its subtree
/// along) and its identity. Equal handles name the same directory; a handle whose
/// directory left the tree is `detached` (its slot may serve another one by then).
struct WatchNode: Hashable {
    /// The slot in the tree's arrays.
    let index: Int32
    /// The slot's generation when the handle was made.
    let generation: UInt32
    unowned let tree: WatchTree

    static func == (a: WatchNode, b: WatchNode) -> Bool { a.index == b.index && a.generation == b.generation }

    func hash(into hasher: inout Hasher) {
        hasher.combine(index)
        hasher.combine(generation)
    }

    /// Set once the node left the tree.
    var detached: Bool { !tree.holds(self) }

    /// The inotify watch descriptor; nil while unwatched.
    var wd: Int32? { tree.wd(of: self) }

    /// The entry name in its parent; empty for the root.
    var name: [UInt8] { tree.name(of: self) }

    /// The directory holding this one; nil for the root.
    var parent: WatchNode? { tree.parent(of: self) }

    /// Device and inode, to notice a directory swapped under a name.
    var identity: FileIdentity { tree.identity(of: self) }

    /// The subdirectory named `name`, when the tree holds one.
    func child(_ name: [UInt8]) -> WatchNode? { tree.child(of: self, named: name) }

    /// True when no subdirectory is held below this one.
    var hasNoChildren: Bool { tree.firstChild(of: self) == nil }

    /// The names from the root down to this node.
    var names: [[UInt8]] {
        var names: [[UInt8]] = []
        var node = self
        while let parent = node.parent {
            names.append(node.name)
            node = parent
        }
        return names.reversed()
    }

    /// The path relative to the root.
    var path: RelativePath { tree.path(of: self) }

    /// True when this node is `node` or lies above it.
    func isAncestor(of node: WatchNode) -> Bool {
        var current: WatchNode? = node
        while let n = current {
            if n == self { return true }
            current = n.parent
        }
        return false
    }
}
