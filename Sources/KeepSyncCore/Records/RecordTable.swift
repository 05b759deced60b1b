/// The bookmark records by path, kept compact: 64 bytes of fixed fields per record, the
/// last path component (and a link's target) in one byte arena, directories interned,
/// devices in a small table, and an open-addressing index of 32-bit slots. About 80 bytes
/// a record instead of ~250 for a dictionary of `FileRecord`s. Reads like a dictionary.
public struct RecordTable: Sequence, Equatable, Sendable, ExpressibleByDictionaryLiteral {
    struct Slot {
        var inode: UInt64 = 0
        var size: UInt64 = 0
        var mtimeSeconds: Int64 = 0
        /// Birth time packed as seconds << 30 | nanoseconds; `hasBirth` says whether set.
        var birth: Int64 = 0
        var mirrorInode: UInt64 = 0
        /// Index of the parent directory's path in `directories`; `UInt32.max` for the root.
        var directory: UInt32 = 0
        var nameOffset: UInt32 = 0
        var mtimeNanoseconds: UInt32 = 0
        var mode: UInt16 = 0
        var linkLength: UInt16 = 0
        var device: UInt16 = 0
        var nameLength: UInt16 = 0
        /// Kind (3 bits), live, has link, has birth.
        var bits: UInt8 = 0

        static let live: UInt8 = 1 << 3, hasLink: UInt8 = 1 << 4, hasBirth: UInt8 = 1 << 5
        var isLive: Bool { bits & Slot.live != 0 }
    }

    /// In pages: a table that grows never moves them.
    private(set) var slots = Slots()
    var free: [UInt32] = []
    var arena: [UInt8] = []
    var garbage = 0
    /// Open addressing, linear probing: slot index, -1 empty, -2 deleted.
    var index: [Int32] = []
    var deletedBuckets = 0
    var directories: [RelativePath] = []
    var directoryIndex: [RelativePath: UInt32] = [:]
    /// Live records and interned child directories per interned directory; one that
    /// reaches 0 is dropped and its number reused, so the table does not grow with every
    /// directory ever seen.
    var directoryRecords: [UInt32] = []
    var freeDirectories: [UInt32] = []
    var devices: [UInt64] = []
    /// Live records.
    public private(set) var count = 0
    /// Regular files among them, and their total size.
    public private(set) var regularFiles = 0
    /// Total size of the regular files.
    public private(set) var regularBytes: UInt64 = 0

    /// An empty table.
    public init() {}

    /// A table holding `dictionary`'s records (the keys must be their paths).
    public init(_ dictionary: [RelativePath: FileRecord]) {
        for (path, record) in dictionary { self[path] = record }
    }

    /// A table from `[path: record]` literals.
    public init(dictionaryLiteral elements: (RelativePath, FileRecord)...) {
        for (path, record) in elements { self[path] = record }
    }

    /// Makes room for `n` records (a snapshot says how many it holds).
    public mutating func reserveCapacity(_ n: Int) {
        guard n > slots.count else { return }
        slots.reserveCapacity(n)
        if index.count * 7 < n * 10 { rebuildIndex(capacity: Swift.max(16, (n * 10 / 7 + 1).nextPowerOfTwo)) }
    }

    /// True when no record is held.
    public var isEmpty: Bool { count == 0 }

    // MARK: Lookup

    /// The record at `path`, nil when none; setting nil removes it.
    public subscript(path: RelativePath) -> FileRecord? {
        get { find(path).map { record(at: Int($0), path: path) } }
        set {
            if let newValue { insert(newValue, at: path) } else { _ = removeValue(forKey: path) }
        }
    }

    /// Removes and returns the record at `path`.
    @discardableResult
    public mutating func removeValue(forKey path: RelativePath) -> FileRecord? {
        guard let (bucket, slot) = locate(path) else { return nil }
        let old = record(at: Int(slot), path: path)
        index[bucket] = -2
        deletedBuckets += 1
        release(Int(slot))
        return old
    }

