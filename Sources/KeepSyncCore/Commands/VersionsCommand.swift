/// `keepsync versions [PATH]` and `keepsync restore PATH`, over a mirror's versions
/// directory (SPEC "Versions").
public struct VersionsCommand: Sendable {
    /// The versions directory; nil when there is none yet (nothing was kept).
    public let store: VersionStore?
    /// The local time zone (`versions` prints local times).
    public let zone: LocalZone
    /// The versions directory's absolute path when it is outside the mirror: `--json`
    /// names each version by its absolute path (in the mirror, relative to its root).
    public let elsewhere: [UInt8]?

    /// The command over `store`, times printed in `zone`.
    public init(store: VersionStore?, zone: LocalZone, elsewhere: [UInt8]? = nil) {
        self.store = store
        self.zone = zone
        self.elsewhere = elsewhere
    }

    /// `versions`: one line per version of `path` or below, newest first, or a JSON array.
    public func list(under path: RelativePath, json: Bool, output: (String) -> Void) throws -> ExitCode {
        let sized = try store.map { store in
            try VersionListing.versions(under: path, in: store)
                .map { (version: $0, bytes: try VersionListing.bytes(of: $0, in: store.steps)) }
        } ?? []
        if json {
            output(VersionListing.json(sized, elsewhere: elsewhere))
        } else {
            for (version, bytes) in sized { output(VersionListing.line(version, bytes: bytes, zone: zone) + "\n") }
        }
        return .success
    }

    /// `restore`: the newest version of `path` at or before `at` (any when nil) copied by
    /// `restore` to `target` of its tree (`destination` names it when that is not the
    /// source); a line saying what and from when. Exit 1 naming `path` when there is none.
    public func restore(_ path: RelativePath, at: Int64?, with restore: VersionRestore, as target: RelativePath,
                        force: Bool, destination: String?, output: (String) -> Void) throws -> ExitCode {
        guard let version = try store.flatMap({ try VersionListing.newest(of: path, at: at, in: $0) }) else {
            let when = at.map { " at or before \(VersionTime.local($0, zone: zone))" } ?? ""
            throw KeepSyncError(.notFound, "restore: no version of \(path.escaped)\(when)")
        }
        try restore.restore(version, at: target, force: force)
        let slash = version.isDirectory ? "/" : ""
        let place = destination.map { " as \($0)\(slash)" } ?? ""
        output("restored \(path.escaped)\(slash)\(place) from the version of \(VersionTime.local(version.seconds, zone: zone))\n")
        return .success
    }

    /// A PATH argument as a path below the source root: relative to the root (`.`, empty
    /// and repeated slashes dropped), or absolute inside `source` (each of `absolute`, the
    /// argument made absolute in the ways the caller knows, is tried). `..` and a path
    /// outside the source exit 2.
    public static func sourcePath(_ argument: [UInt8], source: [UInt8], absolute: [[UInt8]]) throws -> RelativePath {
        var relative = argument
        if argument.first == 0x2F {
            guard let inside = absolute.first(where: { SettingsResolver.isWithin($0, source) }) else {
                throw KeepSyncError(.configuration, "\(ByteEscaping.escape(argument)) is not inside the source (\(ByteEscaping.escape(source)))")
            }
            relative = source == [0x2F] ? inside : Array(inside[source.count...])
        }
        let parts = relative.split(separator: 0x2F).filter { !$0.elementsEqual([0x2E]) }
        if parts.contains(where: { $0.elementsEqual([0x2E, 0x2E]) }) {
            throw KeepSyncError(.configuration, "\(ByteEscaping.escape(argument)): '..' is not taken; name a path below the source root")
        }
        return RelativePath(bytes: Array(parts.joined(separator: [0x2F])))
    }
}
