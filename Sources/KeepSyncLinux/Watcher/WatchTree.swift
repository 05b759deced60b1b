import KeepSyncCore

/// The watched directories as a tree, and the map from watch descriptor to directory.
/// Pure bookkeeping: a watch dropped from the tree is handed to `release` (which removes
/// it from the kernel), in the order the tree lets go of it.
final class WatchTree {
    /// The source root's node.
    let root: WatchNode
    /// Watched directories by watch descriptor.
    private(set) var watches: [Int32: WatchNode] = [:]
    /// Directories the watch limit left unwatched.
    private(set) var unwatched: [ObjectIdentifier: WatchNode] = [:]
    /// Directories left unwatched since the last `takeNewlyUnwatched`.
    private var newlyUnwatched: [WatchNode] = []
    private let release: (Int32) -> Void

    /// A tree holding only the root, watched as `rootWatch`.
    init(rootWatch: Int32, identity: FileIdentity, release: @escaping (Int32) -> Void) {
        root = WatchNode(wd: rootWatch, name: [], parent: nil, identity: identity)
        watches[rootWatch] = root
        self.release = release
    }

    /// The directory watched as `wd`.
    func node(for wd: Int32) -> WatchNode? { watches[wd] }

    /// The path of the directory watched as `wd`.
    func path(of wd: Int32) -> RelativePath? { watches[wd]?.path }

    /// Adds `name` below `parent` (replacing what was there, with its subtree): watched as
    /// `wd`, or unwatched when nil.
    @discardableResult
    func add(_ name: [UInt8], under parent: WatchNode, wd: Int32?, identity: FileIdentity) -> WatchNode {
        let node = WatchNode(wd: wd, name: name, parent: parent, identity: identity)
        if let old = parent.children[name] { removeSubtree(old) }
        parent.children[name] = node
        if let wd {
            watches[wd] = node
        } else {
            unwatched[ObjectIdentifier(node)] = node
            newlyUnwatched.append(node)
        }
        return node
    }

    /// The directories left unwatched since the last call (for a first look at them).
    func takeNewlyUnwatched() -> [WatchNode] {
        defer { newlyUnwatched = [] }
        return newlyUnwatched.filter { !$0.detached && unwatched[ObjectIdentifier($0)] === $0 }
    }

    /// An unwatched directory is watched now, as `wd`.
    func watched(_ node: WatchNode, as wd: Int32) {
        guard unwatched.removeValue(forKey: ObjectIdentifier(node)) != nil else { return }
        node.wd = wd
        watches[wd] = node
    }

    /// Moves a node (and so its subtree) to a new place, replacing what was there. The
    /// caller makes sure `parent` is not below `node`.
    func move(_ node: WatchNode, to parent: WatchNode, name: [UInt8]) {
        if let old = node.parent, old.children[node.name] === node { old.children[node.name] = nil }
        if let existing = parent.children[name], existing !== node { removeSubtree(existing) }
        node.name = name
        node.parent = parent
        parent.children[name] = node
    }

    /// Removes a node and everything below it, releasing their watches.
    func removeSubtree(_ top: WatchNode) {
        if let parent = top.parent, parent.children[top.name] === top { parent.children[top.name] = nil }
        var stack = [top]
        while let node = stack.popLast() {
            if let wd = node.wd, watches[wd] === node {
                release(wd)
                watches[wd] = nil
            }
            unwatched[ObjectIdentifier(node)] = nil
            node.detached = true
            stack.append(contentsOf: node.children.values)
            node.children = [:]
        }
    }

    /// The kernel dropped the watch `wd`: forgets it and returns its node (still in the tree).
    func watchVanished(_ wd: Int32) -> WatchNode? {
        guard let node = watches.removeValue(forKey: wd) else { return nil }
        node.wd = nil
        return node
    }

    // MARK: Rebuilding

    /// Starts a rebuild: every node known now (to hand to `discard(keeping:)` afterwards);
    /// the unwatched list starts empty again.
    func beginRebuild() -> [ObjectIdentifier: WatchNode] {
        var before: [ObjectIdentifier: WatchNode] = [:]
        var stack: [WatchNode] = [root]
        while let node = stack.popLast() {
            before[ObjectIdentifier(node)] = node
            stack.append(contentsOf: node.children.values)
        }
        for node in watches.values { before[ObjectIdentifier(node)] = node }
        unwatched = [:]
        return before
    }

    /// Ends a rebuild: drops (and releases) the nodes of `before` the rebuild did not reach.
    func discard(_ before: [ObjectIdentifier: WatchNode], keeping reached: Set<ObjectIdentifier>) {
        for (id, node) in before where !reached.contains(id) {
            if let wd = node.wd, watches[wd] === node {
                release(wd)
                watches[wd] = nil
            }
            node.detached = true
            node.children = [:]
        }
    }
}
