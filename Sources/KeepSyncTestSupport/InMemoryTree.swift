import KeepSyncCore
import Synchronization

/// An in-memory file tree implementing both the source seam and the local mirror's steps
/// (`FileAccessorProviding`; wrap it in `LocalMirror` for the engine), for
/// tests and simulations: no I/O, deterministic inodes and times, counters for every
/// write, and a hook to inject failures.
public final class InMemoryTree: FileAccessorProviding {
    /// One object in the tree.
    public struct Node: Sendable, Equatable {
        /// Kind.
        public var kind: FileKind
        /// Permission bits.
        public var mode: UInt32
        /// Modification time.
        public var mtime: Timespec
        /// Change time (bumped on every change).
        public var ctime: Timespec
        /// Inode number.
        public var inode: UInt64
        /// File content.
        public var content: [UInt8]
        /// Link target.
        public var target: [UInt8]
        /// Names of this inode (`hardLink` adds one; a removal does not lower it).
        public var links: UInt32 = 1
    }

    /// A mirror-side operation, for failure injection and counting.
    public enum Operation: String, Sendable, CaseIterable {
        /// `install`.
        case install
        /// `makeDirectory`.
        case makeDirectory
        /// `makeSymlink`.
        case makeSymlink
        /// `remove`.
        case remove
        /// `rename`.
        case rename
        /// `setAttributes`.
        case setAttributes
        /// `open` for reading.
        case open
        /// `list`.
        case list
        /// `barrier`.
        case barrier
        /// The fsync of a staged file (`stage(…, durable: true)`).
        case sync
        /// `probe`.
        case probe
    }

    struct State {
        var nodes: [RelativePath: Node] = [:]
        var nextInode: UInt64 = 100
        /// Each inode number's current incarnation (ext4's i_generation): a number handed
        /// out again after a power cut names another object. Never rolled back.
        var incarnations: [UInt64: UInt64] = [:]
        var nextIncarnation: UInt64 = 0
        var tick: Int64 = 1_000
        var counts: [Operation: Int] = [:]
        /// Staged temp files waiting for `publish` or `discard`.
        var staged: Set<RelativePath> = []
        /// The power-cut model (nil: off, nothing is ever lost): the tree as the disk
        /// holds it, the seam's changes since, in order, and the inodes whose data was
        /// written without an fsync since.
        var durable: [RelativePath: Node]?
        var pending: [PendingChange] = []
        var volatileData: Set<UInt64> = []

        mutating func record(_ change: Change, frees: Set<UInt64> = []) {
            guard durable != nil else { return }
            // The inodes whose fsync makes it durable: the directories whose entries it
            // changes, or the inode whose attributes it sets.
            func directory(_ p: RelativePath) -> UInt64 { p.parent.flatMap { nodes[$0]?.inode } ?? .max }
            let directories: [UInt64]
            switch change {
            case .put(let p, _), .remove(let p): directories = [directory(p)]
            case .rename(let from, let to, _): directories = [directory(from), directory(to)]
            case .attributes: directories = []
            }
            let needs: Set<UInt64>
            if case .attributes(_, let inode, _, _) = change { needs = [inode] } else { needs = Set(directories) }
            pending.append(PendingChange(change: change, needs: needs, directories: directories, frees: frees))
        }
    }

    /// Everything mutable, under one lock (the power-cut model in `InMemoryTree+PowerCut`).
    let state = Mutex(State())
    /// Device number reported for every object.
    public let device: UInt64
    /// Whether `stat` reports a birth time (derived from the inode, which is never reused).
    public let reportsBirthTime: Bool
    /// Whether `stat` reports an inode generation (derived from the inode too).
    public let reportsGeneration: Bool
    /// Whether `barrier` (syncfs) makes anything durable: false models FUSE, where only
    /// `syncEntry` (fsync) does.
    public let syncfsReaches: Bool
    /// Called before each operation; a returned error is thrown instead of doing it.
    public let failure = Mutex<(@Sendable (Operation, RelativePath) -> KeepSyncError?)?>(nil)

