import KeepSyncCore

/// One directory of the watched tree: its watch (nil when the limit left it unwatched), its
/// place (so a moved directory takes its subtree along) and its identity.
final class WatchNode {
    /// The inotify watch descriptor; nil while unwatched.
    var wd: Int32?
    /// The entry name in its parent; empty for the root.
    var name: [UInt8]
    /// The directory holding this one; nil for the root.
    weak var parent: WatchNode?
    /// Subdirectories by name.
    var children: [[UInt8]: WatchNode] = [:]
    /// Device and inode, to notice a directory swapped under a name.
    var identity: FileIdentity
    /// Set once the node left the tree.
    var detached = false

    /// A node named `name` below `parent`.
    init(wd: Int32?, name: [UInt8], parent: WatchNode?, identity: FileIdentity) {
        self.wd = wd
        self.name = name
        self.parent = parent
        self.identity = identity
    }

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
    var path: RelativePath {
        var bytes: [UInt8] = []
        for name in names {
            if !bytes.isEmpty { bytes.append(0x2F) }
            bytes.append(contentsOf: name)
        }
        return RelativePath(bytes: bytes)
    }

    /// True when this node is `node` or lies above it.
    func isAncestor(of node: WatchNode) -> Bool {
        var current: WatchNode? = node
        while let n = current {
            if n === self { return true }
            current = n.parent
        }
        return false
    }
}
