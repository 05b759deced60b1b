import KeepSyncCore
import Synchronization

/// The mirror's steps of the in-memory tree (`FileAccessorProviding`).
extension InMemoryTree {

    /// Stages a copy under a temp name (visible in listings, as on disk).
    public func stage(_ path: RelativePath, from source: any SourceFile, durable: Bool) throws -> StagedFile {
        try begin(.install, path)
        var content: [UInt8] = []
        while true {
            let chunk = try source.read(upTo: 1 << 16)
            if chunk.isEmpty { break }
            content += chunk
        }
        if durable { try begin(.sync, path) }
        // The temp name from the new inode, taken under the same lock: concurrent stages
        // (groups installing at once) never share one.
        let padded = try state.withLock { s -> [UInt8] in
            try requireDirectory(s, path.parent)
            let t = Self.advance(&s)
            let inode = Self.newInode(&s)
            let digits = Array(String(inode, radix: 16).utf8)
            let padded = TemporaryName.prefix + Array(repeating: UInt8(ascii: "0"), count: max(0, 16 - digits.count)) + digits
            let temp = path.parent!.appending(padded)
            let node = Node(kind: .regular, mode: source.stat.mode, mtime: source.stat.mtime, ctime: t,
                            inode: inode, content: content, target: [])
            s.nodes[temp] = node
            s.staged.insert(temp)
            // Without its own fsync, the data is durable only after the group's barrier
            // (the name, either way).
            s.record(.put(temp, node))
            if s.durable != nil && !durable { s.volatileData.insert(node.inode) }
            return padded
        }
        return StagedFile(path: path, temporaryName: padded, source: source.stat)
    }

    /// Counts barriers; with the power-cut model on, makes every change so far durable
    /// (`syncfs`), unless `syncfsReaches` is false (FUSE: syncfs does nothing there).
    public func barrier() throws {
        try begin(.barrier, .root)
        state.withLock { s in
            guard s.durable != nil, syncfsReaches else { return }
            s.durable = s.nodes
            s.pending.removeAll()
            s.volatileData.removeAll()
        }
    }

    /// Counts probes; fails as the failure hook says.
    public func probe() throws {
        try begin(.probe, .root)
    }

    /// Renames a staged temp file into place.
    public func publish(_ staged: StagedFile) throws -> FileStat {
        let temp = staged.path.parent!.appending(staged.temporaryName)
        return try state.withLock { s in
            s.staged.remove(temp)
            guard let node = s.nodes[temp] else { throw KeepSyncError(.notFound, "renameat: no temp file", path: staged.path) }
            if let existing = s.nodes[staged.path], existing.kind == .directory {
                s.nodes[temp] = nil
                throw KeepSyncError(.conflict, "renameat: Is a directory", path: staged.path)
            }
            s.nodes[temp] = nil
            s.nodes[staged.path] = node
            s.record(.rename(temp, to: staged.path, moving: node))
            Self.touchParent(&s, staged.path, Self.advance(&s))
            return stat(of: node)
        }
    }

    /// Drops a staged temp file.
    public func discard(_ staged: StagedFile) {
        let temp = staged.path.parent!.appending(staged.temporaryName)
        state.withLock { s in
            s.nodes[temp] = nil
            s.staged.remove(temp)
            s.record(.remove(temp))
        }
    }

    /// The process that staged copies died: their temp files are leftovers now.
    public func abandonStaging() {
        state.withLock { $0.staged.removeAll() }
    }

    /// Removes a temp file unless it is staged and waiting for its rename.
    public func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool {
        if state.withLock({ $0.staged.contains(path) }) { return false }
        try remove(path)
        return true
    }

    /// Creates a directory.
    public func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat {
        try begin(.makeDirectory, path)
        return try state.withLock { s in
            try requireDirectory(s, path.parent)
            guard s.nodes[path] == nil else { throw KeepSyncError(.conflict, "mkdirat: File exists", path: path) }
            let t = Self.advance(&s)
            let node = Node(kind: .directory, mode: 0o700, mtime: t, ctime: t, inode: Self.newInode(&s), content: [], target: [])
            s.nodes[path] = node
            s.record(.put(path, node))
            Self.touchParent(&s, path, t)
            return stat(of: node)
        }
    }