    /// An empty tree whose root directory exists.
    public init(device: UInt64 = 1, reportsBirthTime: Bool = true, reportsGeneration: Bool = false, syncfsReaches: Bool = true) {
        self.device = device
        self.syncfsReaches = syncfsReaches
        self.reportsBirthTime = reportsBirthTime
        self.reportsGeneration = reportsGeneration
        state.withLock { s in
            s.nodes[.root] = Node(kind: .directory, mode: 0o755, mtime: Timespec(seconds: 1, nanoseconds: 0),
                                  ctime: Timespec(seconds: 1, nanoseconds: 0), inode: 2, content: [], target: [])
        }
    }

    // MARK: Building and inspecting

    /// How many times an operation ran (successfully or not).
    public func count(_ op: Operation) -> Int { state.withLock { $0.counts[op, default: 0] } }

    /// Resets the counters.
    public func resetCounts() { state.withLock { $0.counts = [:] } }

    /// All nodes, by path.
    public var nodes: [RelativePath: Node] { state.withLock { $0.nodes } }

    /// The node at a path.
    public func node(_ path: RelativePath) -> Node? { state.withLock { $0.nodes[path] } }

    /// The incarnation of an inode number: it changes when the number is handed out
    /// again (after a power cut), so an oracle can tell a reused number from the object
    /// a record once named. Invisible to the code under test, as i_generation is to us.
    public func incarnation(ofInode inode: UInt64) -> UInt64 { state.withLock { $0.incarnations[inode] ?? 0 } }

    /// How reads of this tree's files go: at most `chunk` bytes a call (short reads, as a
    /// real file may give), and `between` called before each read after the first, with
    /// the path: where a writer may rewrite the file while it is read.
    public struct Reads: Sendable {
        /// Bytes a read returns at most.
        public var chunk = Int.max
        /// Called between two reads of one open file.
        public var between: (@Sendable (RelativePath) -> Void)?
        /// The default: whole reads, nobody in between.
        public init(chunk: Int = .max, between: (@Sendable (RelativePath) -> Void)? = nil) {
            self.chunk = chunk
            self.between = between
        }
    }

    /// How this tree's files are read (see `Reads`).
    public let reads = Mutex(Reads())

    /// Writes a regular file (creating or replacing in place), with an explicit mtime or a fresh tick.
    public func writeFile(_ path: RelativePath, _ content: [UInt8], mode: UInt32 = 0o644, mtime: Timespec? = nil) {
        state.withLock { s in
            let t = Self.advance(&s)
            var node = s.nodes[path] ?? Node(kind: .regular, mode: mode, mtime: t, ctime: t, inode: Self.newInode(&s),
                                             content: [], target: [])
            if node.kind != .regular { node = Node(kind: .regular, mode: mode, mtime: t, ctime: t, inode: Self.newInode(&s), content: [], target: []) }
            node.content = content
            node.mode = mode
            node.mtime = mtime ?? t
            node.ctime = t
            s.nodes[path] = node
            if node.links > 1 {
                // The other names of the inode see the write.
                for (other, n) in s.nodes where other != path && n.inode == node.inode { s.nodes[other] = node }
            }
            Self.touchParent(&s, path, t)
        }
    }

    /// Gives the regular file at `existing` another name, like link(2).
    public func hardLink(_ existing: RelativePath, at new: RelativePath) {
        state.withLock { s in
            guard var node = s.nodes[existing], node.kind == .regular else { return }
            let t = Self.advance(&s)
            node.links += 1
            node.ctime = t
            for (path, n) in s.nodes where n.inode == node.inode { s.nodes[path] = node }
            s.nodes[new] = node
            Self.touchParent(&s, new, t)
        }
    }

    /// Creates a directory (parents must exist).
    public func makeDirectory(_ path: RelativePath, mode: UInt32 = 0o755, mtime: Timespec? = nil) {
        state.withLock { s in
            let t = Self.advance(&s)
            s.nodes[path] = Node(kind: .directory, mode: mode, mtime: mtime ?? t, ctime: t, inode: Self.newInode(&s), content: [], target: [])
            Self.touchParent(&s, path, t)
        }
    }

    /// Creates a symlink.
    public func makeLink(_ path: RelativePath, to target: [UInt8]) {
        state.withLock { s in
            let t = Self.advance(&s)
            s.nodes[path] = Node(kind: .symlink, mode: 0o777, mtime: t, ctime: t, inode: Self.newInode(&s), content: [], target: target)
            Self.touchParent(&s, path, t)
        }
    }

