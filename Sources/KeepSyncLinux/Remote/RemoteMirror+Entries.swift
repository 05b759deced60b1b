import Glibc
import KeepSyncCore

/// The remote mirror's entry changes: directories, links, removals, renames, attributes,
/// each as NUL-separated lists through a fixed remote script, in as few round trips as it can.
extension RemoteMirror {

    /// `mkdir -m MODE` on the remote; its stat.
    public func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat {
        try makeDirectories([(path, mode)])[0].get()
    }

    /// Several directories in one round trip, in order; a result per directory (a
    /// transport failure fails them all).
    public func makeDirectories(_ directories: [(path: RelativePath, mode: UInt32)]) -> [Result<FileStat, any Error>] {
        makeEntries(directories.map(\.path), RemoteScript.makeDirectory, perCall: 2, "mkdir",
                    after: RemoteScript.flushDirectories) { path, i in
            [try argument(path), Self.octal(directories[i].mode)]
        }
    }

    /// A symlink made under a temp name and renamed over `path`; its stat.
    public func makeSymlink(_ path: RelativePath, target link: [UInt8], mtime: Timespec) throws -> FileStat {
        try makeSymlinks([(path, link, mtime)])[0].get()
    }

    /// Several symlinks in one round trip, in order; a result per link.
    public func makeSymlinks(_ links: [(path: RelativePath, target: [UInt8], mtime: Timespec)]) -> [Result<FileStat, any Error>] {
        let kept = versionWords(links.map(\.path))
        return makeEntries(links.map(\.path), kept == nil ? RemoteScript.makeSymlink : RemoteScript.makeSymlinkKeeping,
                           perCall: kept == nil ? 4 : 8, "symlink") { path, i in
            [try argument(path), links[i].target, Self.touchTime(links[i].mtime),
             try argument((path.parent ?? .root).appending(TemporaryName.random()))] + (kept?[i] ?? [])
        }
    }

    /// Runs `script` once over every path (`words` gives each one's arguments) in one round
    /// trip; the stat of each new entry, or why not.
    private func makeEntries(_ paths: [RelativePath], _ script: String, perCall: Int, _ verb: String,
                             after: String = RemoteScript.statMade, words: (RelativePath, Int) throws -> [[UInt8]]) -> [Result<FileStat, any Error>] {
        do {
            let items = try paths.enumerated().map { i, path in try words(path, i) }
            changing(paths)
            let replies = try call(script, items: items, perCall: perCall, after: after)
            return zip(paths, replies).map { path, reply in
                guard reply.token == "S", let stat = reply.stat else { return .failure(reply.error(path, verb)) }
                return .success(stat)
            }
        } catch {
            return paths.map { .failure(Self.naming(error, $0)) }
        }
    }

    /// Yes: a round trip costs more than the mkdirs and links.
    public var batchesEntries: Bool { true }

    /// Removes a path and everything below it.
    public func remove(_ path: RelativePath) throws {
        precondition(!path.isRoot, "the mirror root is never removed")
        try removeAll([path])[0].get()
    }

    /// Removes several paths in one round trip; a result per path.
    /// With versions, each moves into the versions directory (one inside it is removed).
    public func removeAll(_ paths: [RelativePath]) throws -> [Result<Void, KeepSyncError>] {
        if let versions, paths.contains(where: { $0.isWithin(versions.directory) }),
           paths.contains(where: { !$0.isWithin(versions.directory) }) {
            // Versions and mirror entries in one call: each side its own.
            var results: [RelativePath: Result<Void, KeepSyncError>] = [:]
            for side in [true, false] {
                let part = paths.filter { $0.isWithin(versions.directory) == side }
                for (p, r) in zip(part, try removeAll(part)) { results[p] = r }
            }
            return paths.map { results[$0]! }
        }
        changing(paths)
        let kept = versions.flatMap { v in paths.contains { $0.isWithin(v.directory) } ? nil : versionWords(paths) }
        let replies = try kept.map { words in
            try call(RemoteScript.removeKeeping, items: paths.enumerated().map { i, p in [try argument(p)] + words[i] }, perCall: 5)
        } ?? call(RemoteScript.remove, items: paths.map { [try argument($0)] })
        return zip(paths, replies).map { path, reply in reply.token == "0" ? .success(()) : .failure(reply.error(path, "remove")) }
    }

