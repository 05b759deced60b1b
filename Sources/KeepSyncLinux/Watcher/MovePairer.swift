import KeepSyncCore

/// Pairs each `IN_MOVED_FROM` with its `IN_MOVED_TO` by cookie, and keeps the watch tree in
/// step with the moves. A MOVED_FROM waits up to `window` for its partner; unpaired it was
/// a move out of the tree (`.removed`, or `.changed` for an excluded name, whose directory's
/// mtime still moved). A MOVED_TO without a waiting partner was a move into the tree
/// (`.changed`, and a directory is to be watched and listed). Pure: time comes in as `now`.
struct MovePairer<Instant: InstantProtocol> where Instant.Duration == Duration {
    /// A MOVED_FROM waiting for its MOVED_TO.
    struct Departure {
        /// The kernel's cookie shared by the two halves.
        var cookie: UInt32
        /// The directory the entry left.
        var parent: WatchNode
        /// The entry's name there.
        var name: [UInt8]
        /// The entry's path there.
        var path: RelativePath
        /// True for a directory.
        var isDirectory: Bool
        /// True when the old path is excluded.
        var excluded: Bool
        /// The moved directory's node, when it is one the tree holds.
        var node: WatchNode?
        /// The read that brought it.
        var readIndex: Int
        /// When it stops waiting.
        var deadline: Instant
    }

    /// What a MOVED_TO comes to.
    struct Arrival: Equatable {
        /// The events to report, in order.
        var events: [WatchEvent]
        /// A directory arrived that the tree does not hold: watch it, then list it.
        var newDirectory = false
        /// The pair contradicts the tree (a directory moved below itself): rebuild the tree.
        var outOfStep = false
    }

    /// How long a MOVED_FROM waits for its MOVED_TO.
    let window: Duration
    /// The MOVED_FROMs waiting, oldest first.
    private(set) var pending: [Departure] = []

    /// A pairer whose MOVED_FROMs wait `window`.
    init(window: Duration = .milliseconds(5)) {
        self.window = window
    }

    /// True when no MOVED_FROM waits.
    var isEmpty: Bool { pending.isEmpty }

    /// The nearest deadline of a waiting MOVED_FROM.
    var nextDeadline: Instant? { pending.map(\.deadline).min() }

    /// A MOVED_FROM of `name` from `parent` (at `path`), seen in read `readIndex` at `now`.
    mutating func departed(cookie: UInt32, name: [UInt8], from parent: WatchNode, path: RelativePath,
                           isDirectory: Bool, excluded: Bool, readIndex: Int, now: Instant) {
        pending.append(Departure(cookie: cookie, parent: parent, name: name, path: path, isDirectory: isDirectory,
                                 excluded: excluded, node: isDirectory ? parent.child(name) : nil,
                                 readIndex: readIndex, deadline: now.advanced(by: window)))
    }

    /// A MOVED_TO of `name` into `parent` (at `path`): pairs it with its MOVED_FROM by
    /// cookie, moving the directory's node in `tree`, or reports a new entry.
    mutating func arrived(cookie: UInt32, name: [UInt8], in parent: WatchNode, path: RelativePath,
                          isDirectory: Bool, excluded: Bool, tree: WatchTree) -> Arrival {
        guard cookie != 0, let index = pending.firstIndex(where: { $0.cookie == cookie }) else {
            return Arrival(events: [.changed(path)], newDirectory: !excluded && isDirectory)
        }
        let from = pending.remove(at: index)
        switch (from.excluded, excluded) {
        case (false, false):
            var arrival = Arrival(events: [.moved(from: from.path, to: path)])
            guard isDirectory else { return arrival }
            if let node = from.node, !node.detached {
                if node.isAncestor(of: parent) {
                    // Impossible on disk, so the tree is out of step.
                    arrival.outOfStep = true
                } else {
                    tree.move(node, to: parent, name: name)
                }
            } else {
                arrival.newDirectory = true
            }
            return arrival
        case (true, false):
            // The old name was not mirrored: its directory's mtime moved, the new one is new.
            return Arrival(events: [.changed(from.path), .changed(path)], newDirectory: isDirectory)
        case (false, true):
            if let node = from.node, !node.detached { tree.removeSubtree(node) }
            return Arrival(events: [.removed(from.path), .changed(path)])
        case (true, true):
            return Arrival(events: [.changed(from.path), .changed(path)])
        }
    }

    /// Ends the wait of the MOVED_FROMs whose deadline passed at `now` (only those from
    /// reads before `readIndex`, when given): they moved out of the tree.
    mutating func expire(at now: Instant, readBefore readIndex: Int? = nil, in tree: WatchTree) -> [WatchEvent] {
        expire(in: tree) { move in
            now >= move.deadline && (readIndex.map { move.readIndex < $0 } ?? true)
        }
    }

    /// An event on `path` ends the wait of a MOVED_FROM at or above it (other than the
    /// event's own `cookie`), so that the move out is reported before what came after it.
    mutating func supersede(by path: RelativePath, cookie: UInt32, in tree: WatchTree) -> [WatchEvent] {
        guard !pending.isEmpty else { return [] }
        return expire(in: tree) { $0.cookie != cookie && path.isWithin($0.path) }
    }

    /// Reports the MOVED_FROMs that match as moved out of the tree, oldest first, and drops
    /// their subtrees from `tree` (unless the directory was found elsewhere meanwhile).
    private mutating func expire(in tree: WatchTree, where expired: (Departure) -> Bool) -> [WatchEvent] {
        guard pending.contains(where: expired) else { return [] }
        var events: [WatchEvent] = []
        var kept: [Departure] = []
        for move in pending {
            guard expired(move) else {
                kept.append(move)
                continue
            }
            events.append(move.excluded ? .changed(move.path) : .removed(move.path))
            if let node = move.node, !node.detached, node.parent == move.parent, node.name == move.name {
                tree.removeSubtree(node)
            }
        }
        pending = kept
        return events
    }
}
