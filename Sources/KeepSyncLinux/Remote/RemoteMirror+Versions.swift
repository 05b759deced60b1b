import KeepSyncCore

/// A remote mirror's versions (SPEC "Versions"): the layout of a local mirror's, made over
/// the same connection in the same round trips. A file rsync replaces is linked aside by
/// rsync itself (`--backup-dir`, just before its rename: no moment without the name, no
/// byte copied) into a staging directory, and moved to its version's name by the next
/// barrier, just before its `sync` (the barrier a record waits for: off the change's
/// path, and covering the version), or before another run of that path (whose backup
/// would replace it); removals move into the versions directory
/// (`RemoteScript.removeKeeping`); a rename or symlink onto a file links it aside first.
extension RemoteMirror {
    /// Versions on a remote mirror: the directory (relative to the mirror root) and the
    /// clock of the tags.
    public struct VersionKeeping: Sendable {
        /// The versions directory, below the mirror root.
        public var directory: RelativePath
        /// Seconds since the epoch (UTC), the versions' tags.
        public var now: @Sendable () -> Int64

        /// Versions kept in `directory`, tagged by `now`.
        public init(directory: RelativePath, now: @escaping @Sendable () -> Int64) {
            precondition(!directory.isRoot, "the versions directory is below the mirror root")
            self.directory = directory
            self.now = now
        }

        /// Where rsync's `--backup-dir` puts what it replaces, under its relative path.
        public var staging: RelativePath { directory.appending(Array(".keepsync-incoming".utf8)) }

        /// A version of `path` at `seconds`, as the remote `kv` takes it: the directory it
        /// goes in, a file's name pattern (head, tail) and a directory's head.
        func words(_ path: RelativePath, seconds: Int64) -> [[UInt8]] {
            var parent = directory
            for c in (path.parent ?? .root).components { parent = parent.appending(c) }
            let file = VersionName(original: path.name, seconds: seconds).pattern
            let dir = VersionName(original: path.name, seconds: seconds, isDirectory: true).pattern
            return [parent.bytes, file.head, file.tail, dir.head]
        }
    }

    /// Versions moved from rsync's staging to their names so far.
    public var versionsStaged: Int { state.withLock { $0.versionsStaged } }

    /// rsync's options that keep what it replaces (none without versions).
    var backupArguments: [[UInt8]] {
        guard let versions else { return [] }
        return [Array("--backup".utf8), Array("--backup-dir=".utf8) + versions.staging.bytes, Array("--suffix=".utf8)]
    }

    /// Moves what rsync put aside for the staged paths among `paths` (all when nil) to the
    /// versions' names. Throws when that fails (the barrier then fails: the change is not
    /// recorded, and they are tried again).
    func moveStaged(of paths: [RelativePath]? = nil) throws {
        guard versions != nil else { return }
        let due: [RelativePath] = state.withLock { s in
            let due = paths.map { $0.filter { s.staged.contains($0) } } ?? Array(s.staged)
            s.staged.subtract(due)
            return due
        }
        guard !due.isEmpty else { return }
        do { try keepStaged(due) } catch {
            state.withLock { $0.staged.formUnion(due) }
            throw error
        }
    }

    /// Moves what rsync put aside for `paths` to the versions' names (one round trip, one
    /// remote `perl` where there is one); throws the first that could not move.
    func keepStaged(_ paths: [RelativePath]) throws {
        guard let versions, !paths.isEmpty else { return }
        let seconds = versions.now()
        let items = try paths.map { p in
            [try argument(RelativePath(bytes: versions.staging.bytes + [0x2F] + p.bytes))]
                + Array(versions.words(p, seconds: seconds).prefix(3))
        }
        let replies = try call(RemoteScript.keepStaged, items: items, perCall: 4, looping: false)
        state.withLock { $0.versionsStaged += replies.filter { $0.token == "0" }.count }
        if let (path, reply) = zip(paths, replies).first(where: { $0.1.token == "E" }) {
            throw KeepSyncError(.io, "versions: cannot keep the old file: \(String(decoding: reply.raw.dropFirst(), as: UTF8.self))",
                                path: path)
        }
    }

    /// What a run cut short left in rsync's staging, moved to versions' names now (at the
    /// start of a pass: before a later run's backup of the same path would replace it).
    func sweepStaged() {
        guard let versions else { return }
        guard let output = try? remote(RemoteScript.batch(target.directory,
                                                          "[ -d \"./$1\" ] || exit 0; exec find -P \"./$1\" ! -type d -printf \"%P\\\\0\""),
                                       input: RemoteScript.input([versions.staging.bytes])),
              output.status == 0 else { return }
        var reader = ReplyReader(output.stdout)
        var left: [RelativePath] = []
        while let name = reader.field() { left.append(RelativePath(bytes: name)) }
        try? keepStaged(left)
    }

    /// The words each of `paths` adds to a keeping script (`RemoteScript.removeKeeping`, …).
    func versionWords(_ paths: [RelativePath]) -> [[[UInt8]]]? {
        guard let versions else { return nil }
        let seconds = versions.now()
        return paths.map { versions.words($0, seconds: seconds) }
    }
}

/// Listed, thinned and counted like a local mirror's: through the mirror's own calls (a
/// removal inside the versions directory removes), the floor from the remote's `df`.
extension RemoteMirror: VersionKeepingMirror, VersionDirectoryProviding {
    /// The store of its versions directory, when it keeps versions.
    public var keptVersions: (store: VersionStore, now: @Sendable () -> Int64)? {
        guard let versions else { return nil }
        return (VersionStore(steps: self, directory: versions.directory, space: { [weak self] in self?.space() }), versions.now)
    }

    /// Removes each in one round trip (thinning removes many at once).
    public func removeEach(_ paths: [RelativePath]) -> [Result<Void, any Error>] {
        do { return try removeAll(paths).map { $0.mapError { $0 as any Error } } } catch {
            return paths.map { .failure(Self.naming(error, $0)) }
        }
    }

    /// The remote file system of the mirror directory: bytes free to an unprivileged
    /// writer and in all (`df -P -k`); nil when that cannot be read.
    public func space() -> (free: UInt64, total: UInt64)? {
        guard let output = try? remote(RemoteScript.plain(target.directory, "exec df -P -k .")), output.status == 0,
              let line = String(decoding: output.stdout, as: UTF8.self).split(separator: "\n").last else { return nil }
        // Filesystem 1024-blocks Used Available Capacity% Mounted-on (either name may hold
        // spaces: the numbers are found from the capacity).
        let fields = line.split(separator: " ")
        guard let capacity = fields.lastIndex(where: { $0.hasSuffix("%") }), capacity >= 3,
              let total = UInt64(fields[capacity - 3]), let free = UInt64(fields[capacity - 1]) else { return nil }
        return (free * 1024, total * 1024)
    }
}
