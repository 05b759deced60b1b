/// The local mirror's steps, under `LocalMirror`: the entry calls of `MirrorProviding`
/// with its guarantees, and a file install in the steps a power cut can fall between
/// (stage a temp file, barrier, publish or discard it). Relative to the mirror root,
/// never following a symlink and never writing outside it. A file's bytes are durable
/// before it appears under its name; the entries themselves are durable after the next
/// `barrier`. `AtomicFileAccessor` implements it on disk, `InMemoryTree` in memory.
public protocol FileAccessorProviding: VersionDirectoryProviding {
    /// Creates a directory (mode applied later by `setAttributes`).
    func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat
    /// Creates or atomically replaces a symlink; returns its stat.
    func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat
    /// Removes a path; a directory is removed with everything below it.
    func remove(_ path: RelativePath) throws
    /// Renames within the mirror, replacing what is at `to` unless it is a non-empty directory.
    func rename(_ from: RelativePath, to: RelativePath) throws
    /// Gives the file or symlink at `from` a second name `to` (a hard link; nothing is at
    /// `to`), never following a symlink. Throws `.unsupported` where the file system has
    /// no hard links.
    func link(_ from: RelativePath, to: RelativePath) throws
    /// `link` across two roots of one file system: the file or symlink at `from` below
    /// `origin`'s root gets a second name `to` below this one (nothing is at `to`).
    /// `.unsupported` where there are no hard links, or `origin` is steps of another kind.
    func link(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws
    /// `rename` across two roots of one file system: the entry at `from` below `origin`'s
    /// root (a directory with its tree) moves to `to` below this one (nothing is at `to`).
    func rename(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws
    /// The steps that reach the files, below any decorator (`EntrySyncedSteps`,
    /// `VersionKeepingSteps`): what a cross-root call reaches `origin`'s root through.
    var innermost: any FileAccessorProviding { get }
    /// Sets permission bits and/or modification time of a file or directory.
    func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws
    /// Group commit, step 1: writes `source` into a temp file next to `path` with its
    /// mode and mtime, not visible yet; `durable` fsyncs it too (a lone copy's barrier),
    /// else it is durable only after the next `barrier`.
    func stage(_ path: RelativePath, from source: any SourceFile, durable: Bool) throws -> StagedFile
    /// Makes everything written so far durable (one `syncfs`).
    func barrier() throws
    /// fsync of one file or directory (its data, attributes, and a directory's entries);
    /// nothing for a symlink or a path that is gone. Where `syncfs` does not reach
    /// (`EntrySyncedSteps`), barriers are made of these.
    func syncEntry(_ path: RelativePath) throws
    /// A record is about to claim the entry at `path` (see `MirrorProviding.willRecord`).
    func willRecord(_ path: RelativePath)
    /// Group commit, step 2 (after a barrier): renames a staged file into place.
    func publish(_ staged: StagedFile) throws -> FileStat
    /// `publish` of each, in order.
    func publishAll(_ staged: [StagedFile]) -> [Result<FileStat, any Error>]
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

extension FileAccessorProviding {
    /// No hard links.
    public func link(_ from: RelativePath, to: RelativePath) throws {
        throw KeepSyncError(.unsupported, "link: no hard links here", path: from)
    }

    /// No second root reachable from here.
    public func link(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        throw KeepSyncError(.unsupported, "link: no other root reachable from here", path: from)
    }

    /// No second root reachable from here.
    public func rename(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        throw KeepSyncError(.unsupported, "rename: no other root reachable from here", path: from)
    }

    /// Itself: no decorator.
    public var innermost: any FileAccessorProviding { self }

    /// Nothing: the barrier (syncfs) covers everything.
    public func willRecord(_ path: RelativePath) {}

    /// One `publish` after the other.
    public func publishAll(_ staged: [StagedFile]) -> [Result<FileStat, any Error>] {
        staged.map { s in Result { try publish(s) } }
    }

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
