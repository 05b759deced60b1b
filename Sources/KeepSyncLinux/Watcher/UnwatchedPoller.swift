import KeepSyncCore

/// Directories the inotify watch limit left unwatched, looked at every poll period: each
/// one's entries (name, kind, size, mtime, ctime, inode) against the last look, so that a
/// change there costs a look at that directory and its entries, not a rescan of the
/// whole tree (a write in place changes no directory mtime: the entries are compared).
/// Pure: listing a directory is the caller's (`list`).
final class UnwatchedPoller {
    /// What an entry looked like.
    struct Stamp: Equatable {
        var kind: FileKind
        var size: UInt64
        var mtime: Timespec
        var ctime: Timespec
        var inode: UInt64

        init(_ stat: FileStat) {
            kind = stat.kind
            size = stat.size
            mtime = stat.mtime
            ctime = stat.ctime
            inode = stat.inode
        }
    }

    /// What a poll found below one directory.
    enum Change: Equatable {
        /// A file or link appeared, changed or was replaced.
        case changed(RelativePath)
        /// An entry went.
        case removed(RelativePath)
        /// A subdirectory appeared or was replaced (named in its directory).
        case newDirectory([UInt8])
        /// A subdirectory went.
        case directoryGone([UInt8])
    }

    /// Each unwatched directory's entries at the last look, by node.
    private var looks: [WatchNode: [[UInt8]: Stamp]] = [:]

    /// Directories looked at.
    var count: Int { looks.count }

    /// Takes a first look at directories that just became unwatched (before anything
    /// else reads them, so nothing that changes after is missed).
    func adopt(_ nodes: [WatchNode], list: (WatchNode) -> [[UInt8]: Stamp]?) {
        for node in nodes where looks[node] == nil && !node.detached {
            looks[node] = list(node) ?? [:]
        }
    }

    /// Forgets a directory (watched now, or gone).
    func forget(_ node: WatchNode) { looks[node] = nil }

    /// Looks at every directory in `unwatched` again and returns what changed in each,
    /// by node; directories no longer unwatched are forgotten. A directory that cannot be
    /// listed now (gone, or moved) keeps its last look: its parent's watch or look reports it.
    func poll(_ unwatched: Set<WatchNode>, list: (WatchNode) -> [[UInt8]: Stamp]?)
        -> [(node: WatchNode, changes: [Change])] {
        for key in looks.keys where !unwatched.contains(key) { looks[key] = nil }
        var found: [(WatchNode, [Change])] = []
        for node in Self.inPathOrder(unwatched) where !node.detached {
            guard let now = list(node) else { continue }
            let before = looks[node] ?? [:]
            looks[node] = now
            let changes = Self.diff(before, now, in: node.path)
            if !changes.isEmpty { found.append((node, changes)) }
        }
        return found
    }

    /// `nodes` in path order, the same at every poll (a change waits about one period
    /// whatever the directory's place). Each path is built once: sorting on `node.path`
    /// built two per comparison and was half of a poll of 9,800 directories.
    static func inPathOrder(_ nodes: Set<WatchNode>) -> [WatchNode] {
        nodes.map { (path: $0.path, node: $0) }
            .sorted { $0.path < $1.path }
            .map(\.node)
    }

    /// The changes from `before` to `now` in the directory at `path`, by name.
    static func diff(_ before: [[UInt8]: Stamp], _ now: [[UInt8]: Stamp], in path: RelativePath) -> [Change] {
        var changes: [Change] = []
        for name in Set(before.keys).union(now.keys).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            let old = before[name], new = now[name]
            if old == new { continue }
            if let old, old.kind == .directory, new?.kind != .directory || new?.inode != old.inode {
                changes.append(.directoryGone(name))
            }
            guard let new else {
                if old?.kind != .directory { changes.append(.removed(path.appending(name))) }
                continue
            }
            if new.kind == .directory {
                // A directory's own mtime moves with its entries: only a new one counts.
                if old?.kind != .directory || old?.inode != new.inode { changes.append(.newDirectory(name)) }
            } else {
                changes.append(.changed(path.appending(name)))
            }
        }
        return changes
    }
}
