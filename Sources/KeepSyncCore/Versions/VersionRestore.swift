/// A tree that can rename without replacing (Linux: `renameat2` with `RENAME_NOREPLACE`).
public protocol NoReplaceRenaming {
    /// Renames `from` to `to`; `.conflict` when something is at `to`.
    func renameNoReplace(_ from: RelativePath, to: RelativePath) throws
}

/// `keepsync restore`'s copy: a version from the mirror into a tree (the source, or
/// `--to DIR`), atomically: built whole under a temp name beside its target (a file
/// fsynced, a directory's entries then the directory), renamed into place, its
/// directory fsynced. Bytes, mode and mtime are copied; symlinks stay symlinks.
public struct VersionRestore: Sendable {
    /// The mirror, where the versions are.
    public let mirror: any FileSystemProviding
    /// The tree restored into.
    public let target: any FileAccessorProviding
    /// The mode of a missing parent directory made on the way.
    public let directoryMode: UInt32

    /// Copies from `mirror` into `target`; parents made with `directoryMode`.
    public init(mirror: any FileSystemProviding, target: any FileAccessorProviding, directoryMode: UInt32 = 0o755) {
        self.mirror = mirror
        self.target = target
        self.directoryMode = directoryMode
    }

    /// Restores `version` at `path` of the target. What is there is kept (`.conflict`)
    /// unless `force`: then a file or symlink, or an empty directory, is replaced (one
    /// rename where the kinds allow, else removed first). A directory that is not empty is
    /// refused even with `force`: replacing it would drop whatever it holds now that no
    /// version may have yet.
    public func restore(_ version: StoredVersion, at path: RelativePath, force: Bool) throws {
        guard let parent = path.parent else { throw KeepSyncError(.conflict, "restore: the root cannot be restored") }
        try makeParents(parent)
        let existing = try target.stat(path)
        if let existing {
            guard force else { throw exists(path) }
            if existing.kind == .directory, !(try target.list(path)).isEmpty {
                throw KeepSyncError(.conflict, "restore: \(path.escaped) is a directory that is not empty; move it away first (--force replaces only files, symlinks and empty directories)")
            }
        }
        let temporary = parent.appending(TemporaryName.random())
        do {
            try copy(version.path, to: temporary)
            try place(temporary, at: path, replacing: existing)
        } catch {
            try? target.remove(temporary)
            throw error
        }
        try target.syncEntry(parent)
    }

    func exists(_ path: RelativePath) -> KeepSyncError {
        KeepSyncError(.conflict, "restore: \(path.escaped) exists; use --force to replace it")
    }

    /// Missing directories down to `directory`, made one by one.
    func makeParents(_ directory: RelativePath) throws {
        var at = RelativePath.root
        for name in directory.components {
            at = at.appending(name)
            switch try target.stat(at)?.kind {
            case .directory?: continue
            case nil:
                _ = try target.makeDirectory(at, mode: directoryMode)
                try target.setAttributes(at, mode: directoryMode, mtime: nil)
                try target.syncEntry(at.parent ?? .root)
            default:
                throw KeepSyncError(.conflict, "restore: \(at.escaped) is not a directory")
            }
        }
    }

    /// The version at `from` (in the mirror), whole, at `to` (in the target).
    func copy(_ from: RelativePath, to: RelativePath) throws {
        guard let stat = try mirror.stat(from) else {
            throw KeepSyncError(.notFound, "restore: the version is gone from the mirror", path: from)
        }
        switch stat.kind {
        case .regular:
            let file = try mirror.open(from)
            defer { file.close() }
            _ = try target.install(to, from: file)
        case .symlink:
            _ = try target.makeSymlink(to, target: try mirror.readLink(from), mtime: stat.mtime)
        case .directory:
            _ = try target.makeDirectory(to, mode: stat.mode)
            for entry in try mirror.list(from) { try copy(from.appending(entry.name), to: to.appending(entry.name)) }
            try target.setAttributes(to, mode: stat.mode, mtime: stat.mtime)
            try target.syncEntry(to)
        case .special:
            // The mirror holds none; nothing to restore.
            break
        }
    }

    /// Renames the built copy into place: never over anything unless it replaces `existing`.
    func place(_ temporary: RelativePath, at path: RelativePath, replacing existing: FileStat?) throws {
        guard let existing else {
            if let renamer = target as? NoReplaceRenaming {
                do { return try renamer.renameNoReplace(temporary, to: path) } catch let error as KeepSyncError where error.code == .conflict {
                    throw exists(path)
                }
            }
            guard try target.stat(path) == nil else { throw exists(path) }
            return try target.rename(temporary, to: path)
        }
        // A file onto a directory or a directory onto a file is no rename: the old one goes first.
        let isDirectory = try target.stat(temporary)?.kind == .directory
        if (existing.kind == .directory) != isDirectory { try target.remove(path) }
        try target.rename(temporary, to: path)
    }
}
