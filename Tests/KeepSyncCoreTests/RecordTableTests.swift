import Testing
@testable import KeepSyncCore

@Suite("RecordTable")
struct RecordTableTests {
    static func record(_ path: String, kind: FileKind = .regular, size: UInt64 = 10, inode: UInt64 = 1,
                       link: [UInt8]? = nil, birth: Timespec? = Timespec(seconds: 1_700_000_000, nanoseconds: 999_999_999)) -> FileRecord {
        FileRecord(path: RelativePath(path), kind: kind, device: 66_306, inode: inode, size: size,
                   mtime: Timespec(seconds: -12_345, nanoseconds: 123_456_789), mode: 0o4755, linkTarget: link,
                   mirrorInode: inode + 1000, birthTime: birth)
    }

    @Test("a record read back equals the one stored, every field (link target, birth time, negative mtime) included")
    func roundTrip() {
        var t = RecordTable()
        let records = [Self.record(""), Self.record("a", kind: .directory), Self.record("a/l", kind: .symlink, link: [0x2E, 0xFF, 0]),
                       Self.record("a/f", birth: nil), Self.record("a/" + String(repeating: "n", count: 255))]
        for r in records { t[r.path] = r }
        #expect(t.count == records.count)
        for r in records { #expect(t[r.path] == r, "\(r.path.escaped)") }
        #expect(t[RelativePath("missing")] == nil)
        #expect(t[RelativePath("a/missing/deeper")] == nil)
    }

    @Test("the index holds one bucket per live record, across the growths that rebuild it")
    func oneBucketPerRecord() {
        var t = RecordTable()
        for i in 0..<3_000 {
            let r = Self.record("d\(i % 11)/f\(i)", inode: UInt64(i))
            t[r.path] = r
            #expect(t.occupiedBuckets == t.count, "after \(i + 1) inserts")
            if t.occupiedBuckets != t.count { return }
        }
        for i in stride(from: 0, to: 3_000, by: 2) { t[RelativePath("d\(i % 11)/f\(i)")] = nil }
        #expect(t.occupiedBuckets == t.count)
    }

    @Test("a directory whose last record goes is dropped from the interned directories, and its number reused")
    func directoriesAreDropped() {
        var t = RecordTable()
        for round in 0..<3 {
            for d in 0..<100 {
                for f in 0..<10 { t[RelativePath("r\(round)/d\(d)/f\(f)")] = Self.record("r\(round)/d\(d)/f\(f)", inode: UInt64(f)) }
            }
            // The 100 directories, and above them r<round> and the root.
            #expect(t.internedDirectories == 102)
            #expect(t.paths(within: RelativePath("r\(round)/d7")).count == 10)
            for d in 0..<100 {
                for f in 0..<10 { t[RelativePath("r\(round)/d\(d)/f\(f)")] = nil }
            }
            #expect(t.internedDirectories == 0, "round \(round)")
            #expect(t.isEmpty && t.paths(within: RelativePath("r\(round)")).isEmpty)
        }
        t[RelativePath("x/y")] = Self.record("x/y")
        #expect(t[RelativePath("x/y")] == Self.record("x/y"))
        var visited: [RelativePath] = []
        t.forEachInOrder { path, _ in visited.append(path) }
        #expect(visited == [RelativePath("x/y")])
    }

    @Test("replacing and removing keep the count, the regular-file totals and the lookups right, over many records")
    func replaceAndRemove() {
        var t = RecordTable()
        var expected: [RelativePath: FileRecord] = [:]
        for i in 0..<5_000 {
            let r = Self.record("d\(i % 37)/f\(i)", size: UInt64(i), inode: UInt64(i))
            t[r.path] = r
            expected[r.path] = r
        }
        for i in stride(from: 0, to: 5_000, by: 3) {
            let p = RelativePath("d\(i % 37)/f\(i)")
            #expect(t.removeValue(forKey: p) == expected.removeValue(forKey: p))
        }
        for i in stride(from: 1, to: 5_000, by: 7) {
            let r = Self.record("d\(i % 37)/f\(i)", kind: .symlink, size: 3, inode: UInt64(i), link: Array("target-\(i)".utf8))
            t[r.path] = r
            expected[r.path] = r
        }
        #expect(t.count == expected.count)
        #expect(t.dictionary == expected)
        #expect(t == RecordTable(expected))
        let regular = expected.values.filter { $0.kind == .regular }
        #expect(t.regularFiles == regular.count)
        #expect(t.regularBytes == regular.reduce(0) { $0 + $1.size })
    }

    @Test("paths within a directory are exactly the records at or below it")
    func pathsWithin() {
        var t = RecordTable()
        for p in ["a", "a/b", "a/b/c", "a/bc", "ab", "ab/x", "z/a/b"] { t[RelativePath(p)] = Self.record(p) }
        #expect(Set(t.paths(within: RelativePath("a/b"))) == [RelativePath("a/b"), RelativePath("a/b/c")])
        #expect(Set(t.paths(within: RelativePath("a"))) == Set(["a", "a/b", "a/b/c", "a/bc"].map(RelativePath.init)))
        #expect(t.paths(within: RelativePath("nothing")).isEmpty)
        #expect(t.paths(within: .root).count == 7)
        // No record for z or z/a: what lies below them is still found.
        #expect(t.paths(within: RelativePath("z")) == [RelativePath("z/a/b")])
        #expect(t.paths(within: RelativePath("z/a")) == [RelativePath("z/a/b")])
        #expect(t.paths(within: RelativePath("z/a/b")) == [RelativePath("z/a/b")])
        #expect(t.paths(within: RelativePath("a/b/c")) == [RelativePath("a/b/c")])
        t[RelativePath("z/a/b")] = nil
        // Left: the root, a, a/b and ab.
        #expect(t.paths(within: RelativePath("z")).isEmpty && t.internedDirectories == 4)
    }

    @Test("slots are stable for a scan and reused after a removal")
    func slots() {
        var t = RecordTable()
        t[RelativePath("x")] = Self.record("x")
        t[RelativePath("y")] = Self.record("y")
        let y = t.slotIndex(of: RelativePath("y"))
        #expect(y != nil && t.entry(atSlot: y!)?.key == RelativePath("y"))
        t[RelativePath("x")] = nil
        t[RelativePath("z")] = Self.record("z")
        #expect(t.slotCapacity == 2, "the freed slot is reused")
        #expect(t.slotIndex(of: RelativePath("y")) == y)
    }
}
