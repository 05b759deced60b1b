/// What the manager asks of the engine between passes: copy jobs to run off the actor,
/// the mirror's probe, a round's reads, and the few looks at the trees its decisions
/// need. The manager decides when; the engine knows the mirror, the source and the store.
extension SyncEngine {
    /// Files to install together: the one way copies reach the mirror, for `run` (off the
    /// manager's actor, its results back to `recordCopy` or the manager's failure rules)
    /// and for `sync` (the engine's groups beside its walk).
    public struct CopyJob: Sendable {
        /// The files, in order.
        public let paths: [RelativePath]
        let source: any FileSystemProviding
        let mirror: any MirrorProviding
        let io: ParallelIO
        let logger: Logger

        /// Installs the files (one group commit, or a lone install for one file).
        func run() -> CopyResults {
            mirror.install(paths, from: source, io: io, logger: logger)
        }

        /// Starts the install of a group whose barrier the caller overlaps with its next
        /// work (`PendingInstall`: commit, then finish).
        func begin() -> any PendingInstall {
            mirror.beginInstall(paths, from: source, io: io, logger: logger)
        }
    }

    /// A job that installs `paths`, staging a group's files on `io`.
    func copyJob(_ paths: [RelativePath], io: ParallelIO) -> CopyJob {
        CopyJob(paths: paths, source: source, mirror: mirror, io: io, logger: logger)
    }

    /// How the mirror takes copies: files per group commit, and groups at once.
    var copyShape: (groupFiles: Int, concurrentGroups: Int) { (mirror.groupFiles, mirror.concurrentGroups) }

    /// Asks whether the mirror takes writes (and, remote, whether its host answers).
    func probeMirror() throws {
        try mirror.probe()
    }

    /// Starts a round: the mirror reads the trees below `trees` and the `stats` at once
    /// (a remote one: one round trip). Every successful call is followed by `endRound`.
    func beginRound(trees: [RelativePath], stats: [RelativePath] = []) throws {
        try mirror.beginReads(trees: trees, stats: stats)
    }

    /// Ends a round's reads.
    func endRound() {
        mirror.endReads()
    }

    /// The kind of what the source holds at `path` now (nil: nothing, or it cannot be read).
    func sourceKind(_ path: RelativePath) -> FileKind? {
        ((try? source.stat(path)) ?? nil)?.kind
    }

    /// The source's stat of `path` now (nil: nothing, or it cannot be read).
    func sourceStat(_ path: RelativePath) -> FileStat? {
        (try? source.stat(path)) ?? nil
    }

    /// `path`, or its nearest ancestor whose parent directory the mirror holds: the scope
    /// a change there is scanned as.
    func nearestMirrorScope(_ path: RelativePath) -> RelativePath {
        var scope = path
        while let parent = scope.parent, (try? mirror.stat(parent))??.kind != .directory {
            scope = parent
        }
        return scope
    }
}
