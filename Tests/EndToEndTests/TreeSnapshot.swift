import Glibc
import KeepSyncCore

/// Everything under a root, by relative path bytes (the root itself is `[]`).
struct TreeSnapshot {
    /// What must be equal between source and mirror.
    struct Entry: Equatable {
        var kind: FileInfo.Kind
        /// `mode & 07777`; 0 for links (not compared).
        var permissions: UInt32
        /// For regular files and directories; 0 for links.
        var mtimeSeconds: Int
        var mtimeNanoseconds: Int
        /// Regular files only.
        var content: [UInt8]?
        /// Symlinks only.
        var target: [UInt8]?
    }

    var entries: [[UInt8]: Entry] = [:]
    /// Full lstat results, for identity checks (inode, ctime).
    var infos: [[UInt8]: FileInfo] = [:]

    /// Every entry below `root`; the bytes of files up to `contentLimit` (a larger one is
    /// compared by size, mode and mtime only).
    static func take(_ root: [UInt8], contentLimit: Int = .max) throws -> TreeSnapshot {
        var snapshot = TreeSnapshot()
        snapshot.contentLimit = contentLimit
        try snapshot.add(root: root, relative: [])
        return snapshot
    }

    private var contentLimit = Int.max

    private mutating func add(root: [UInt8], relative: [UInt8]) throws {
        let full = relative.isEmpty ? root : root / relative
        guard let info = FS.lstat(full) else { throw FSError(call: "lstat", path: full, code: errno) }
        infos[relative] = info
        switch info.kind {
        case .regular:
            entries[relative] = Entry(kind: .regular, permissions: info.permissions, mtimeSeconds: info.mtimeSeconds,
                                      mtimeNanoseconds: info.mtimeNanoseconds,
                                      content: info.size > contentLimit ? Array("size \(info.size)".utf8) : try FS.readFile(full), target: nil)
        case .directory:
            entries[relative] = Entry(kind: .directory, permissions: info.permissions, mtimeSeconds: info.mtimeSeconds,
                                      mtimeNanoseconds: info.mtimeNanoseconds, content: nil, target: nil)
            for name in try FS.list(full) { try add(root: root, relative: relative / name) }
        case .symlink:
            entries[relative] = Entry(kind: .symlink, permissions: 0, mtimeSeconds: 0, mtimeNanoseconds: 0,
                                      content: nil, target: try FS.readlink(full))
        case .fifo, .other:
            entries[relative] = Entry(kind: info.kind, permissions: info.permissions, mtimeSeconds: 0,
                                      mtimeNanoseconds: 0, content: nil, target: nil)
        }
    }

    /// The paths, sorted bytewise.
    var paths: [[UInt8]] { entries.keys.sorted { $0.lexicographicallyPrecedes($1) } }

    /// Paths of regular files.
    var regularFiles: [[UInt8]] { paths.filter { entries[$0]?.kind == .regular } }

    /// This snapshot without the given paths (and everything below them).
    func removing(_ removed: [[UInt8]]) -> TreeSnapshot {
        var copy = self
        for path in paths where removed.contains(where: { path == $0 || path.starts(with: $0 + [0x2F]) }) {
            copy.entries[path] = nil
            copy.infos[path] = nil
        }
        return copy
    }

    /// Human-readable differences between `self` (expected) and `actual`; empty when equal.
    func differences(to actual: TreeSnapshot) -> [String] {
        var lines: [String] = []
        let all = Set(entries.keys).union(actual.entries.keys).sorted { $0.lexicographicallyPrecedes($1) }
        for path in all {
            let name = path.isEmpty ? "." : ByteEscaping.escape(path)
            switch (entries[path], actual.entries[path]) {
            case (nil, _?): lines.append("unexpected \(name)")
            case (_?, nil): lines.append("missing \(name)")
            case (let e?, let a?) where e != a:
                var what: [String] = []
                if e.kind != a.kind { what.append("kind \(e.kind) vs \(a.kind)") }
                if e.permissions != a.permissions {
                    what.append("mode \(String(e.permissions, radix: 8)) vs \(String(a.permissions, radix: 8))")
                }
                if e.mtimeSeconds != a.mtimeSeconds || e.mtimeNanoseconds != a.mtimeNanoseconds {
                    what.append("mtime \(e.mtimeSeconds).\(e.mtimeNanoseconds) vs \(a.mtimeSeconds).\(a.mtimeNanoseconds)")
                }
                if e.content != a.content {
                    what.append("content (\(e.content?.count ?? -1) vs \(a.content?.count ?? -1) bytes)")
                }
                if e.target != a.target {
                    what.append("target \(e.target.map { ByteEscaping.escape($0) } ?? "-") vs \(a.target.map { ByteEscaping.escape($0) } ?? "-")")
                }
                lines.append("\(name): " + what.joined(separator: ", "))
            default: break
            }
        }
        return lines
    }

    /// Paths whose inode or ctime differ from `later` (or that vanished): proof of a rewrite.
    func identityChanges(to later: TreeSnapshot, only kinds: [FileInfo.Kind]? = nil) -> [String] {
        var lines: [String] = []
        for path in paths {
            guard let a = infos[path], kinds?.contains(a.kind) ?? true else { continue }
            let name = path.isEmpty ? "." : ByteEscaping.escape(path)
            guard let b = later.infos[path] else { lines.append("\(name) vanished"); continue }
            if a.inode != b.inode { lines.append("\(name): inode \(a.inode) -> \(b.inode)") }
            if a.ctimeSeconds != b.ctimeSeconds || a.ctimeNanoseconds != b.ctimeNanoseconds {
                lines.append("\(name): ctime \(a.ctimeSeconds).\(a.ctimeNanoseconds) -> \(b.ctimeSeconds).\(b.ctimeNanoseconds)")
            }
        }
        for path in later.paths where infos[path] == nil && (kinds?.contains(later.infos[path]!.kind) ?? true) {
            lines.append("\(path.isEmpty ? "." : ByteEscaping.escape(path)) appeared")
        }
        return lines
    }
}