    /// Creates a FIFO-like special file.
    public func makeSpecial(_ path: RelativePath) {
        state.withLock { s in
            let t = Self.advance(&s)
            s.nodes[path] = Node(kind: .special, mode: 0o644, mtime: t, ctime: t, inode: Self.newInode(&s), content: [], target: [])
            Self.touchParent(&s, path, t)
        }
    }

    /// Removes a path and everything below it (no counting, no failure injection).
    public func delete(_ path: RelativePath) {
        state.withLock { s in
            s.nodes = s.nodes.filter { !$0.key.isWithin(path) }
            Self.touchParent(&s, path, Self.advance(&s))
        }
    }

    /// Replaces a node's metadata in place (chmod, touch): every name of a hard-linked
    /// inode sees it.
    public func modify(_ path: RelativePath, _ body: (inout Node) -> Void) {
        state.withLock { s in
            guard var n = s.nodes[path] else { return }
            body(&n)
            n.ctime = Self.advance(&s)
            s.nodes[path] = n
            if n.links > 1 {
                for (other, o) in s.nodes where other != path && o.inode == n.inode { s.nodes[other] = n }
            }
        }
    }

    private static func advance(_ s: inout State) -> Timespec {
        s.tick += 1
        return Timespec(seconds: s.tick, nanoseconds: 123)
    }

    private static func newInode(_ s: inout State) -> UInt64 {
        s.nextInode += 1
        s.nextIncarnation += 1
        s.incarnations[s.nextInode] = s.nextIncarnation
        return s.nextInode
    }

    private static func touchParent(_ s: inout State, _ path: RelativePath, _ t: Timespec) {
        guard let parent = path.parent, var p = s.nodes[parent] else { return }
        p.mtime = t
        p.ctime = t
        s.nodes[parent] = p
    }

    private func stat(of n: Node) -> FileStat {
        var st = FileStat(kind: n.kind, mode: n.mode, size: UInt64(n.kind == .symlink ? n.target.count : n.content.count),
                          mtime: n.mtime, ctime: n.ctime, device: device, inode: n.inode)
        st.links = n.links
        if reportsBirthTime { st.birthTime = Timespec(seconds: 900_000 + Int64(n.inode), nanoseconds: 1) }
        if reportsGeneration { st.generation = UInt32(truncatingIfNeeded: 70_000 &+ n.inode) }
        return st
    }

    func begin(_ op: Operation, _ path: RelativePath) throws {
        state.withLock { $0.counts[op, default: 0] += 1 }
        if let hook = failure.withLock({ $0 }), let error = hook(op, path) { throw error }
    }

    private func requireDirectory(_ s: State, _ path: RelativePath?) throws {
        guard let path else { return }
        guard let n = s.nodes[path] else { throw KeepSyncError(.notFound, "no such directory", path: path) }
        guard n.kind == .directory else { throw KeepSyncError(.notFound, "not a directory", path: path) }
    }

    // MARK: FileSystemProviding

    /// `lstat`.
    public func stat(_ path: RelativePath) throws -> FileStat? {
        state.withLock { s in s.nodes[path].map { stat(of: $0) } }
    }

    /// Entries of a directory.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
        try begin(.list, directory)
        return try state.withLock { s in
            try requireDirectory(s, directory)
            return s.nodes.compactMap { path, node in
                path.parent == directory && !path.isRoot ? DirectoryEntry(name: path.name, stat: stat(of: node)) : nil
            }
        }
    }

    /// Link target.
    public func readLink(_ path: RelativePath) throws -> [UInt8] {
        try state.withLock { s in
            guard let n = s.nodes[path], n.kind == .symlink else { throw KeepSyncError(.notFound, "not a link", path: path) }
            return n.target
        }
    }

    /// Opens a regular file: the content as of now.
    public func open(_ path: RelativePath) throws -> any SourceFile {
        try begin(.open, path)
        return try state.withLock { s in
            guard let n = s.nodes[path] else { throw KeepSyncError(.notFound, "open: no such file", path: path) }
            guard n.kind == .regular else { throw KeepSyncError(.conflict, "open: not a regular file", path: path) }
            return InMemoryFile(tree: self, path: path, stat: stat(of: n), content: n.content)
        }
    }

    // MARK: FileAccessorProviding

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
