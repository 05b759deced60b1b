import KeepSyncCore

/// Directories the inotify watch limit left unwatched, looked at every poll period: each
/// one's entries (name, kind, size, mtime, ctime, inode) against the last look, so that a
/// change there costs a look at that directory and its entries, not a rescan of the
/// whole tree (a write in place changes no directory mtime: the entries are compared).
/// Each look keeps a digest of the entries as well: a poll first asks for the digest alone
/// (`digest`, which allocates nothing per entry) and lists the directory only when it
/// differs. Pure: listing a directory is the caller's (`list`, `digest`).
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

    /// One directory at the last look: its entries and their digest.
    struct Look {
        var digest: UInt64
        var entries: [[UInt8]: Stamp]

        init(_ entries: [[UInt8]: Stamp]) {
            self.entries = entries
            digest = entries.reduce(0) { sum, e in sum &+ e.key.withUnsafeBytes { UnwatchedPoller.digest($0, e.value) } }
        }
    }

    /// Each unwatched directory's entries at the last look, by node.
    private var looks: [WatchNode: Look] = [:]

    /// Directories looked at.
    var count: Int { looks.count }

    /// Takes a first look at directories that just became unwatched (before anything
    /// else reads them, so nothing that changes after is missed).
    func adopt(_ nodes: [WatchNode], list: (WatchNode) -> [[UInt8]: Stamp]?) {
        for node in nodes where looks[node] == nil && !node.detached {
            looks[node] = Look(list(node) ?? [:])
        }
    }

    /// Forgets a directory (watched now, or gone).
    func forget(_ node: WatchNode) { looks[node] = nil }

    /// Looks at every directory in `unwatched` again and returns what changed in each,
    /// by node; directories no longer unwatched are forgotten. A directory whose `digest`
    /// is the last look's is not listed; one that cannot be looked at now (gone, or
    /// moved) keeps its last look: its parent's watch or look reports it.
    func poll(_ unwatched: Set<WatchNode>, digest: (WatchNode) -> UInt64? = { _ in nil },
              list: (WatchNode) -> [[UInt8]: Stamp]?) -> [(node: WatchNode, changes: [Change])] {
        for key in looks.keys where !unwatched.contains(key) { looks[key] = nil }
        var found: [(WatchNode, [Change])] = []
        for node in Self.inPathOrder(unwatched) where !node.detached {
            if let last = looks[node], let d = digest(node), d == last.digest { continue }
            guard let now = list(node) else { continue }
            let before = looks[node]?.entries ?? [:]
            looks[node] = Look(now)
            let changes = Self.diff(before, now, in: node.path)
            if !changes.isEmpty { found.append((node, changes)) }
        }
        return found
    }

    /// One entry's share of a directory's digest (the digest is the wrapping sum of its
    /// entries' shares, so it does not depend on the listing's order). Over the name's raw
    /// bytes: no copy per entry of every poll.
    static func digest(_ name: UnsafeRawBufferPointer, _ stamp: Stamp) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name { h = (h ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        h = mix(h ^ UInt64(stamp.kind.rawValue))
        h = mix(h ^ stamp.size)
        h = mix(h ^ UInt64(bitPattern: stamp.mtime.seconds))
        h = mix(h ^ UInt64(bitPattern: stamp.mtime.nanoseconds))
        h = mix(h ^ UInt64(bitPattern: stamp.ctime.seconds))
        h = mix(h ^ UInt64(bitPattern: stamp.ctime.nanoseconds))
        return mix(h ^ stamp.inode)
    }

    /// SplitMix64's finalizer.
    private static func mix(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9e37_79b9_7f4a_7c15
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
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
