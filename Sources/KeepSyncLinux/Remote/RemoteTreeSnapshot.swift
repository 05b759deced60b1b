import KeepSyncCore

/// A remote mirror's whole tree as one `find` read it (`RemoteMirror.snapshot()`): a
/// read side for `check` that answers `stat`, `list` and `readLink` without a round trip
/// per directory. File contents (`open`, when contents are compared) still come from the
/// mirror. Below a path that is not a directory of the tree, nothing is there.
public struct RemoteTreeSnapshot: FileSystemProviding {
    let listing: RemoteTreeListing
    /// The mirror it was read from.
    public let mirror: RemoteMirror

    /// Entries below the root.
    public var count: Int { listing.entries.count }

    /// The entry's stat; nil when not there.
    public func stat(_ path: RelativePath) throws -> FileStat? {
        if case .present(let stat, _) = listing.answer(path) { return stat }
        return nil
    }

    /// A directory's entries.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
        guard let entries = listing.list(directory) else {
            throw KeepSyncError(.notFound, "list: no such directory on \(mirror.session.host)", path: directory)
        }
        return entries
    }

    /// A symlink's target.
    public func readLink(_ path: RelativePath) throws -> [UInt8] {
        guard case .present(let stat, let target) = listing.answer(path) else {
            throw KeepSyncError(.notFound, "readlink: not there", path: path)
        }
        guard stat.kind == .symlink else { throw KeepSyncError(.conflict, "readlink: not a symlink", path: path) }
        return target
    }

    /// The file's bytes, fetched from the mirror.
    public func open(_ path: RelativePath) throws -> any SourceFile { try mirror.open(path) }
}
