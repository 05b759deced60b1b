/// The open-addressing index from a path to its slot.
extension RecordTable {

    // Unsafe on purpose, for speed: names are hashed and compared in place in the arena,
    // 8 bytes at a time, as RelativePath does (see its measurement): a safe form would copy
    // each name out of the arena or compare byte by byte, on every lookup.

    func hash(directory: UInt32, name: UnsafeRawBufferPointer) -> Int {
        var h = Hasher()
        h.combine(directory)
        h.combine(bytes: name)
        return h.finalize()
    }

    func hash(ofSlot i: Int) -> Int {
        let s = slots[i]
        return arena.withUnsafeBytes { a in
            hash(directory: s.directory, name: UnsafeRawBufferPointer(rebasing: a[Int(s.nameOffset)..<(Int(s.nameOffset) + Int(s.nameLength))]))
        }
    }

    func find(_ path: RelativePath) -> UInt32? { locate(path)?.slot }

    /// The bucket and slot of `path`.
    func locate(_ path: RelativePath) -> (bucket: Int, slot: UInt32)? {
        guard !index.isEmpty else { return nil }
        let directory: UInt32
        if let parent = path.parent {
            guard let d = directoryIndex[parent] else { return nil }
            directory = d
        } else {
            directory = UInt32.max
        }
        let name = path.isRoot ? [] : path.name
        return name.withUnsafeBytes { n -> (Int, UInt32)? in
            let mask = index.count - 1
            var b = hash(directory: directory, name: n) & mask
            return arena.withUnsafeBytes { a -> (Int, UInt32)? in
                while true {
                    let v = index[b]
                    if v == -1 { return nil }
                    if v >= 0 {
                        let s = slots[Int(v)]
                        if s.directory == directory, Int(s.nameLength) == n.count,
                           n.count == 0 || memcmpEqual(a.baseAddress! + Int(s.nameOffset), n.baseAddress!, n.count) {
                            return (b, UInt32(v))
                        }
                    }
                    b = (b + 1) & mask
                }
            }
        }
    }

    mutating func addToIndex(_ slot: Int32) {
        if (count + deletedBuckets) * 10 >= index.count * 7 {
            // The rebuild indexes every live slot, this new one included.
            return rebuildIndex(capacity: Swift.max(16, (count * 2).nextPowerOfTwo))
        }
        let mask = index.count - 1
        var b = hash(ofSlot: Int(slot)) & mask
        while index[b] >= 0 { b = (b + 1) & mask }
        if index[b] == -2 { deletedBuckets -= 1 }
        index[b] = slot
    }

    mutating func rebuildIndex(capacity: Int) {
        index = Array(repeating: -1, count: capacity)
        deletedBuckets = 0
        let mask = capacity - 1
        for i in slots.indices where slots[i].isLive {
            var b = hash(ofSlot: i) & mask
            while index[b] != -1 { b = (b + 1) & mask }
            index[b] = Int32(i)
        }
    }
}

private func memcmpEqual(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ n: Int) -> Bool {
    var i = 0
    while i + 8 <= n {
        if a.loadUnaligned(fromByteOffset: i, as: UInt64.self) != b.loadUnaligned(fromByteOffset: i, as: UInt64.self) { return false }
        i += 8
    }
    while i < n {
        if a.load(fromByteOffset: i, as: UInt8.self) != b.load(fromByteOffset: i, as: UInt8.self) { return false }
        i += 1
    }
    return true
}
