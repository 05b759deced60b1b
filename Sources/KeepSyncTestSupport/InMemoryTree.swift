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
        /// `link` (a second name).
        case link
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
        /// Directory renames power cuts lost while they kept changes inside the directory.
        var lostDirectoryRenames: [(from: RelativePath, to: RelativePath)] = []

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
            var moves: UInt64?
            if case .rename(_, let to, nil) = change { moves = nodes[to]?.inode }
            pending.append(PendingChange(change: change, needs: needs, directories: directories, frees: frees, moves: moves))
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
    /// Whether the mirror steps' `link` makes a second name (ext4, xfs, btrfs); false
    /// models exFAT and FAT, where it throws `.unsupported`.
    public let hardLinks: Bool
    /// Called before each operation; a returned error is thrown instead of doing it.
    public let failure = Mutex<(@Sendable (Operation, RelativePath) -> KeepSyncError?)?>(nil)

    /// An empty tree whose root directory exists. `inodesAfter`: its inode numbers start
    /// past it (two trees modelling two roots of one file system get ranges of their own).
    /// `hardLinks`: `link` makes a second name (else it is `.unsupported`).
    public init(device: UInt64 = 1, reportsBirthTime: Bool = true, reportsGeneration: Bool = false, syncfsReaches: Bool = true,
                inodesAfter: UInt64 = 100, hardLinks: Bool = false) {
        self.device = device
        self.syncfsReaches = syncfsReaches
        self.hardLinks = hardLinks
        self.reportsBirthTime = reportsBirthTime
        self.reportsGeneration = reportsGeneration
        state.withLock { s in
            s.nextInode = inodesAfter
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

    static func advance(_ s: inout State) -> Timespec {
        s.tick += 1
        return Timespec(seconds: s.tick, nanoseconds: 123)
    }

    static func newInode(_ s: inout State) -> UInt64 {
        s.nextInode += 1
        s.nextIncarnation += 1
        s.incarnations[s.nextInode] = s.nextIncarnation
        return s.nextInode
    }

    static func touchParent(_ s: inout State, _ path: RelativePath, _ t: Timespec) {
        guard let parent = path.parent, var p = s.nodes[parent] else { return }
        p.mtime = t
        p.ctime = t
        s.nodes[parent] = p
    }

    func stat(of n: Node) -> FileStat {
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

    func requireDirectory(_ s: State, _ path: RelativePath?) throws {
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
}
