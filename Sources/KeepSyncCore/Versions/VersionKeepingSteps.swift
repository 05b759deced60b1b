import Synchronization

/// The steps of a mirror that keeps versions (SPEC "Versions"): just before the content
/// at a name is replaced (`publish`, `makeSymlink`, a `rename` onto it) the old file or
/// symlink gets a second name in the versions directory (`link`: no byte copied, never
/// a moment without a file at the name; where the file system has no hard links it is
/// renamed there first); a removed entry, a directory with its whole tree, is renamed
/// there. Attributes, new names and temp files go straight through.
///
/// The versions directory is a directory of the mirror, reached through `base`; or the
/// root of steps of its own elsewhere on the mirror's file system (`versions`), reached
/// by the cross-root `link`/`rename` (one `linkat`/`renameat` between the two roots).
/// Either way the barrier that covers the change covers its version: in the mirror every
/// step goes through `base` (on FUSE the `EntrySyncedSteps` that owes the versions'
/// entries an fsync); elsewhere the versions' own barrier runs first, unless the mirror's
/// covers them (one `syncfs` of their one file system).
public final class VersionKeepingSteps: FileAccessorProviding {
    /// The steps underneath.
    public let base: any FileAccessorProviding
    /// The steps the versions directory is reached through: `base` when it is in the
    /// mirror, else steps rooted at it.
    public let versions: any FileAccessorProviding
    /// The versions directory, relative to the root of `versions`: a directory below the
    /// mirror root, or the root itself when it is elsewhere.
    public let directory: RelativePath
    /// The time now, seconds since the epoch (UTC): the versions' tags.
    public let now: @Sendable () -> Int64
    /// The mirror's file system's free and total bytes (`VersionStore.space`).
    public let space: (@Sendable () -> (free: UInt64, total: UInt64)?)?
    /// The versions directory below the mirror root, which replaces and removals leave
    /// alone; nil when it is elsewhere.
    private let reserved: RelativePath?
    /// `barrier` runs the versions' own barrier too (elsewhere, where the mirror's does not
    /// reach them).
    private let versionsBarrier: Bool

    private struct State {
        /// False once a link was refused (`.unsupported`): replaced files are moved aside.
        var links = true
        var linked = 0
        var moved = 0
    }
    private let state = Mutex(State())
    /// Held while a version's name is chosen and taken (two in one second get `-2`).
    private let naming = Mutex<Void>(())

    /// Versions kept under `directory`, a directory of the mirror, tagged with `now`.
    public init(_ base: any FileAccessorProviding, directory: RelativePath, now: @escaping @Sendable () -> Int64,
                space: (@Sendable () -> (free: UInt64, total: UInt64)?)? = nil) {
        precondition(!directory.isRoot, "the versions directory is below the mirror root")
        self.base = base
        self.versions = base
        self.directory = directory
        self.now = now
        self.space = space
        reserved = directory
        versionsBarrier = false
    }

    /// Versions kept at the root of `versions`, steps rooted elsewhere on the mirror's file
    /// system, tagged with `now`. `coveredByBase`: the mirror's barrier makes them durable
    /// too (`syncfs`); else `barrier` runs theirs first (FUSE: `versions` are entry-synced).
    public init(_ base: any FileAccessorProviding, elsewhere versions: any FileAccessorProviding, coveredByBase: Bool,
                now: @escaping @Sendable () -> Int64, space: (@Sendable () -> (free: UInt64, total: UInt64)?)? = nil) {
        self.base = base
        self.versions = versions
        self.directory = .root
        self.now = now
        self.space = space
        reserved = nil
        versionsBarrier = !coveredByBase
    }

    /// Versions kept by a second name, and by a move (removals, and replaces where links fail).
    public var kept: (linked: Int, moved: Int) { state.withLock { ($0.linked, $0.moved) } }

    // MARK: Versions

    /// Keeps what is at `path` (a regular file or symlink; a directory only when
    /// `replacing` is false) as a version; nothing when nothing is there. `replacing`: the
    /// name is about to get new content, so it keeps its file until then (a link).
    private func keep(_ path: RelativePath, replacing: Bool) throws {
        if let reserved, path.isWithin(reserved) || reserved.isWithin(path) { return }
        guard let stat = try base.stat(path) else { return }
        switch stat.kind {
        case .regular, .symlink: break
        case .directory where !replacing: break
        default: return
        }
        try naming.withLock { _ in
            let target = try place(path, isDirectory: stat.kind == .directory)
            if replacing && state.withLock({ $0.links }) {
                do {
                    try linkAside(path, to: target)
                    state.withLock { $0.linked += 1 }
                    return
                } catch let error as KeepSyncError where error.code == .unsupported {
                    state.withLock { $0.links = false }
                }
            }
            try moveAside(path, to: target)
            state.withLock { $0.moved += 1 }
        }
    }

    /// A second name at `target` in the versions directory for the mirror's `path`.
    private func linkAside(_ path: RelativePath, to target: RelativePath) throws {
        if reserved == nil { try versions.link(path, in: base, to: target) } else { try base.link(path, to: target) }
    }

    /// The mirror's `path` moved to `target` in the versions directory. Elsewhere, the
    /// mirror's directory is owed by the step that follows (a publish, a symlink, a rename
    /// onto the name, a removal: each notes the name's directory in the entry-synced steps).
    private func moveAside(_ path: RelativePath, to target: RelativePath) throws {
        if reserved == nil { try versions.rename(path, in: base, to: target) } else { try base.rename(path, to: target) }
    }

