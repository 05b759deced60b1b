/// An open source file: its stat at open time, reads, and a re-check.
public protocol SourceFile: AnyObject {
    /// The stat taken right after opening.
    var stat: FileStat { get }
    /// Reads up to `count` bytes; empty at end of file.
    func read(upTo count: Int) throws -> [UInt8]
    /// A fresh `fstat` of the open file.
    func currentStat() throws -> FileStat
    /// Closes the file; further calls fail.
    func close()
}

/// Read-only access to a tree, relative to its root, never following a symlink.
public protocol FileSystemProviding: Sendable {
    /// `lstat` of a path; nil when it does not exist.
    func stat(_ path: RelativePath) throws -> FileStat?
    /// The entries of a directory with their `lstat`, in no particular order.
    func list(_ directory: RelativePath) throws -> [DirectoryEntry]
    /// The target bytes of a symlink.
    func readLink(_ path: RelativePath) throws -> [UInt8]
    /// Opens a regular file for reading.
    func open(_ path: RelativePath) throws -> any SourceFile
    /// The stat at `path`, for telling whether a file changed since a stat (may be
    /// cheaper than `stat`, and need not be confined: a wrong answer only differs).
    func currentVersion(_ path: RelativePath) throws -> FileStat?
}

extension FileSystemProviding {
    /// `stat`, unless the tree has a cheaper way.
    public func currentVersion(_ path: RelativePath) throws -> FileStat? { try stat(path) }
}

/// Writes into the mirror, relative to its root, never following a symlink and never
/// writing outside it. A file's bytes are durable before it appears under its name; the
/// entries themselves are durable after the next `barrier`, which every record append
/// waits for (a record never claims what a power cut could undo).
public protocol FileAccessorProviding: FileSystemProviding {
    /// Creates a directory (mode applied later by `setAttributes`).
    func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat
    /// Creates or atomically replaces a symlink; returns its stat.
    func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat
    /// Removes a path; a directory is removed with everything below it.
    func remove(_ path: RelativePath) throws
    /// Renames within the mirror, replacing what is at `to` unless it is a non-empty directory.
    func rename(_ from: RelativePath, to: RelativePath) throws
    /// Sets permission bits and/or modification time of a file or directory.
    func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws
    /// Group commit, step 1: writes `source` into a temp file next to `path` with its
    /// mode and mtime, not visible yet; `durable` fsyncs it too (a lone copy's barrier),
    /// else it is durable only after the next `barrier`.
    func stage(_ path: RelativePath, from source: any SourceFile, durable: Bool) throws -> StagedFile
    /// Makes everything written so far durable (one `syncfs`).
    func barrier() throws
    /// Group commit, step 2 (after a barrier): renames a staged file into place.
    func publish(_ staged: StagedFile) throws -> FileStat
    /// Removes a staged file's temp file.
    func discard(_ staged: StagedFile)
    /// Removes a keepsync temp file (`path` names one) unless a copy of this process is
    /// still writing it; returns whether it was removed. A sweep calls it, so that copies
    /// in flight need not stop sweeps.
    func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool
    /// Checks that the mirror takes a small write (a temp file in its root, written and
    /// removed): how a full or read-only mirror is found to be writable again.
    func probe() throws
}

/// A copy written to a temp file, waiting for a barrier and its rename.
public struct StagedFile: Sendable, Equatable {
    /// Where it goes.
    public var path: RelativePath
    /// The temp file's name in the same directory.
    public var temporaryName: [UInt8]
    /// The source's stat when it was opened (the version copied).
    public var source: FileStat

    /// A staged file.
    public init(path: RelativePath, temporaryName: [UInt8], source: FileStat) {
        self.path = path
        self.temporaryName = temporaryName
        self.source = source
    }
}

/// The crash-safe home of the bookmark records.
public protocol BookmarkStorageProviding: Sendable {
    /// Loads everything; a damaged store yields what could be trusted and `wasDamaged`.
    func load() throws -> RecordSet
    /// Appends a batch of changes durably (fsynced before returning).
    func apply(_ changes: [RecordChange]) throws
    /// Rewrites the store atomically to hold exactly `set`.
    func compact(_ set: RecordSet) throws
}

/// What a watcher reports.
public enum WatchEvent: Hashable, Sendable {
    /// Something at the path was created, written or had its metadata changed.
    case changed(RelativePath)
    /// A write to the path was closed: it is complete for now.
    case closedAfterWrite(RelativePath)
    /// A path moved within the tree.
    case moved(from: RelativePath, to: RelativePath)
    /// The path is gone.
    case removed(RelativePath)
    /// Events were lost or cannot be trusted: rescan everything.
    case rescan(reason: String)
}

/// Watches a tree and reports changes below its root.
public protocol WatcherProviding: Sendable {
    /// Starts watching; the stream ends when `stop` is called.
    func start(excluding excludes: ExcludeMatcher) throws -> AsyncStream<WatchEvent>
    /// Stops watching and ends the stream.
    func stop()
    /// Directories that could not be watched (inotify's watch limit).
    var unwatchedDirectories: Int { get }
}

extension FileAccessorProviding {
    /// Copies `source` to `path` on its own, atomically and durably: staged (temp file,
    /// data, mode, mtime) and fsynced, the source checked unchanged, renamed into place.
    /// The group commit's steps with the file's fsync for the barrier, through the same
    /// seam, so that a fake mirror sees every step a power cut can fall between.
    /// Throws `.sourceChanged` when the source changed during the copy.
    public func install(_ path: RelativePath, from source: any SourceFile) throws -> FileStat {
        let staged = try stage(path, from: source, durable: true)
        do {
            guard try source.currentStat().sameVersion(as: staged.source) else {
                throw KeepSyncError(.sourceChanged, "source changed during copy", path: path)
            }
        } catch {
            discard(staged)
            throw error
        }
        return try publish(staged)
    }
}
