import KeepSyncCore

/// A remote tree as one `find -P . -printf` read it, held compactly: the entries' stats
/// packed in one array (grouped by directory, sorted by name within one), names and link
/// targets in one byte buffer, an index of the directories. On top, what changed since
/// through the mirror: entries whose stat and directories whose entries may differ now,
/// and directories forgotten (removed, renamed or replaced with what was below them).
/// What is stale or forgotten is `unknown`: the remote is asked.
struct RemoteTreeListing: Sendable {
    /// One entry, packed (64 bytes with padding).
    struct Entry: Sendable {
        var size: UInt64
        var inode: UInt64
        var mtimeSeconds: Int64
        var ctimeSeconds: Int64
        /// Where the name starts in `bytes`; the link target follows it.
        var nameStart: UInt32
        var mtimeNanoseconds: UInt32
        var ctimeNanoseconds: UInt32
        var links: UInt32
        var mode: UInt16
        var nameLength: UInt16
        var targetLength: UInt16
        /// An index in `devices`.
        var device: UInt16
        var kind: FileKind
    }

    /// What the listing says of a path.
    enum Answer: Equatable {
        /// Not listed, or changed since: ask the remote.
        case unknown
        /// Not there.
        case absent
        /// There, with its link target (empty unless a symlink).
        case present(FileStat, target: [UInt8])
    }

    private(set) var entries: [Entry] = []
    private var bytes: [UInt8] = []
    private var devices: [UInt64] = []
    /// Each listed directory's slice of `entries`.
    private var directories: [RelativePath: Range<Int>] = [:]
    private var root: FileStat?
    /// Paths whose own stat may have changed.
    private var staleEntries: Set<RelativePath> = []
    /// Directories whose entries may have changed.
    private var staleListings: Set<RelativePath> = []

    /// Directories listed and not forgotten.
    var directoryCount: Int { directories.count }
    /// Bytes held (entries, names and targets, the index's paths), roughly.
    var footprint: Int {
        entries.count * MemoryLayout<Entry>.stride + bytes.count
            + directories.keys.reduce(0) { $0 + $1.bytes.count + 48 }
    }

    /// Parses `find -P . -printf FORMAT` output: the root first (its name empty), each
    /// directory before its entries. Nil when a record is cut short or out of order.
    init?(findOutput output: [UInt8]) {
        var reader = ReplyReader(output)
        guard let first = reader.record(), first.name.isEmpty, first.stat.kind == .directory else { return nil }
        root = first.stat
        // In find's order, each with its directory's number; the open directories.
        var found: [Entry] = [], parentOf: [Int32] = [], paths: [RelativePath] = [.root]
        var open: [(path: [UInt8], number: Int32)] = [([], 0)]
        var deviceIndex: [UInt64: UInt16] = [:]
        while !reader.atEnd {
            guard let record = reader.record(), !record.name.isEmpty else { return nil }
            let slash = record.name.lastIndex(of: 0x2F)
            let parent = slash.map { Array(record.name[..<$0]) } ?? []
            let name = slash.map { Array(record.name[($0 + 1)...]) } ?? record.name
            while let top = open.last, top.path != parent { open.removeLast() }
            guard let directory = open.last, !name.isEmpty, name.count <= Int(UInt16.max),
                  record.target.count <= Int(UInt16.max), bytes.count + name.count + record.target.count <= Int(UInt32.max)
            else { return nil }
            let s = record.stat
            var device = deviceIndex[s.device]
            if device == nil {
                guard devices.count <= Int(UInt16.max) else { return nil }
                device = UInt16(devices.count)
                deviceIndex[s.device] = device
                devices.append(s.device)
            }
            found.append(Entry(size: s.size, inode: s.inode, mtimeSeconds: s.mtime.seconds, ctimeSeconds: s.ctime.seconds,
                               nameStart: UInt32(bytes.count), mtimeNanoseconds: UInt32(s.mtime.nanoseconds),
                               ctimeNanoseconds: UInt32(s.ctime.nanoseconds), links: s.links, mode: UInt16(s.mode & 0o7777),
                               nameLength: UInt16(name.count), targetLength: UInt16(record.target.count), device: device!,
                               kind: s.kind))
            bytes += name
            bytes += record.target
            parentOf.append(directory.number)
            if s.kind == .directory {
                open.append((record.name, Int32(paths.count)))
                paths.append(RelativePath(bytes: record.name))
            }
        }
        // Grouped by directory (counting sort), then sorted by name within each.
        var starts = [Int](repeating: 0, count: paths.count + 1)
        for p in parentOf { starts[Int(p) + 1] += 1 }
        for i in 0..<paths.count { starts[i + 1] += starts[i] }
        var next = starts, order = [Int](repeating: 0, count: found.count)
        for (i, p) in parentOf.enumerated() {
            order[next[Int(p)]] = i
            next[Int(p)] += 1
        }
        let names = bytes
        for (number, path) in paths.enumerated() {
            let range = starts[number]..<starts[number + 1]
            order[range].sort { Self.name(found[$0], names).lexicographicallyPrecedes(Self.name(found[$1], names)) }
            directories[path] = range
        }
        entries = order.map { found[$0] }
    }