    /// A free name for a version of `path` now: its directories made in the versions
    /// directory, the tag's sequence past the names taken.
    private func place(_ path: RelativePath, isDirectory: Bool) throws -> RelativePath {
        var parent = directory
        if !parent.isRoot { try makeDirectoryIfMissing(parent) }
        for component in (path.parent ?? .root).components {
            parent = parent.appending(component)
            try makeDirectoryIfMissing(parent)
        }
        let seconds = now()
        var sequence = 1
        while true {
            let candidate = parent.appending(VersionName(original: path.name, seconds: seconds, sequence: sequence,
                                                         isDirectory: isDirectory).bytes)
            if try versions.stat(candidate) == nil { return candidate }
            sequence += 1
        }
    }

    private func makeDirectoryIfMissing(_ path: RelativePath) throws {
        if let stat = try versions.stat(path) {
            guard stat.kind == .directory else {
                throw KeepSyncError(.conflict, "the versions directory holds something else here", path: path)
            }
            return
        }
        // The versions directory in the mirror: its parent, the mirror root, keeps the mtime
        // a pass gave it from the source (none would put it back before the next full pass).
        let parent = reserved != nil && path == directory ? path.parent ?? .root : nil
        let parentTime = try parent.flatMap { try base.stat($0)?.mtime }
        _ = try versions.makeDirectory(path, mode: 0o700)
        // Not putting it back costs an mtime until the next full pass, not the change.
        if let parent, let parentTime { try? base.setAttributes(parent, mode: nil, mtime: parentTime) }
    }

    // MARK: Steps that replace or remove

    /// The old content kept, then the staged file renamed over the name. A publish that
    /// fails removes its temp file (as the steps' own do): so does a keep that fails.
    public func publish(_ staged: StagedFile) throws -> FileStat {
        do { try keep(staged.path, replacing: true) } catch {
            base.discard(staged)
            throw error
        }
        return try base.publish(staged)
    }

    /// `publish` of each: a file whose old content could not be kept is not published
    /// (its temp file removed).
    public func publishAll(_ staged: [StagedFile]) -> [Result<FileStat, any Error>] {
        var results: [Result<FileStat, any Error>?] = staged.map { s in
            do { try keep(s.path, replacing: true) } catch {
                base.discard(s)
                return .failure(error)
            }
            return nil
        }
        let ready = staged.indices.filter { results[$0] == nil }
        for (i, result) in zip(ready, base.publishAll(ready.map { staged[$0] })) { results[i] = result }
        return results.map { $0! }
    }

    /// The old symlink or file kept, then the new link made.
    public func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat {
        try keep(path, replacing: true)
        return try base.makeSymlink(path, target: target, mtime: mtime)
    }

    /// Moved into the versions directory whole (one rename); inside it, removed.
    public func remove(_ path: RelativePath) throws {
        if let reserved, path.isWithin(reserved) { return try base.remove(path) }
        try keep(path, replacing: false)
        // What is left: an entry kept no versions of (a special file).
        try base.remove(path)
    }

    /// What is at `to` (a file or symlink) kept, then the rename.
    public func rename(_ from: RelativePath, to: RelativePath) throws {
        if from != to { try keep(to, replacing: true) }
        try base.rename(from, to: to)
    }

    // MARK: Straight through

    /// `lstat`.
    public func stat(_ path: RelativePath) throws -> FileStat? { try base.stat(path) }
    /// Entries.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try base.list(directory) }
    /// A symlink's target.
    public func readLink(_ path: RelativePath) throws -> [UInt8] { try base.readLink(path) }
    /// A file to read.
    public func open(_ path: RelativePath) throws -> any SourceFile { try base.open(path) }
    /// The current version.
    public func currentVersion(_ path: RelativePath) throws -> FileStat? { try base.currentVersion(path) }
    /// A new directory.
    public func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat { try base.makeDirectory(path, mode: mode) }
    /// A hard link.
    public func link(_ from: RelativePath, to: RelativePath) throws { try base.link(from, to: to) }
    /// A hard link from another root.
    public func link(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        try base.link(from, in: origin, to: to)
    }
    /// A move from another root: no version (nothing is at `to`).
    public func rename(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        try base.rename(from, in: origin, to: to)
    }
    /// The steps below.
    public var innermost: any FileAccessorProviding { base.innermost }
    /// Mode and mtime: no version.
    public func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
        try base.setAttributes(path, mode: mode, mtime: mtime)
    }
    /// A temp file.
    public func stage(_ path: RelativePath, from source: any SourceFile, durable: Bool) throws -> StagedFile {
        try base.stage(path, from: source, durable: durable)
    }
    /// The barrier, covering the versions too: elsewhere, where the mirror's does not reach
    /// them, theirs first (a cut between the two keeps the old content in the versions
    /// directory, never loses it).
    public func barrier() throws {
        if versionsBarrier { try versions.barrier() }
        try base.barrier()
    }
    /// One entry's fsync.
    public func syncEntry(_ path: RelativePath) throws { try base.syncEntry(path) }
    /// A record will claim `path`, and with it the versions directory that holds its
    /// versions: a process killed before its barrier may have kept one there, which the
    /// restarted one records the change of (on FUSE only what is fsynced is durable).
    public func willRecord(_ path: RelativePath) {
        base.willRecord(path)
        guard !path.isRoot, !(reserved.map { path.isWithin($0) } ?? false) else { return }
        versions.willRecord((path.parent ?? .root).components.reduce(directory) { $0.appending($1) })
    }
    /// A temp file dropped: never a version.
    public func discard(_ staged: StagedFile) { base.discard(staged) }
    /// A leftover temp file: never a version.
    public func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool { try base.removeLeftoverTemporary(path) }
    /// The writability probe.
    public func probe() throws { try base.probe() }
}