    /// `mv -T` on the remote: no byte of content travels.
    public func rename(_ from: RelativePath, to: RelativePath) throws {
        try renameAll([(from, to)])[0].get()
    }

    /// Several renames in one round trip, in order; a result per pair.
    public func renameAll(_ pairs: [(from: RelativePath, to: RelativePath)]) throws -> [Result<Void, KeepSyncError>] {
        changing(pairs.flatMap { [$0.from, $0.to] })
        let kept = versionWords(pairs.map(\.to))
        let items = try pairs.enumerated().map { i, pair in [try argument(pair.from), try argument(pair.to)] + (kept?[i] ?? []) }
        let replies = try call(kept == nil ? RemoteScript.rename : RemoteScript.renameKeeping, items: items,
                               perCall: kept == nil ? 2 : 6)
        return zip(pairs, replies).map { pair, reply in reply.token == "0" ? .success(()) : .failure(reply.error(pair.from, "rename")) }
    }

    /// `chmod` and/or `touch -d @S.N` on the remote, never through a symlink.
    public func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
        try setAttributesAll([(path, mode, mtime)])[0].get()
    }

    /// Several `setAttributes` in one round trip; a result per change.
    public func setAttributesAll(_ changes: [(path: RelativePath, mode: UInt32?, mtime: Timespec?)]) -> [Result<Void, any Error>] {
        guard !changes.isEmpty else { return [] }
        do {
            state.withLock { s in
                for c in changes {
                    s.pass?.attributesChanged(c.path)
                    s.reads?.attributesChanged(c.path)
                }
            }
            let items = try changes.map { c in
                [try argument(c.path), c.mode.map(Self.octal) ?? [0x2D], c.mtime.map(Self.touchTime) ?? [0x2D]]
            }
            let replies = try call(RemoteScript.setAttributes, items: items, perCall: 3)
            return zip(changes, replies).map { c, reply in
                reply.token == "0" ? .success(()) : .failure(reply.error(c.path, "set attributes"))
            }
        } catch {
            return changes.map { c in .failure(Self.naming(error, c.path)) }
        }
    }

    /// `sync -f DIR` on the remote (`sync` where `-f` is unknown).
    /// Versions rsync put aside are moved to their names first (`moveStaged`).
    public func barrier() throws {
        try moveStaged()
        let output = try remote(RemoteScript.plain(target.directory, "sync -f . 2>/dev/null || sync"))
        guard output.status == 0 else { throw remoteError(output, path: nil, "sync") }
    }

    /// Removes a leftover temp file, keepsync's (`.keepsync-tmp-…`) or rsync's
    /// (`.NAME.XXXXXX`), unless an rsync run of this mirror is writing `NAME` now.
    public func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool {
        let name = path.name
        guard TemporaryName.matches(name) || Self.isRsyncTemporary(name) else { return false }
        if Self.isRsyncTemporary(name), let parent = path.parent {
            let original = parent.appending(Array(name[1..<(name.count - 7)]))
            if state.withLock({ $0.inFlight[original] != nil }) { return false }
        }
        changing([path])
        let reply = try call(RemoteScript.removeLeftover, items: [[try argument(path)]], perCall: 1)[0]
        switch reply.token {
        case "0": return true
        case "N", "P": return false
        default: throw reply.error(path, "remove leftover")
        }
    }

    /// rsync's temp name for `NAME`: `.NAME.` and six letters or digits.
    public static func isRsyncTemporary(_ name: [UInt8]) -> Bool {
        guard name.count >= 9, name[0] == 0x2E, name[name.count - 7] == 0x2E else { return false }
        return name.suffix(6).allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) }
    }

    /// Writes and removes a small temp file in DIR.
    public func probe() throws {
        let name = TemporaryName.random()
        changing([RelativePath(bytes: name)])
        let reply = try call(RemoteScript.probe, items: [[name]], perCall: 1)[0]
        guard reply.token == "0" else { throw reply.error(RelativePath.root, "probe") }
    }
}
