import Synchronization

/// The steps of a mirror whose file system `syncfs` does not reach (FUSE: exfat-fuse,
/// ntfs-3g, sshfs; SPEC "Mirrors on file systems that hold less"): each staged file is
/// fsynced itself, and a barrier fsyncs every file and directory changed since the last
/// one (`syncEntry`), deepest first, instead of one `syncfs`. `LocalMirror` wraps its
/// steps in it where its limits say so. Copies of a mirror share one (it is a class).
public final class EntrySyncedSteps: FileAccessorProviding {
    /// The steps underneath.
    public let base: any FileAccessorProviding
    /// What the next barrier owes an fsync: files and directories changed or claimed since
    /// the last one; and the paths a claim walked up from (their ancestors are owed already).
    private struct Owed {
        var entries: Set<RelativePath> = []
        var walked: Set<RelativePath> = []
    }
    private let owed = Mutex(Owed())
    /// Held by the barrier under way.
    private let barriers = Mutex<Void>(())

    /// Per-entry durability over `base`.
    public init(_ base: any FileAccessorProviding) {
        self.base = base
    }

    /// Notes entries for the next barrier once the call that changed them returned (or
    /// threw: it may have changed them anyway); a barrier under way meanwhile may have
    /// missed them.
    private func noting<T>(_ paths: RelativePath?..., call: () throws -> T) rethrows -> T {
        defer { owed.withLock { for case let p? in paths { $0.entries.insert(p) } } }
        return try call()
    }

    // MARK: Reads

    /// `lstat`.
    public func stat(_ path: RelativePath) throws -> FileStat? { try base.stat(path) }
    /// A directory's entries.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try base.list(directory) }
    /// A symlink's target.
    public func readLink(_ path: RelativePath) throws -> [UInt8] { try base.readLink(path) }
    /// Opens a file for reading.
    public func open(_ path: RelativePath) throws -> any SourceFile { try base.open(path) }
    /// The base's cheap stat.
    public func currentVersion(_ path: RelativePath) throws -> FileStat? { try base.currentVersion(path) }

    // MARK: Entries

    /// Creates a directory: its entry in its parent, and itself, are owed.
    public func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat {
        try noting(path, path.parent) { try base.makeDirectory(path, mode: mode) }
    }
    /// Creates or replaces a symlink: its parent's entry is owed (a link has no fsync).
    public func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat {
        try noting(path.parent) { try base.makeSymlink(path, target: target, mtime: mtime) }
    }
    /// Removes a path: its parent's entry is owed.
    public func remove(_ path: RelativePath) throws {
        try noting(path.parent) { try base.remove(path) }
    }
    /// Renames: both directories' entries are owed, and what moved.
    public func rename(_ from: RelativePath, to: RelativePath) throws {
        try noting(from.parent, to.parent, to) { try base.rename(from, to: to) }
    }
    /// `link` (the new name's directory owed).
    public func link(_ from: RelativePath, to: RelativePath) throws {
        try noting(to.parent, to) { try base.link(from, to: to) }
    }
    /// A link from another root: the new name's directory is owed here. (The origin's
    /// entries are untouched: a link removes no name there.)
    public func link(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        try noting(to.parent, to) { try base.link(from, in: origin, to: to) }
    }
    /// A move from another root: the new name's directory, and what moved, are owed here;
    /// the origin's directory is owed by the origin's steps (see `VersionKeepingSteps`).
    public func rename(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        try noting(to.parent, to) { try base.rename(from, in: origin, to: to) }
    }
    /// The steps below.
    public var innermost: any FileAccessorProviding { base.innermost }

    /// Sets mode and/or mtime: the entry's own inode is owed.
    public func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
        try noting(path) { try base.setAttributes(path, mode: mode, mtime: mtime) }
    }

    // MARK: Files

    /// Stages with the file's own fsync, always: a barrier here cannot reach its data.
    public func stage(_ path: RelativePath, from source: any SourceFile, durable: Bool) throws -> StagedFile {
        try base.stage(path, from: source, durable: true)
    }
    /// Renames a staged file into place: the file and its directory's entry are owed.
    public func publish(_ staged: StagedFile) throws -> FileStat {
        defer { owePublished([staged]) }
        return try base.publish(staged)
    }
    /// `publish` of each, in order.
    public func publishAll(_ staged: [StagedFile]) -> [Result<FileStat, any Error>] {
        defer { owePublished(staged) }
        return base.publishAll(staged)
    }
    private func owePublished(_ staged: [StagedFile]) {
        owed.withLock { for s in staged { $0.entries.insert(s.path); $0.entries.insert(s.path.parent!) } }
    }
    /// Removes a staged file's temp file.
    public func discard(_ staged: StagedFile) { base.discard(staged) }
    /// Removes a leftover temp file (nothing a record claims: owes nothing).
    public func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool { try base.removeLeftoverTemporary(path) }
    /// The base's probe.
    public func probe() throws { try base.probe() }
    /// A record will claim the entry (or its absence): it and every directory on the way
    /// to it are owed, whoever changed them (a killed process's change may be on no disk yet).
    public func willRecord(_ path: RelativePath) {
        owed.withLock { o in
            var p: RelativePath? = path
            while let q = p, o.walked.insert(q).inserted {
                o.entries.insert(q)
                p = q.parent
            }
        }
    }
    /// fsync of one entry.
    public func syncEntry(_ path: RelativePath) throws { try base.syncEntry(path) }

    /// fsyncs every entry changed so far, deepest first (an entry before its directory).
    /// One barrier at a time, each taking what changed before it began: a change noted
    /// meanwhile waits for the next; an fsync that fails leaves it and the rest owed.
    public func barrier() throws {
        try barriers.withLock { _ in
            let paths = owed.withLock { o in
                defer { o = Owed() }
                return o.entries
            }
            let ordered = paths.sorted { $0.depth != $1.depth ? $0.depth > $1.depth : $0 < $1 }
            for (i, path) in ordered.enumerated() {
                do { try base.syncEntry(path) } catch {
                    owed.withLock { $0.entries.formUnion(ordered[i...]) }
                    throw error
                }
            }
        }
    }
}