    /// The slot holding `path`, for scans that mark what they visited (stable until the
    /// table changes).
    public func slotIndex(of path: RelativePath) -> Int? { find(path).map(Int.init) }

    /// One past the highest slot index.
    public var slotCapacity: Int { slots.count }

    /// The live record in slot `i`, with its path; nil for a free slot.
    public func entry(atSlot i: Int) -> (key: RelativePath, value: FileRecord)? {
        guard i < slots.count, slots[i].isLive else { return nil }
        let path = self.path(ofSlot: i)
        return (path, record(at: i, path: path))
    }

    /// The path of live slot `i`.
    public func path(ofSlot i: Int) -> RelativePath {
        let s = slots[i]
        let name = Array(arena[Int(s.nameOffset)..<(Int(s.nameOffset) + Int(s.nameLength))])
        if s.directory == UInt32.max { return RelativePath(bytes: name) }
        return directories[Int(s.directory)].appending(name)
    }

    /// The record in live slot `i` (whose path is `path`).
    public func value(atSlot i: Int, path: RelativePath) -> FileRecord? {
        guard i < slots.count, slots[i].isLive else { return nil }
        return record(at: i, path: path)
    }

    /// The paths at or below `scope` that have records, without walking paths elsewhere:
    /// directories are matched once, then slots by their directory.
    public func paths(within scope: RelativePath) -> [RelativePath] {
        if scope.isRoot { return keys }
        return slots(within: scope).map { path(ofSlot: $0) }
    }

    /// The slots of the records at or below `scope` (any order). A scope that is no
    /// interned directory (a file's, most live changes) costs one lookup: any record below
    /// it would have interned it. A directory's costs a pass over the interned directories
    /// and the records.
    public func slots(within scope: RelativePath) -> [Int] {
        var out: [Int] = []
        if let own = slotIndex(of: scope) { out.append(own) }
        guard directoryIndex[scope] != nil else { return out }
        var inside = BitSet()
        for (i, d) in directories.enumerated() where directoryRecords[i] > 0 && d.isWithin(scope) { inside.insert(i) }
        guard inside.count > 0 else { return out }
        for i in slots.indices where slots[i].isLive && slots[i].directory != UInt32.max && inside.contains(Int(slots[i].directory)) {
            out.append(i)
        }
        return out
    }

    /// The live slots holding records of `kind`, with their inode (no path is built).
    public func slots(ofKind kind: FileKind) -> [(index: Int, inode: UInt64)] {
        var out: [(index: Int, inode: UInt64)] = []
        for i in slots.indices where slots[i].isLive && slots[i].bits & 7 == kind.rawValue { out.append((i, slots[i].inode)) }
        return out
    }

    /// Calls `body` with the inode of each live record of `kind` (no path is built).
    public func forEachInode(ofKind kind: FileKind, _ body: (UInt64) -> Void) {
        for s in slots where s.isLive && s.bits & 7 == kind.rawValue { body(s.inode) }
    }

    /// Every record in a fixed order (by directory path, then name bytes) without holding
    /// them all at once.
    public func forEachInOrder(_ body: (RelativePath, FileRecord) throws -> Void) rethrows {
        // Slots bucketed by directory (the root's own record first), then each bucket by name.
        let groups = directories.count + 1
        var starts = [Int](repeating: 0, count: groups + 1)
        func group(_ s: Slot) -> Int { s.directory == UInt32.max ? 0 : Int(s.directory) + 1 }
        for s in slots where s.isLive { starts[group(s) + 1] += 1 }
        for g in 0..<groups { starts[g + 1] += starts[g] }
        var fill = starts
        var ordered = [Int32](repeating: 0, count: count)
        for (i, s) in slots.enumerated() where s.isLive {
            ordered[fill[group(s)]] = Int32(i)
            fill[group(s)] += 1
        }
        let directoryOrder = [0] + directories.indices.sorted { directories[$0] < directories[$1] }.map { $0 + 1 }
        for g in directoryOrder {
            var members = Array(ordered[starts[g]..<starts[g + 1]])
            // Unsafe for speed: names compared in place in the arena, no copy per compare.
            arena.withUnsafeBytes { a in
                members.sort { x, y in
                    let sx = slots[Int(x)], sy = slots[Int(y)]
                    let nx = UnsafeRawBufferPointer(rebasing: a[Int(sx.nameOffset)..<(Int(sx.nameOffset) + Int(sx.nameLength))])
                    let ny = UnsafeRawBufferPointer(rebasing: a[Int(sy.nameOffset)..<(Int(sy.nameOffset) + Int(sy.nameLength))])
                    return nx.lexicographicallyPrecedes(ny)
                }
            }
            for i in members {
                let path = self.path(ofSlot: Int(i))
                try body(path, record(at: Int(i), path: path))
            }
        }
    }

