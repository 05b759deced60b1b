import KeepSyncCore

/// What a round of live changes will read of a remote mirror, read in one round trip
/// (`RemoteMirror.beginReads`): one `find -P` over every path asked, each tree to be
/// scanned walked whole (started as `.//PATH`), every other path (the trees' ancestors,
/// the stats asked) stat'ed alone (`./PATH`, pruned). Answers like a pass's listing: a
/// path below a symlink or a file on the remote, or changed through the mirror since, is
/// `unknown` (asked of the remote, whose scripts refuse or answer it).
struct RemoteReadAhead: Sendable {
    typealias Answer = RemoteTreeListing.Answer

    /// Every path find printed: its stat and link target.
    private var found: [RelativePath: (stat: FileStat, target: [UInt8])] = [:]
    /// Every starting point: one not printed is not there (when its ancestors are).
    private var asked: Set<RelativePath> = []
    /// Directories read whole (a tree, or below one): their entries.
    private var complete: [RelativePath: [DirectoryEntry]] = [:]
    /// Paths whose own stat may have changed.
    private var staleEntries: Set<RelativePath> = []
    /// Directories whose entries may have changed.
    private var staleListings: Set<RelativePath> = []
    /// Paths changed whole: everything below them is unknown.
    private var forgotten: Set<RelativePath> = []

    /// Entries held.
    var count: Int { found.count }

    /// The remote's argument words for `trees` and `stats` (NUL-separated on its stdin):
    /// `.//TREE` for each tree not below another, `./PATH` (`.` for the root) for the
    /// trees' and stats' ancestors and the stats, less what a tree covers.
    static func arguments(trees: [RelativePath], stats: [RelativePath]) -> (words: [[UInt8]], asked: Set<RelativePath>) {
        let treeSet = Set(trees)
        func inTree(_ p: RelativePath) -> Bool {
            var a: RelativePath? = p
            while let x = a {
                if treeSet.contains(x) { return true }
                a = x.parent
            }
            return false
        }
        var words: [[UInt8]] = [], asked: Set<RelativePath> = []
        for tree in Set(trees) where !tree.isRoot {
            guard !inTree(tree.parent ?? .root) else { continue }
            words.append([0x2E, 0x2F, 0x2F] + tree.bytes)
            asked.insert(tree)
        }
        for path in trees + stats {
            var a: RelativePath? = treeSet.contains(path) ? path.parent : path
            while let x = a, !asked.contains(x), !inTree(x) {
                words.append(x.isRoot ? [0x2E] : [0x2E, 0x2F] + x.bytes)
                asked.insert(x)
                a = x.parent
            }
        }
        return (words, asked)
    }

    /// Parses the find output for the starting points `asked`; nil when a record is cut
    /// short or the root is missing (find did not run as it should).
    init?(findOutput output: [UInt8], asked: Set<RelativePath>) {
        self.asked = asked
        var reader = ReplyReader(output)
        while !reader.atEnd {
            guard let record = reader.record(), record.name.first == 0x2E else { return nil }
            var start = 1
            while start < record.name.count, record.name[start] == 0x2F { start += 1 }
            let inTree = start == 3
            let path = RelativePath(bytes: Array(record.name[start...]))
            found[path] = (record.stat, record.target)
            if inTree, let parent = path.parent, complete[parent] != nil {
                complete[parent]!.append(DirectoryEntry(name: path.name, stat: record.stat))
            }
            if inTree, record.stat.kind == .directory { complete[path] = [] }
        }
        guard found[.root]?.stat.kind == .directory else { return nil }
    }

    // MARK: Answers

    /// `path`'s stat and link target, its absence, or unknown.
    func answer(_ path: RelativePath) -> Answer {
        if staleEntries.contains(path) { return .unknown }
        // Each ancestor, from the root: a directory read and not changed since.
        for a in Self.ancestors(of: path) {
            if forgotten.contains(a) { return .unknown }
            if let r = found[a] {
                if r.stat.kind != .directory { return .unknown }
            } else {
                return asked.contains(a) ? .absent : .unknown
            }
        }
        if let r = found[path] { return .present(r.stat, target: r.target) }
        if let parent = path.parent, complete[parent] != nil, !staleListings.contains(parent) { return .absent }
        return asked.contains(path) ? .absent : .unknown
    }

    /// A directory's entries; nil when not read whole or changed since.
    func list(_ directory: RelativePath) -> [DirectoryEntry]? {
        guard let entries = complete[directory], !staleListings.contains(directory),
              case .present(let stat, _) = answer(directory), stat.kind == .directory else { return nil }
        return entries
    }

    // MARK: Changes

    /// `path` was created, replaced, renamed or removed: it, its directory's entries, and
    /// everything below it are unknown from now on. The directory's own stat stays as
    /// read: only its mtime moved, which the round's directory fixes read again (asking
    /// the remote for it cost a round trip per path of a burst, for the stat of a parent
    /// every install into it made stale).
    mutating func changed(_ path: RelativePath) {
        staleEntries.insert(path)
        forgotten.insert(path)
        if let parent = path.parent { staleListings.insert(parent) }
    }

    /// Only `path`'s own mode or mtime changed.
    mutating func attributesChanged(_ path: RelativePath) {
        staleEntries.insert(path)
        if let parent = path.parent { staleListings.insert(parent) }
    }

    /// The proper ancestors of `path`, the root first.
    private static func ancestors(of path: RelativePath) -> [RelativePath] {
        var out: [RelativePath] = []
        var a = path.parent
        while let x = a {
            out.append(x)
            a = x.parent
        }
        return out.reversed()
    }
}
