/// One version in the versions directory.
public struct StoredVersion: Sendable, Equatable {
    /// Where it is, relative to the root of the store's steps (the mirror's, or the
    /// versions directory's own when it is elsewhere).
    public var path: RelativePath
    /// The path it had, relative to the mirror root (a stem cut short stays cut).
    public var original: RelativePath
    /// When it was replaced or deleted, seconds since the epoch (UTC).
    public var seconds: Int64
    /// `-N` within that second (1 for none).
    public var sequence: Int
    /// A deleted directory, kept whole.
    public var isDirectory: Bool
    /// A file's size (0 for a directory or symlink).
    public var size: UInt64
}

/// What a versions directory is read and thinned through: a tree that removes (a local
/// mirror's steps, a remote mirror).
public protocol VersionDirectoryProviding: FileSystemProviding {
    /// Removes a path and everything below it.
    func remove(_ path: RelativePath) throws
    /// `remove` of each (a remote mirror: one round trip for them all); a result per path.
    func removeEach(_ paths: [RelativePath]) -> [Result<Void, any Error>]
}

extension VersionDirectoryProviding {
    /// `remove` of each, one at a time.
    public func removeEach(_ paths: [RelativePath]) -> [Result<Void, any Error>] {
        paths.map { p in Result { try remove(p) } }
    }
}

/// A mirror that keeps versions some other way than `VersionKeepingSteps` (a remote one).
public protocol VersionKeepingMirror: MirrorProviding {
    /// Its versions directory and the clock of its tags; nil when it keeps none.
    var keptVersions: (store: VersionStore, now: @Sendable () -> Int64)? { get }
}

/// The versions directory of a mirror, read and thinned through the mirror's steps.
public struct VersionStore: Sendable {
    /// The mirror's steps (a removal inside the versions directory removes), or steps
    /// rooted at the versions directory when it is elsewhere.
    public let steps: any VersionDirectoryProviding
    /// The versions directory, relative to the root of `steps` (`.root` when elsewhere).
    public let directory: RelativePath
    /// The mirror's file system now: bytes free to an unprivileged writer and in all; nil
    /// when unknown (then no floor holds).
    public let space: (@Sendable () -> (free: UInt64, total: UInt64)?)?

    /// The share of the mirror's file system versions never take (SPEC: the last 5 %).
    public static let floorPercent: UInt64 = 5

    /// A store at `directory` of the tree under `steps`.
    public init(steps: any VersionDirectoryProviding, directory: RelativePath,
                space: (@Sendable () -> (free: UInt64, total: UInt64)?)? = nil) {
        self.steps = steps
        self.directory = directory
        self.space = space
    }

    /// Every version, in no order. A directory whose name carries a tag is a deleted
    /// directory's version (not read into); entries without a tag are not versions.
    public func list() throws -> [StoredVersion] {
        guard let root = try steps.stat(directory), root.kind == .directory else { return [] }
        var out: [StoredVersion] = []
        var pending: [(RelativePath, RelativePath)] = [(directory, .root)]
        while let (dir, original) = pending.popLast() {
            for entry in try steps.list(dir) {
                let here = dir.appending(entry.name)
                let isDirectory = entry.stat.kind == .directory
                if let name = VersionName(parsing: entry.name, isDirectory: isDirectory) {
                    out.append(StoredVersion(path: here, original: original.appending(name.original), seconds: name.seconds,
                                             sequence: name.sequence, isDirectory: isDirectory,
                                             size: entry.stat.kind == .regular ? entry.stat.size : 0))
                } else if isDirectory {
                    pending.append((here, original.appending(entry.name)))
                }
            }
        }
        return out
    }

    /// Whether the file system is in its last `floorPercent`.
    func belowFloor() -> Bool {
        guard let now = space?(), now.total > 0 else { return false }
        return now.free < now.total / 100 * Self.floorPercent
    }

    /// Removes what retention says goes (`VersionRetention`) at `now`, versions kept
    /// `keep` seconds; then, while the mirror's file system is in its last 5 %, the
    /// oldest left (`floored`). The removed versions, and the failures (each named).
    public func thin(now: Int64, keep: Int64) throws
        -> (removed: [StoredVersion], failed: [(StoredVersion, any Error)], floored: Int) {
        var removed: [StoredVersion] = [], failed: [(StoredVersion, any Error)] = []
        var left: [StoredVersion] = [], going: [StoredVersion] = []
        for (_, group) in Dictionary(grouping: try list(), by: \.original) {
            let ordered = group.sorted { ($0.seconds, $0.sequence) < ($1.seconds, $1.sequence) }
            // Two in one second: the later (higher sequence) counts as newer.
            let expired = VersionRetention.expired(ordered.map(\.seconds), now: now, keep: keep)
            for (i, version) in ordered.enumerated() {
                if expired.contains(i) { going.append(version) } else { left.append(version) }
            }
        }
        // In one call: a remote mirror removes them all in one round trip.
        for (version, result) in zip(going, steps.removeEach(going.map(\.path))) {
            switch result {
            case .success: removed.append(version)
            case .failure(let error): failed.append((version, error))
            }
        }
        var floored = 0
        for version in left.sorted(by: { ($0.seconds, $0.sequence) < ($1.seconds, $1.sequence) }) {
            guard belowFloor() else { break }
            do {
                try steps.remove(version.path)
                removed.append(version)
                floored += 1
            } catch { failed.append((version, error)) }
        }
        return (removed, failed, floored)
    }
}
