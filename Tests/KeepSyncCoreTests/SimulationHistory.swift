import KeepSyncTestSupport
@testable import KeepSyncCore

/// Everything the source ever held, for the invariants that speak about "some version":
/// which objects (inodes) were ever at each path, every content and link target each
/// object ever had, and the content of every (inode, size, mtime) version.
struct SimulationHistory {
    struct Version: Hashable {
        var inode: UInt64
        var size: UInt64
        var mtime: Timespec
    }

    private(set) var objectsEverAt: [RelativePath: Set<UInt64>] = [:]
    private(set) var contents: [UInt64: Set<[UInt8]>] = [:]
    private(set) var targets: [UInt64: Set<[UInt8]>] = [:]
    /// Every content each (inode, size, mtime) version had: more than one where a writer
    /// rewrote a file in place keeping its size and mtime (which no metadata tells apart).
    private(set) var versions: [Version: Set<[UInt8]>] = [:]

    /// Records what the source holds now (after every workload step: the product only
    /// ever sees the source between steps).
    mutating func observe(_ nodes: [RelativePath: InMemoryTree.Node]) {
        for (path, node) in nodes {
            objectsEverAt[path, default: []].insert(node.inode)
            switch node.kind {
            case .regular:
                contents[node.inode, default: []].insert(node.content)
                let v = Version(inode: node.inode, size: UInt64(node.content.count), mtime: node.mtime)
                versions[v, default: []].insert(node.content)
            case .symlink:
                targets[node.inode, default: []].insert(node.target)
            default:
                break
            }
        }
    }

    /// A directory moved from `from` to `to`: the mirror's copy of `from` may be behind the
    /// source (events not processed yet) and moves along with its stale entries, so every
    /// path below `to` inherits what was ever at the matching path below `from`.
    mutating func directoryMoved(from: RelativePath, to: RelativePath) {
        for (path, objects) in objectsEverAt where path.isWithin(from) {
            objectsEverAt[path.rebased(from: from, to: to)!, default: []].formUnion(objects)
        }
    }

    /// True when `content` is a complete copy of some version of some source file that
    /// was ever at `path` (a file renamed there brings its earlier versions along).
    func isVersion(_ content: [UInt8], at path: RelativePath) -> Bool {
        guard let objects = objectsEverAt[path] else { return false }
        return objects.contains { contents[$0]?.contains(content) ?? false }
    }

    /// True when `target` is a target some link ever at `path` had.
    func isTarget(_ target: [UInt8], at path: RelativePath) -> Bool {
        guard let objects = objectsEverAt[path] else { return false }
        return objects.contains { targets[$0]?.contains(target) ?? false }
    }

    func wasEverInSource(_ path: RelativePath) -> Bool { objectsEverAt[path] != nil }

    func contents(of version: Version) -> Set<[UInt8]>? { versions[version] }
}
