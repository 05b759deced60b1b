import KeepSyncCore
import Synchronization

/// The power-cut model: what the seam changed is durable only after a barrier, and a
/// cut keeps any subset of the rest.
extension InMemoryTree {
    /// A change made through the mirror seam, not durable until the next barrier.
    enum Change {
        case put(RelativePath, Node)
        case remove(RelativePath)
        /// `moving`: the file or link the rename moved (nil for a directory). A rename
        /// moves an inode, not what the disk happens to hold at the old name: kept while the
        /// change that put that inode at `from` was lost, it still lands that inode at `to`.
        case rename(RelativePath, to: RelativePath, moving: Node?)
        /// Attributes belong to the inode (`inode`), wherever the disk holds it.
        case attributes(RelativePath, inode: UInt64, mode: UInt32?, mtime: Timespec?)

        /// Applies the change to `nodes` as far as they allow; false when they do not
        /// (an entry whose directory, or attributes whose inode, the disk does not reach:
        /// a power cut lost it, or it is not durable yet).
        @discardableResult
        func apply(to nodes: inout [RelativePath: Node]) -> Bool {
            func directoryExists(_ p: RelativePath?) -> Bool { p.map { nodes[$0]?.kind == .directory } ?? true }
            switch self {
            case .put(let path, let node):
                guard directoryExists(path.parent) else { return false }
                // Over a directory a cut kept (its removal lost): the entry names the new
                // inode, and what was below the old one is reachable no more.
                if nodes[path]?.kind == .directory && node.kind != .directory { nodes = nodes.filter { !$0.key.isWithin(path) } }
                nodes[path] = node
            case .remove(let path):
                nodes = nodes.filter { !$0.key.isWithin(path) }
            case .rename(let from, let to, let moving?):
                guard directoryExists(to.parent) else { return false }
                if nodes[to]?.kind == .directory { nodes = nodes.filter { !$0.key.isWithin(to) } }
                let here = nodes[from].map { $0.inode == moving.inode } ?? false
                let node = here ? nodes[from]! : nodes.values.first { $0.inode == moving.inode } ?? moving
                if here { nodes[from] = nil }
                nodes[to] = node
            case .rename(let from, let to, nil):
                guard nodes[from] != nil, directoryExists(to.parent) else { return false }
                guard !to.isWithin(from) else { return true }
                var moved: [RelativePath: Node] = [:]
                for (p, n) in nodes where p.isWithin(from) { moved[p.rebased(from: from, to: to)!] = n }
                nodes = nodes.filter { !$0.key.isWithin(from) && !$0.key.isWithin(to) }
                nodes.merge(moved) { $1 }
            case .attributes(_, let inode, let mode, let mtime):
                var found = false
                for (path, var n) in nodes where n.inode == inode {
                    found = true
                    if let mode { n.mode = mode }
                    if let mtime { n.mtime = mtime }
                    nodes[path] = n
                }
                return found
            }
            return true
        }
    }

    /// A name in a directory (by inode).
    struct Name: Hashable {
        var directory: UInt64
        var name: [UInt8]
    }

    /// A change not durable yet, and the inodes still to be fsynced before it is.
    struct PendingChange {
        var change: Change
        var needs: Set<UInt64>
        /// The directories (inodes) whose entries it changes: the entry's (a rename's
        /// source), then a rename's target. An entry lives in its directory's blocks,
        /// wherever that directory is named when the change reaches the disk's tree.
        var directories: [UInt64]
        /// The directories a removal deletes: once it is durable, their own entries no
        /// longer matter (a rename out of one needs only its target's fsync).
        var frees: Set<UInt64> = []
        /// The directory a rename moves (nil for anything else): where later changes in it
        /// land depends on whether this one landed first.
        var moves: UInt64?

        /// The names it changes, each in its directory (inode).
        var names: [Name] {
            switch change {
            case .put(let p, _), .remove(let p): return [Name(directory: directories[0], name: p.name)]
            case .rename(let from, let to, _):
                return [Name(directory: directories[0], name: from.name), Name(directory: directories[1], name: to.name)]
            case .attributes: return []
            }
        }

        /// The names whose entries it replaces or removes (a rename: its target only).
        var overwrites: [Name] {
            if case .rename = change { return [names[1]] }
            return names
        }

        /// For a rename: its target directory was fsynced (the new name is on the disk).
        var targetDurable: Bool {
            if case .rename = change { return !needs.contains(directories[1]) }
            return false
        }
        /// For a rename: its source directory was fsynced (the old name is gone from the disk).
        var sourceDurable: Bool {
            if case .rename = change { return !needs.contains(directories[0]) }
            return false
        }

