import KeepSyncCore

/// A move between two in-memory trees standing for two roots of one file system (give
/// them one `device` and inode ranges of their own). No hard links here either: `link`
/// from another root is `.unsupported`, as within one tree.
extension InMemoryTree {
    /// Moves `from` of `origin` (an in-memory tree, under any decorator) and what is below
    /// it to `to` here; the same inodes. With the power-cut model on, the origin's removal
    /// and this tree's new entry are each durable after their own barrier; a directory
    /// cannot cross then (the model would lose its entries).
    public func rename(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        guard let origin = origin.innermost as? InMemoryTree, origin !== self else {
            throw KeepSyncError(.unsupported, "rename: no other in-memory root", path: from)
        }
        try origin.begin(.rename, from)
        let moving = origin.state.withLock { s in s.nodes.filter { $0.key.isWithin(from) } }
        guard let top = moving[from] else { throw KeepSyncError(.notFound, "renameat: no such file", path: from) }
        try state.withLock { s in
            try requireDirectory(s, to.parent)
            guard s.nodes[to] == nil else { throw KeepSyncError(.conflict, "renameat: File exists", path: to) }
            precondition(s.durable == nil || top.kind != .directory, "the power-cut model moves no directory across trees")
            for (path, node) in moving { s.nodes[path.rebased(from: from, to: to)!] = node }
            s.nextInode = max(s.nextInode, moving.values.map(\.inode).max() ?? 0)
            s.record(.put(to, top))
            Self.touchParent(&s, to, Self.advance(&s))
        }
        origin.state.withLock { s in
            precondition(s.durable == nil || top.kind != .directory, "the power-cut model moves no directory across trees")
            s.nodes = s.nodes.filter { !$0.key.isWithin(from) }
            s.record(.remove(from))
            Self.touchParent(&s, from, Self.advance(&s))
        }
    }
}