    /// The records as a dictionary (for tests and small sets).
    public var dictionary: [RelativePath: FileRecord] {
        var out: [RelativePath: FileRecord] = [:]
        out.reserveCapacity(count)
        for (k, v) in self { out[k] = v }
        return out
    }

    /// Every path, in slot order.
    public var keys: [RelativePath] { map(\.key) }
    /// Every record, in slot order.
    public var values: [FileRecord] { map(\.value) }

    /// Iterates (path, record) in slot order.
    public struct Iterator: IteratorProtocol {
        let table: RecordTable
        var i = 0
        /// The next live entry.
        public mutating func next() -> (key: RelativePath, value: FileRecord)? {
            while i < table.slots.count {
                defer { i += 1 }
                if let e = table.entry(atSlot: i) { return e }
            }
            return nil
        }
    }

    /// An iterator over the live entries.
    public func makeIterator() -> Iterator { Iterator(table: self) }

    /// Same paths with equal records.
    public static func == (a: RecordTable, b: RecordTable) -> Bool {
        guard a.count == b.count else { return false }
        for (path, record) in a where b[path] != record { return false }
        return true
    }

    // MARK: Storage

    func record(at i: Int, path: RelativePath) -> FileRecord {
        let s = slots[i]
        let linkStart = Int(s.nameOffset) + Int(s.nameLength)
        let link: [UInt8]? = s.bits & Slot.hasLink != 0 ? Array(arena[linkStart..<(linkStart + Int(s.linkLength))]) : nil
        let birth: Timespec? = s.bits & Slot.hasBirth != 0
            ? Timespec(seconds: s.birth >> 30, nanoseconds: s.birth & ((1 << 30) - 1)) : nil
        return FileRecord(path: path, kind: FileKind(rawValue: s.bits & 7) ?? .regular, device: devices[Int(s.device)],
                          inode: s.inode, size: s.size,
                          mtime: Timespec(seconds: s.mtimeSeconds, nanoseconds: Int64(s.mtimeNanoseconds)),
                          mode: UInt32(s.mode), linkTarget: link, mirrorInode: s.mirrorInode, birthTime: birth)
    }

    mutating func insert(_ r: FileRecord, at path: RelativePath) {
        let name = path.isRoot ? [] : path.name
        let link = r.linkTarget ?? []
        precondition(name.count <= Int(UInt16.max) && link.count <= Int(UInt16.max), "name or link target too long for a record")
        var s = Slot()
        let existing = locate(path)
        if let parent = path.parent { s.directory = intern(parent, adding: existing == nil) } else { s.directory = UInt32.max }
        s.nameOffset = UInt32(arena.count)
        s.nameLength = UInt16(name.count)
        s.linkLength = UInt16(link.count)
        arena += name
        arena += link
        s.inode = r.inode
        s.size = r.size
        s.mtimeSeconds = r.mtime.seconds
        s.mtimeNanoseconds = UInt32(truncatingIfNeeded: r.mtime.nanoseconds)
        s.mode = UInt16(truncatingIfNeeded: r.mode)
        s.mirrorInode = r.mirrorInode
        s.device = deviceIndex(r.device)
        s.bits = r.kind.rawValue & 7 | Slot.live | (r.linkTarget != nil ? Slot.hasLink : 0)
        if let b = r.birthTime, b.nanoseconds >= 0, b.nanoseconds < 1 << 30, abs(b.seconds) < 1 << 32 {
            s.birth = b.seconds << 30 | b.nanoseconds
            s.bits |= Slot.hasBirth
        }
        if let (_, existing) = existing {
            unaccount(Int(existing))
            let old = slots[Int(existing)]
            garbage += Int(old.nameLength) + Int(old.linkLength)
            slots[Int(existing)] = s
            account(Int(existing))
        } else {
            let i: Int
            if let f = free.popLast() {
                i = Int(f)
                slots[i] = s
            } else {
                i = slots.count
                slots.append(s)
            }
            count += 1
            account(i)
            addToIndex(Int32(i))
        }
        if garbage > 4096 && garbage > arena.count / 2 { compactArena() }
    }