        /// `change.apply`, at the paths its directories have in `nodes`.
        func apply(to nodes: inout [RelativePath: Node]) -> Bool {
            func locate(_ path: RelativePath, _ directory: UInt64) -> RelativePath? {
                guard let parent = path.parent else { return path }
                if nodes[parent]?.inode == directory { return path }
                return nodes.first { $0.value.inode == directory && $0.value.kind == .directory }.map { $0.key.appending(path.name) }
            }
            switch change {
            case .put(let path, let node):
                guard let at = locate(path, directories[0]) else { return false }
                return Change.put(at, node).apply(to: &nodes)
            case .remove(let path):
                guard let at = locate(path, directories[0]) else { return false }
                return Change.remove(at).apply(to: &nodes)
            case .rename(let from, let to, let moving):
                guard let target = locate(to, directories[1]) else { return false }
                let source = locate(from, directories[0])
                if moving == nil && source == nil { return false }
                return Change.rename(source ?? from, to: target, moving: moving).apply(to: &nodes)
            case .attributes:
                return change.apply(to: &nodes)
            }
        }
    }

    /// fsync of one entry: a file's data and attributes, a directory's entries and
    /// attributes. A change is durable once every inode it needs was fsynced (a rename
    /// across directories: both). Durable changes join the disk's tree in the order they
    /// were made, each once its directory is there (an entry fsynced in a directory whose
    /// own entry is not durable yet waits for it; a cut loses it with its directory).
    public func syncEntry(_ path: RelativePath) throws {
        try begin(.sync, path)
        state.withLock { s in
            guard s.durable != nil, let node = s.nodes[path], node.kind != .symlink else { return }
            s.volatileData.remove(node.inode)
            for i in s.pending.indices { s.pending[i].needs.remove(node.inode) }
            Self.settleDurable(&s)
        }
    }

    /// Applies the durable pending changes that the disk's tree can take now, until none
    /// more can. A name changes in the order its changes were made: a change waits while
    /// an earlier one of the same name in the same directory waits (a removal of a name
    /// that a rename not yet durable put there waits for that rename); a directory's
    /// removal waits for every change in it (the renames out of it); a change in a directory
    /// that an earlier rename moves waits for that rename.
    static func settleDurable(_ s: inout State) {
        var progress = true
        while progress {
            progress = false
            // A durable removal of directories: what earlier changes owed to their own
            // entries no longer matters (they are reachable from nowhere).
            for i in s.pending.indices where s.pending[i].needs.isEmpty && !s.pending[i].frees.isEmpty {
                for j in 0..<i { s.pending[j].needs.subtract(s.pending[i].frees) }
            }
            // A rename whose target name a later durable change removes or replaces: its
            // target half is on the disk and already overwritten there; what is left of it
            // is the removal of its source name. (A later rename away from that name moves
            // what this one put there: it waits for this one instead.)
            for i in s.pending.indices {
                guard case .rename(let from, let to, _) = s.pending[i].change, s.pending[i].targetDurable,
                      !s.pending[i].needs.isEmpty else { continue }
                let target = Name(directory: s.pending[i].directories[1], name: to.name)
                guard s.pending[(i + 1)...].contains(where: { $0.needs.isEmpty && $0.overwrites.contains(target) }) else { continue }
                let source = s.pending[i].directories[0]
                s.pending[i] = PendingChange(change: .remove(from), needs: s.pending[i].needs.intersection([source]),
                                             directories: [source])
            }
            // Likewise a file's rename whose source name a later durable change reuses: its
            // source half is on the disk; what is left is the new entry in the target.
            for i in s.pending.indices {
                guard case .rename(let from, let to, let moving?) = s.pending[i].change, s.pending[i].sourceDurable,
                      !s.pending[i].needs.isEmpty else { continue }
                let source = Name(directory: s.pending[i].directories[0], name: from.name)
                guard s.pending[(i + 1)...].contains(where: { $0.needs.isEmpty && $0.names.contains(source) }) else { continue }
                let target = s.pending[i].directories[1]
                s.pending[i] = PendingChange(change: .put(to, moving), needs: s.pending[i].needs.intersection([target]),
                                             directories: [target])
            }
            var rest: [PendingChange] = []
            var waitingNames: Set<Name> = [], waitingDirectories: Set<UInt64> = [], waitingMoves: Set<UInt64> = []
            for p in s.pending {
                if p.needs.isEmpty, waitingNames.isDisjoint(with: p.names), waitingDirectories.isDisjoint(with: p.frees),
                   waitingMoves.isDisjoint(with: p.directories), p.apply(to: &s.durable!) {
                    progress = true
                } else {
                    rest.append(p)
                    waitingNames.formUnion(p.names)
                    waitingDirectories.formUnion(p.directories)
                    if let moved = p.moves { waitingMoves.insert(moved) }
                }
            }
            s.pending = rest
        }
    }

