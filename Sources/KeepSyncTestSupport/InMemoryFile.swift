import KeepSyncCore

/// An open file of an `InMemoryTree`: content as of open time.
public final class InMemoryFile: SourceFile {
    let tree: InMemoryTree
    let path: RelativePath
    /// The stat at open time.
    public let stat: FileStat
    /// The bytes at open time: what is read once the path names another inode.
    let opened: [UInt8]
    var offset = 0

    init(tree: InMemoryTree, path: RelativePath, stat: FileStat, content: [UInt8]) {
        self.tree = tree
        self.path = path
        self.stat = stat
        self.opened = content
    }

    /// Reads the next bytes of the inode as they are now: a write in place between two
    /// reads shows, so a copy may hold a mix of two versions (the product must see that
    /// the source changed).
    public func read(upTo count: Int) throws -> [UInt8] {
        let reads = tree.reads.withLock { $0 }
        if offset > 0 { reads.between?(path) }
        let now = tree.node(path).flatMap { $0.kind == .regular && $0.inode == stat.inode ? $0.content : nil } ?? opened
        let end = min(now.count, offset + min(count, reads.chunk))
        guard offset < end else { return [] }
        defer { offset = end }
        return Array(now[offset..<end])
    }

    /// The stat of the same inode now (a vanished or replaced file reads as changed).
    public func currentStat() throws -> FileStat {
        guard let now = try tree.stat(path), now.inode == stat.inode else {
            var gone = stat
            gone.ctime = Timespec(seconds: -1, nanoseconds: 0)
            return gone
        }
        return now
    }

    /// No-op.
    public func close() {}
}
