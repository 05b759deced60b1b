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