    /// Creates or replaces a symlink.
    public func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat {
        try begin(.makeSymlink, path)
        return try state.withLock { s in
            try requireDirectory(s, path.parent)
            if let existing = s.nodes[path], existing.kind == .directory {
                throw KeepSyncError(.conflict, "renameat: Is a directory", path: path)
            }
            let t = Self.advance(&s)
            let node = Node(kind: .symlink, mode: 0o777, mtime: mtime, ctime: t, inode: Self.newInode(&s), content: [], target: target)
            s.nodes[path] = node
            s.record(.put(path, node))
            Self.touchParent(&s, path, t)
            return stat(of: node)
        }
    }

    /// Removes a path and everything below it.
    public func remove(_ path: RelativePath) throws {
        try begin(.remove, path)
        state.withLock { s in
            let directories = Set(s.nodes.filter { $0.key.isWithin(path) && $0.value.kind == .directory }.map(\.value.inode))
            s.nodes = s.nodes.filter { !$0.key.isWithin(path) }
            s.record(.remove(path), frees: directories)
            Self.touchParent(&s, path, Self.advance(&s))
        }
    }

    /// Renames a path (and what is below it).
    public func rename(_ from: RelativePath, to: RelativePath) throws {
        try begin(.rename, from)
        try state.withLock { s in
            guard s.nodes[from] != nil else { throw KeepSyncError(.notFound, "renameat: no such file", path: from) }
            try requireDirectory(s, to.parent)
            if let existing = s.nodes[to], let moving = s.nodes[from], existing.inode != moving.inode {
                if existing.kind == .directory && moving.kind != .directory {
                    throw KeepSyncError(.conflict, "renameat: Is a directory", path: to)
                }
                if existing.kind != .directory && moving.kind == .directory {
                    throw KeepSyncError(.notFound, "renameat: Not a directory", path: to)
                }
                if existing.kind == .directory, s.nodes.keys.contains(where: { $0 != to && $0.isWithin(to) }) {
                    throw KeepSyncError(.conflict, "renameat: Directory not empty", path: to)
                }
            }
            let moving = s.nodes[from].flatMap { $0.kind == .directory ? nil : $0 }
            s.nodes = s.nodes.filter { !$0.key.isWithin(to) }
            var moved: [RelativePath: Node] = [:]
            for (p, n) in s.nodes where p.isWithin(from) { moved[p.rebased(from: from, to: to)!] = n }
            s.nodes = s.nodes.filter { !$0.key.isWithin(from) }
            s.nodes.merge(moved) { $1 }
            s.record(.rename(from, to: to, moving: moving))
            let t = Self.advance(&s)
            Self.touchParent(&s, from, t)
            Self.touchParent(&s, to, t)
        }
    }

    /// A second name for the file or symlink at `from` (link(2)); `.unsupported` unless
    /// the tree has `hardLinks`. With the power-cut model on, the new entry is durable
    /// once its directory is (the inode's data, as before).
    public func link(_ from: RelativePath, to: RelativePath) throws {
        guard hardLinks else { throw KeepSyncError(.unsupported, "link: no hard links here", path: from) }
        try begin(.link, to)
        try state.withLock { s in
            guard var node = s.nodes[from], node.kind == .regular || node.kind == .symlink else {
                throw KeepSyncError(.notFound, "linkat: no such file", path: from)
            }
            try requireDirectory(s, to.parent)
            guard s.nodes[to] == nil else { throw KeepSyncError(.conflict, "linkat: File exists", path: to) }
            let t = Self.advance(&s)
            node.links += 1
            node.ctime = t
            for (path, n) in s.nodes where n.inode == node.inode { s.nodes[path] = node }
            s.nodes[to] = node
            s.record(.put(to, node))
            Self.touchParent(&s, to, t)
        }
    }

    /// Sets mode and/or mtime.
    public func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
        try begin(.setAttributes, path)
        try state.withLock { s in
            guard var n = s.nodes[path] else { throw KeepSyncError(.notFound, "no such file", path: path) }
            if let mode { n.mode = mode }
            if let mtime { n.mtime = mtime }
            n.ctime = Self.advance(&s)
            s.nodes[path] = n
            s.record(.attributes(path, inode: n.inode, mode: mode, mtime: mtime))
        }
    }
}
