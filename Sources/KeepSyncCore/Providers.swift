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