    /// With the power-cut model on: the tree as the disk holds it now, and the inodes
    /// whose data no fsync or barrier covered yet (an oracle's view; nil when off).
    /// A rename across directories reaches the disk in two halves, one per directory: an
    /// entry is on the disk once the rename's target directory was fsynced (`entries`), and
    /// gone once its source directory was (`absences`), though the tree applies a rename
    /// only with both.
    public var durability: (entries: [RelativePath: Node], absences: [RelativePath: Node], unsyncedData: Set<UInt64>)? {
        state.withLock { s in
            guard let durable = s.durable else { return nil }
            var entries = durable, absences = durable
            for p in s.pending {
                if p.targetDurable { _ = p.apply(to: &entries) }
                if p.sourceDurable { _ = p.apply(to: &absences) }
            }
            return (entries, absences, s.volatileData)
        }
    }

    /// The directory renames power cuts lost (`from` is where the directory stayed): a
    /// change inside the directory that a cut kept lands under `from`, not `to`. Entries
    /// live in their directory's inode, whatever name the disk kept for it.
    public var directoryRenamesLost: [(from: RelativePath, to: RelativePath)] {
        state.withLock { $0.lostDirectoryRenames }
    }

    /// What a power cut keeps of the changes no barrier made durable.
    public enum PowerCut: String, Sendable, CaseIterable {
        /// Nothing since the last barrier.
        case nothingKept = "nothing kept"
        /// Every entry and all data, as if the disk had flushed.
        case everythingKept = "everything kept"
        /// Each change kept or lost on its own; each unsynced file's data kept or lost.
        case randomSubset = "a random subset kept"
        /// Every entry kept, every unsynced file empty (ext4's zero-length files).
        case renamesKeptDataLost = "renames kept, data lost"
    }

    /// Turns the power-cut model on: from now on what the seam changes is durable only
    /// after a barrier (`syncfs`); a lone install counts as fsynced before its rename, as
    /// the product does it. Changes made through the building API are durable at once.
    public func tracksDurability() {
        state.withLock { s in
            s.durable = s.nodes
            s.pending.removeAll()
            s.volatileData.removeAll()
        }
    }

    /// Cuts the power: the tree becomes what the disk held at the last barrier plus the
    /// changes since that `mode` keeps (for `.randomSubset`, `keep()` decides each change
    /// in order, then each unsynced file's data). Entries whose directory was lost go
    /// with it; inode numbers the disk never recorded are handed out again, as ext4
    /// does. Returns how many changes were pending, kept, and how many files lost their
    /// data (left empty). Staged copies are abandoned. With the model off, nothing changes.
    @discardableResult
    public func powerCut(_ mode: PowerCut, keep: () -> Bool) -> (pending: Int, kept: Int, dataLost: Int) {
        state.withLock { s in
            guard var nodes = s.durable else { return (0, 0, 0) }
            var kept = 0
            for p in s.pending {
                let keeps: Bool
                switch mode {
                // A rename half on the disk: kept (one of the states the disk can hold).
                case _ where p.needs.isEmpty || p.targetDurable || p.sourceDurable: keeps = true
                case .nothingKept: keeps = false
                case .everythingKept, .renamesKeptDataLost: keeps = true
                case .randomSubset: keeps = keep()
                }
                if keeps {
                    _ = p.apply(to: &nodes)
                    kept += 1
                } else if case .rename(let from, let to, nil) = p.change {
                    s.lostDirectoryRenames.append((from, to))
                }
            }
            var lostInodes: Set<UInt64> = []
            for inode in s.volatileData.sorted() {
                switch mode {
                case .nothingKept, .everythingKept: break
                case .renamesKeptDataLost: lostInodes.insert(inode)
                case .randomSubset: if !keep() { lostInodes.insert(inode) }
                }
            }
            var dataLost = 0
            for (path, node) in nodes where lostInodes.contains(node.inode) && !node.content.isEmpty {
                nodes[path]!.content = []
                dataLost += 1
            }
            let pending = s.pending.count
            s.nodes = nodes
            s.durable = nodes
            s.pending.removeAll()
            s.volatileData.removeAll()
            s.staged.removeAll()
            s.nextInode = max(100, nodes.values.map(\.inode).max() ?? 0)
            return (pending, kept, dataLost)
        }
    }
}
