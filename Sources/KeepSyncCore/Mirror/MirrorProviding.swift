/// What the engine asks of a mirror: the seam a local mirror (`LocalMirror`) implements
/// today and a remote one (rsync over ssh) implements as a second conformance. Every
/// call names paths relative to the mirror root and must:
/// - stay confined below the root and never follow a symlink, at any component;
/// - be atomic per entry: a reader (or a power cut) sees a path's old state or its new
///   one, never a torn file, a half-written name or a temp file under a final name;
/// - keep its durability promise: an installed file's bytes are durable before it
///   appears under its name; entry changes (names, renames, removals, metadata) are
///   durable once `barrier` returns. The engine calls `barrier` before every record
///   append, so a record never claims what a power cut could undo.
/// Errors are `KeepSyncError`s naming the path (`.notFound`, `.conflict`, `.noSpace`, …).
/// The read side (`FileSystemProviding`) lists and stats what the mirror holds now.
/// A remote mirror maps a group install to one rsync run over a NUL-separated path list
/// (`--fsync`, then a remote barrier), and the entry calls to NUL-separated lists over
/// the same ssh connection; it keeps its own temp names and says 0 for an inode it
/// cannot see. A full pass brackets its work in `beginPass` and `endPass`, so that a
/// remote mirror reads its whole tree in one round trip, not one per directory; a round
/// of live changes in `beginReads` and `endReads`, for one round trip, not a few per path.
public protocol MirrorProviding: FileSystemProviding {
    /// Creates a directory (its mode and mtime are set later by `setAttributes`).
    func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat
    /// `makeDirectory` for several directories, in order (a parent before what is below
    /// it); a result per directory.
    func makeDirectories(_ directories: [(path: RelativePath, mode: UInt32)]) -> [Result<FileStat, any Error>]
    /// `stat` for several paths, a result per path (nil: nothing there); a remote mirror
    /// asks in one round trip.
    func statEach(_ paths: [RelativePath]) -> [Result<FileStat?, any Error>]
    /// `makeSymlink` for several links, in order; a result per link.
    func makeSymlinks(_ links: [(path: RelativePath, target: [UInt8], mtime: Timespec)]) -> [Result<FileStat, any Error>]
    /// True when `makeDirectories` and `makeSymlinks` cost one round trip each for them all
    /// (a remote mirror): a pass then makes the new directories and links of a stretch of
    /// its steps at once.
    var batchesEntries: Bool { get }
    /// Creates or atomically replaces a symlink with the source's mtime; returns its stat.
    func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat
    /// Removes a path; a directory is removed with everything below it.
    func remove(_ path: RelativePath) throws
    /// Renames within the mirror, replacing what is at `to` unless it is a non-empty directory.
    func rename(_ from: RelativePath, to: RelativePath) throws
    /// Sets permission bits and/or modification time of a file or directory.
    func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws
    /// `setAttributes` for several paths, in order; a result per change (a remote
    /// mirror: one round trip for them all).
    func setAttributesAll(_ changes: [(path: RelativePath, mode: UInt32?, mtime: Timespec?)]) -> [Result<Void, any Error>]

    /// Copies files from `source` into the mirror, each atomically with the source's mode
    /// and mtime, its bytes durable before it appears under its name (one barrier for a
    /// group; a lone path is installed on its own, the latency path); the names are
    /// durable after the next `barrier`. A source that changes during its copy is copied
    /// again; one that vanished yields nil. Results are in the order of `paths`. `io`
    /// lends threads for the copies; safe on any thread.
    func install(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                 logger: Logger) -> [(path: RelativePath, result: Result<CopyResult?, any Error>)]
    /// The same install of a group in three steps, so that a caller can overlap one
    /// group's barrier with its work on the next: this call starts transferring the data
    /// (nothing visible yet), `PendingInstall.commit` starts the barrier (a local mirror's
    /// starts at once, after its staging), `finish` waits for the files to be in place.
    func beginInstall(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                      logger: Logger) -> any PendingInstall

