/// The mirror on a local file system: `MirrorProviding` over the steps of a
/// `FileAccessorProviding` (`AtomicFileAccessor` on disk, an `InMemoryTree` in tests).
/// Entry calls pass straight through; files are installed by group commit (stage every
/// file, one barrier, publish each still unchanged; `GroupCommit`), a lone file by
/// stage with its own fsync and publish.
public struct LocalMirror: MirrorProviding {
    /// The steps it runs.
    public let steps: any FileAccessorProviding
    /// What the file system holds (a case-only rename where names have no case goes
    /// through a temp name).
    public let limits: MirrorLimits
    /// How many times more a copy whose source changed during it is tried at once: 5 for
    /// `sync`; 0 for `run`, whose manager settles the file again instead (a writer is at
    /// work: a copy made at once may catch it between two of its writes).
    public let changedCopyRetries: Int

    /// A mirror over `steps`; where `limits` say `syncfs` does not reach, over
    /// `EntrySyncedSteps` of them (copies of this mirror share it: make one, and hand it
    /// to everyone who writes to this mirror). With `versions`, what a replace or removal
    /// would lose is kept in their directory, tagged with `now` (`VersionKeepingSteps`,
    /// above the entry-synced steps: its links and moves are owed the same barriers; a
    /// directory elsewhere gets entry-synced steps of its own where the mirror's do).
    public init(_ steps: any FileAccessorProviding, limits: MirrorLimits = .none, changedCopyRetries: Int = 5,
                versions: (directory: VersionsDirectory, now: @Sendable () -> Int64,
                           space: (@Sendable () -> (free: UInt64, total: UInt64)?)?)? = nil) {
        let synced = limits.syncfsReaches || steps is EntrySyncedSteps || steps is VersionKeepingSteps
            ? steps : EntrySyncedSteps(steps)
        self.steps = versions.map { v -> any FileAccessorProviding in
            switch v.directory {
            case .inMirror(let directory):
                return VersionKeepingSteps(synced, directory: directory, now: v.now, space: v.space)
            case .elsewhere(let root):
                let entrySynced = synced is EntrySyncedSteps
                return VersionKeepingSteps(synced, elsewhere: entrySynced ? EntrySyncedSteps(root) : root,
                                           coveredByBase: !entrySynced, now: v.now, space: v.space)
            }
        } ?? synced
        self.limits = limits
        self.changedCopyRetries = changedCopyRetries
    }

    /// Five groups in flight in a pass whose groups run beside its walk: each waits in
    /// turn for its staging, its barrier and its renames (see `GroupCommit`), and two
    /// left those lanes idle a third of the time on small files.
    public var passGroups: Int { 5 }

    // MARK: Reads

    /// `lstat` in the mirror.
    public func stat(_ path: RelativePath) throws -> FileStat? { try steps.stat(path) }
    /// A mirror directory's entries.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try steps.list(directory) }
    /// A mirror symlink's target.
    public func readLink(_ path: RelativePath) throws -> [UInt8] { try steps.readLink(path) }
    /// Opens a mirror file for reading.
    public func open(_ path: RelativePath) throws -> any SourceFile { try steps.open(path) }
    /// The steps' cheap stat.
    public func currentVersion(_ path: RelativePath) throws -> FileStat? { try steps.currentVersion(path) }

    // MARK: Entries

    /// Creates a directory.
    public func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat {
        try steps.makeDirectory(path, mode: mode)
    }
    /// Creates or replaces a symlink.
    public func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat {
        try steps.makeSymlink(path, target: target, mtime: mtime)
    }
    /// Removes a path and everything below it.
    public func remove(_ path: RelativePath) throws { try steps.remove(path) }
    /// Renames within the mirror. Where names have no case, a rename that changes only
    /// the case goes through a temp name (a file system may take `a` -> `A` as a rename
    /// onto itself and keep the old name).
    public func rename(_ from: RelativePath, to: RelativePath) throws {
        guard limits.foldsCase, from != to, let parent = from.parent, parent == to.parent,
              limits.caseKey(from.name) == limits.caseKey(to.name) else { return try steps.rename(from, to: to) }
        let aside = parent.appending(TemporaryName.random())
        try steps.rename(from, to: aside)
        do { try steps.rename(aside, to: to) } catch {
            try? steps.rename(aside, to: from)
            throw error
        }
    }
    /// Sets mode and/or mtime.
    public func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
        try steps.setAttributes(path, mode: mode, mtime: mtime)
    }
    /// `syncfs` (or the steps' equivalent).
    public func barrier() throws { try steps.barrier() }
    /// Tells the steps what the next barrier must cover.
    public func willRecord(_ path: RelativePath) { steps.willRecord(path) }
    /// Removes a temp file no copy of this process is writing.
    public func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool { try steps.removeLeftoverTemporary(path) }
    /// Writes and removes a small temp file in the root.
    public func probe() throws { try steps.probe() }

    // MARK: Files

    /// Copies several files with one group commit: stage each, one barrier, then
    /// rename each whose source is still the version copied; a changed one is copied
    /// again on its own. A single file takes the plain `copyFile` path.
    public func install(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                        logger: Logger) -> [(path: RelativePath, result: Result<CopyResult?, any Error>)] {
        if paths.count == 1 {
            return [(paths[0], Result { try copyFile(paths[0], from: source, logger: logger, attempts: 1 + changedCopyRetries) })]
        }
        var group = StagedGroup(staging: paths, from: source, into: steps, io: io)
        var barrierError: (any Error)?
        if !group.staged.isEmpty {
            do { try steps.barrier() } catch { barrierError = error }
        }
        group.publish(barrierError: barrierError, from: source, into: self, logger: logger)
        return group.orderedResults
    }

    /// Starts the group's staging, then its barrier and its renames, each in its lane of
    /// `io` (on the caller with `.serial`, the renames at `finish`): see `GroupCommit`.
    public func beginInstall(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                             logger: Logger) -> any PendingInstall {
        GroupCommit(paths, mirror: self, source: source, io: io, logger: logger)
    }

    /// Copies one file, again (up to `attempts` in all) when it changed during the copy;
    /// nil when the source vanished (not an error). Safe on any thread.
    func copyFile(_ path: RelativePath, from source: any FileSystemProviding, logger: Logger,
                  attempts: Int) throws -> CopyResult? {
        var attempt = 0
        while true {
            attempt += 1
            let file: any SourceFile
            do { file = try source.open(path) } catch let error as KeepSyncError where error.code == .notFound {
                logger.debug("\(path.escaped) vanished before it was copied")
                return nil
            }
            defer { file.close() }
            do {
                let installed = try steps.install(path, from: file)
                logger.debug("copied \(path.escaped) (\(installed.size) bytes)")
                return CopyResult(path: path, source: file.stat, installed: installed)
            } catch let error as KeepSyncError where error.code == .sourceChanged && attempt < attempts {
                logger.debug("\(path.escaped) changed during copy; copying again")
            }
        }
    }
}