    // MARK: Answers

    /// `path`'s stat and link target, its absence, or unknown.
    func answer(_ path: RelativePath) -> Answer {
        if staleEntries.contains(path) { return .unknown }
        guard let parent = path.parent else { return root.map { .present($0, target: []) } ?? .unknown }
        guard let range = directories[parent] else { return .unknown }
        guard let i = index(of: path.name, in: range) else { return .absent }
        return .present(stat(entries[i]), target: Array(target(entries[i])))
    }

    /// A directory's entries; nil when unknown (not a listed directory, or its entries
    /// changed since).
    func list(_ directory: RelativePath) -> [DirectoryEntry]? {
        guard !staleListings.contains(directory), let range = directories[directory] else { return nil }
        return entries[range].map { DirectoryEntry(name: Array(Self.name($0, bytes)), stat: stat($0)) }
    }

    // MARK: Changes

    /// `path` was created, replaced, renamed or removed: its stat, its directory's
    /// entries, and everything below it are unknown from now on. The directory's own stat
    /// stays as listed: only its mtime moved, which the pass sets at the directory's finish
    /// whatever it reads (a round trip per directory, for every one a file went into).
    mutating func changed(_ path: RelativePath) {
        staleEntries.insert(path)
        if let parent = path.parent { staleListings.insert(parent) }
        var below = [path]
        while let d = below.popLast() {
            guard let range = directories.removeValue(forKey: d) else { continue }
            for e in entries[range] where e.kind == .directory { below.append(d.appending(Array(Self.name(e, bytes)))) }
        }
    }

    /// Only `path`'s own mode or mtime changed: its stat, and its directory's entries
    /// (which carry that stat), are unknown from now on.
    mutating func attributesChanged(_ path: RelativePath) {
        staleEntries.insert(path)
        if let parent = path.parent { staleListings.insert(parent) }
    }

    // MARK: Helpers

    private static func name(_ e: Entry, _ bytes: [UInt8]) -> ArraySlice<UInt8> {
        bytes[Int(e.nameStart)..<(Int(e.nameStart) + Int(e.nameLength))]
    }

    private func target(_ e: Entry) -> ArraySlice<UInt8> {
        let start = Int(e.nameStart) + Int(e.nameLength)
        return bytes[start..<(start + Int(e.targetLength))]
    }

    /// Binary search of a sorted directory slice.
    private func index(of name: [UInt8], in range: Range<Int>) -> Int? {
        var low = range.lowerBound, high = range.upperBound
        while low < high {
            let mid = (low + high) / 2
            let candidate = Self.name(entries[mid], bytes)
            if candidate.elementsEqual(name) { return mid }
            if candidate.lexicographicallyPrecedes(name) { low = mid + 1 } else { high = mid }
        }
        return nil
    }

    private func stat(_ e: Entry) -> FileStat {
        var s = FileStat(kind: e.kind, mode: UInt32(e.mode), size: e.size,
                         mtime: Timespec(seconds: e.mtimeSeconds, nanoseconds: Int64(e.mtimeNanoseconds)),
                         ctime: Timespec(seconds: e.ctimeSeconds, nanoseconds: Int64(e.ctimeNanoseconds)),
                         device: devices[Int(e.device)], inode: e.inode)
        s.links = e.links
        return s
    }
}