    /// How many group installs may run at once: a local mirror's share its disk and the
    /// copy threads (2); a remote one's mostly wait on the network and the remote's fsyncs.
    var concurrentGroups: Int { get }
    /// How many group installs a pass keeps in flight where its `ParallelIO` runs them
    /// beside the walk (`runsBeside`); `concurrentGroups` where it does not.
    var passGroups: Int { get }
    /// The most files in one group install: a local mirror's group shares one barrier
    /// (256); a remote one's is one rsync run, whose start and checks cost round trips.
    var groupFiles: Int { get }
    /// The most files in a pass's first group; each next one may hold twice as many, up
    /// to `groupFiles`: the first install starts while the walk goes on.
    var firstGroupFiles: Int { get }

    /// Makes every change made so far durable.
    func barrier() throws
    /// A record change is about to claim what the mirror holds at `path` (an entry, or for
    /// a removal its absence), made by this process or found so (a killed one's change, not
    /// yet durable): the next `barrier` covers it too.
    /// Nothing to do where a barrier covers the whole file system.
    func willRecord(_ path: RelativePath)
    /// Removes the leftover of an install a killed process left (`path` names one, see
    /// `TemporaryName`) unless an install of this process is still writing it; returns
    /// whether it was removed. Sweeps call it while installs run.
    func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool
    /// Checks that the mirror takes a small write (written and removed again): how a full
    /// or read-only mirror is found to be writable again.
    func probe() throws

    /// A full pass begins: the mirror may read its whole tree now and answer the pass's
    /// reads from that (a remote mirror: one round trip instead of one per directory),
    /// never with what a change made through it since made stale, but for a directory's
    /// own mtime, size and link count, which an entry change moves (the pass sets the
    /// mtime at the directory's finish whatever it reads). Throws when the mirror
    /// cannot be read: the pass fails rather than take it for empty.
    func beginPass() throws
    /// The full pass ended: what `beginPass` kept is dropped.
    func endPass()

    /// A round of live changes begins: `trees` are about to be scanned (with what is below
    /// them, and their ancestors stat'ed), `stats` stat'ed. The mirror may read all that
    /// now (a remote mirror: one round trip instead of a few per path) and answer from it
    /// until `endReads`, never with what a change made through it since made stale (a
    /// directory's own mtime aside, as for a pass). A
    /// hint: when that read fails, the reads ask as they go; throws only when the
    /// mirror cannot be reached (`.unreachable`), which every read would meet too.
    func beginReads(trees: [RelativePath], stats: [RelativePath]) throws
    /// The round ended: what `beginReads` kept is dropped.
    func endReads()
}

extension MirrorProviding {
    /// Nothing: the barrier covers everything.
    public func willRecord(_ path: RelativePath) {}
    /// Nothing to read ahead (a local mirror lists as cheaply as it stats).
    public func beginPass() throws {}
    /// Nothing kept.
    public func endPass() {}
    /// Two: a local disk.
    public var concurrentGroups: Int { 2 }
    /// `concurrentGroups`.
    public var passGroups: Int { concurrentGroups }
    /// 256 files.
    public var groupFiles: Int { 256 }
    /// `groupFiles`.
    public var firstGroupFiles: Int { groupFiles }
    /// One `makeDirectory` after the other.
    public func makeDirectories(_ directories: [(path: RelativePath, mode: UInt32)]) -> [Result<FileStat, any Error>] {
        directories.map { d in Result { try makeDirectory(d.path, mode: d.mode) } }
    }
    /// One `stat` after the other.
    public func statEach(_ paths: [RelativePath]) -> [Result<FileStat?, any Error>] {
        paths.map { p in Result { try stat(p) } }
    }
    /// One `makeSymlink` after the other.
    public func makeSymlinks(_ links: [(path: RelativePath, target: [UInt8], mtime: Timespec)]) -> [Result<FileStat, any Error>] {
        links.map { l in Result { try makeSymlink(l.path, target: l.target, mtime: l.mtime) } }
    }
    /// No: each directory is made when its step comes.
    public var batchesEntries: Bool { false }
    /// One `setAttributes` after the other.
    public func setAttributesAll(_ changes: [(path: RelativePath, mode: UInt32?, mtime: Timespec?)]) -> [Result<Void, any Error>] {
        changes.map { c in Result { try setAttributes(c.path, mode: c.mode, mtime: c.mtime) } }
    }
    /// Nothing to read ahead.
    public func beginReads(trees: [RelativePath], stats: [RelativePath]) throws {}
    /// Nothing kept.
    public func endReads() {}
}