    mutating func account(_ i: Int) {
        if slots[i].bits & 7 == FileKind.regular.rawValue {
            regularFiles += 1
            regularBytes &+= slots[i].size
        }
    }

    mutating func unaccount(_ i: Int) {
        if slots[i].bits & 7 == FileKind.regular.rawValue {
            regularFiles -= 1
            regularBytes &-= slots[i].size
        }
    }

    mutating func release(_ i: Int) {
        unaccount(i)
        let d = slots[i].directory
        if d != UInt32.max { releaseDirectory(d) }
        garbage += Int(slots[i].nameLength) + Int(slots[i].linkLength)
        slots[i] = Slot()
        free.append(UInt32(i))
        count -= 1
        if garbage > 4096 && garbage > arena.count / 2 { compactArena() }
    }

    mutating func compactArena() {
        var fresh: [UInt8] = []
        fresh.reserveCapacity(arena.count - garbage)
        for i in slots.indices where slots[i].isLive {
            let start = Int(slots[i].nameOffset), length = Int(slots[i].nameLength) + Int(slots[i].linkLength)
            slots[i].nameOffset = UInt32(fresh.count)
            fresh += arena[start..<(start + length)]
        }
        arena = fresh
        garbage = 0
    }

    /// The number of `directory`, interned if new; `adding` counts one more record in it.
    /// A new directory counts as one in its parent, interned in turn: every interned
    /// directory's ancestors are interned, so nothing lies below a path that is not.
    mutating func intern(_ directory: RelativePath, adding: Bool) -> UInt32 {
        let i: UInt32
        if let known = directoryIndex[directory] {
            i = known
        } else {
            if let parent = directory.parent { _ = intern(parent, adding: true) }
            if let reused = freeDirectories.popLast() {
                i = reused
                directories[Int(i)] = directory
            } else {
                i = UInt32(directories.count)
                directories.append(directory)
                directoryRecords.append(0)
            }
            directoryIndex[directory] = i
        }
        if adding { directoryRecords[Int(i)] += 1 }
        return i
    }

    /// One record or child directory fewer in directory `d`; with none left it is dropped
    /// (and counts no more in its parent).
    mutating func releaseDirectory(_ d: UInt32) {
        directoryRecords[Int(d)] -= 1
        guard directoryRecords[Int(d)] == 0 else { return }
        let path = directories[Int(d)]
        directoryIndex[path] = nil
        directories[Int(d)] = .root
        freeDirectories.append(d)
        if let parent = path.parent, let p = directoryIndex[parent] { releaseDirectory(p) }
    }

    /// Directories interned now (each holds a record, or an interned directory).
    var internedDirectories: Int { directoryIndex.count }

    /// Index buckets in use: one per live record when the index is sound.
    var occupiedBuckets: Int { index.reduce(0) { $1 >= 0 ? $0 + 1 : $0 } }

    mutating func deviceIndex(_ device: UInt64) -> UInt16 {
        if let i = devices.firstIndex(of: device) { return UInt16(i) }
        precondition(devices.count < Int(UInt16.max), "too many devices")
        devices.append(device)
        return UInt16(devices.count - 1)
    }
}


extension Int {
    /// The smallest power of two not below this (1 for 0).
    var nextPowerOfTwo: Int { self <= 1 ? 1 : 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount) }
}
