/// What `keepsync versions` lists and `restore` picks from: the versions of a path, as
/// lines and as JSON.
public enum VersionListing {
    /// The versions of `path` and of everything below it, newest first. Below the root,
    /// also the entry at `path` inside each kept directory that held it (a file of a
    /// deleted folder is restored from the folder's version), named as `path`.
    public static func versions(under path: RelativePath, in store: VersionStore) throws -> [StoredVersion] {
        let all = try store.list()
        var out = all.filter { $0.original.isWithin(path) }
        if !path.isRoot {
            for kept in all where kept.isDirectory && kept.original != path && path.isWithin(kept.original) {
                guard let inside = path.rebased(from: kept.original, to: kept.path), let stat = try store.steps.stat(inside)
                else { continue }
                out.append(StoredVersion(path: inside, original: path, seconds: kept.seconds, sequence: kept.sequence,
                                         isDirectory: stat.kind == .directory, size: stat.kind == .regular ? stat.size : 0))
            }
        }
        return out.sorted(by: newerFirst)
    }

    /// Newest first (a later `-N` of one second is newer), then by path.
    public static func newerFirst(_ a: StoredVersion, _ b: StoredVersion) -> Bool {
        if (a.seconds, a.sequence) != (b.seconds, b.sequence) { return (a.seconds, a.sequence) > (b.seconds, b.sequence) }
        if a.original != b.original { return a.original < b.original }
        return a.path < b.path
    }

    /// The newest version of exactly `path` (or inside a kept directory that held it) at or
    /// before `at` (any time when nil).
    public static func newest(of path: RelativePath, at: Int64?, in store: VersionStore) throws -> StoredVersion? {
        try versions(under: path, in: store).first { $0.original == path && $0.seconds <= (at ?? .max) }
    }

    /// A version's bytes: a file's size, the sum of a kept directory's files.
    public static func bytes(of version: StoredVersion, in tree: any FileSystemProviding) throws -> UInt64 {
        guard version.isDirectory else { return version.size }
        var total: UInt64 = 0
        var pending = [version.path]
        while let dir = pending.popLast() {
            for entry in try tree.list(dir) {
                if entry.stat.kind == .regular { total += entry.stat.size }
                if entry.stat.kind == .directory { pending.append(dir.appending(entry.name)) }
            }
        }
        return total
    }

    /// `2026-12-07 02:30:00 +0100     1.2 KiB  docs/report.odt` (a directory ends with `/`).
    public static func line(_ version: StoredVersion, bytes: UInt64, zone: LocalZone) -> String {
        let size = ByteSize.human(bytes)
        let padded = String(repeating: " ", count: max(0, 10 - size.count)) + size
        return "\(VersionTime.local(version.seconds, zone: zone))  \(padded)  \(version.original.escaped)\(version.isDirectory ? "/" : "")"
    }

    /// The JSON array `versions --json` prints, one object a line; paths escaped as in
    /// `status.json`. `"version"` is relative to the mirror root, or absolute when the
    /// versions directory is `elsewhere` (its absolute path).
    public static func json(_ versions: [(version: StoredVersion, bytes: UInt64)], elsewhere: [UInt8]? = nil) -> String {
        guard !versions.isEmpty else { return "[]\n" }
        let items = versions.map { v, bytes in
            let at = elsewhere.map { ByteEscaping.escape($0 + [0x2F] + v.path.bytes) } ?? v.path.escaped
            return "  {\"path\": \(StatusReport.quote(v.original.escaped)), \"time\": \(StatusReport.quote(VersionTime.iso(v.seconds))), "
                + "\"size\": \(bytes), \"directory\": \(v.isDirectory), \"version\": \(StatusReport.quote(at))}"
        }
        return "[\n" + items.joined(separator: ",\n") + "\n]\n"
    }
}
