import Testing
import KeepSyncCore
import KeepSyncTestSupport

@Suite("RecordJournalCodec")
struct RecordJournalCodecTests {
    static func record(_ path: [UInt8], kind: FileKind = .regular, target: [UInt8]? = nil, seed: UInt64 = 1) -> FileRecord {
        FileRecord(path: RelativePath(bytes: path), kind: kind, device: 0x0803 &* seed, inode: 1000 &+ seed,
                   size: 4096 &* seed, mtime: Timespec(seconds: 1_700_000_000 + Int64(seed), nanoseconds: 123_456_789),
                   mode: 0o644, linkTarget: target, mirrorInode: 77 &+ seed)
    }

    static let longPath: [UInt8] = (0..<4096).map { i in i % 64 == 63 ? 0x2F : UInt8(0x61 + i % 26) }

    /// One named change, so that test output stays short.
    struct ChangeCase: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let change: RecordChange
        init(_ name: String, _ change: RecordChange) {
            self.testDescription = name
            self.change = change
        }
    }

    static let changeCases: [ChangeCase] = [
        ChangeCase("put of a file", .put(record(Array("a/b.txt".utf8)))),
        ChangeCase("put of a non-UTF-8 path", .put(record([0x64, 0x69, 0x72, 0x2F, 0xE9, 0x0A, 0xFF], seed: 2))),
        ChangeCase("put of a directory", .put(record(Array("dir".utf8), kind: .directory, seed: 3))),
        ChangeCase("put of a symlink", .put(record(Array("link".utf8), kind: .symlink, target: [0x2E, 0x2E, 0x2F, 0xE9, 0x0A], seed: 4))),
        ChangeCase("put of a symlink with an empty target", .put(record(Array("empty-target".utf8), kind: .symlink, target: [], seed: 5))),
        ChangeCase("put of the root", .put(record([], kind: .directory, seed: 6))),
        ChangeCase("put of a 4096-byte path", .put(record(longPath, seed: 7))),
        ChangeCase("put of extreme values", .put(FileRecord(path: RelativePath("extremes"), kind: .special, device: .max, inode: .max,
                                                          size: .max, mtime: Timespec(seconds: .min, nanoseconds: 999_999_999),
                                                          mode: .max, linkTarget: nil, mirrorInode: .max))),
        ChangeCase("put of a time before 1970", .put(FileRecord(path: RelativePath("before-1970"), kind: .regular, device: 0, inode: 0,
                                                              size: 0, mtime: Timespec(seconds: -1, nanoseconds: 0), mode: 0,
                                                              mirrorInode: 0))),
        ChangeCase("remove", .remove(RelativePath("a/b.txt"))),
        ChangeCase("remove of a non-UTF-8 path", .remove(RelativePath(bytes: [0xE9, 0x0A]))),
        ChangeCase("remove of a 4096-byte path", .remove(RelativePath(bytes: longPath))),
        ChangeCase("remove of the root", .remove(.root)),
        ChangeCase("setRoot", .setRoot(FileIdentity(device: 2049, inode: 131_073))),
        ChangeCase("setRoot of extreme values", .setRoot(FileIdentity(device: .max, inode: 0))),
        ChangeCase("setMirror of an exFAT disk", .setMirror(MirrorRoot(identity: FileIdentity(device: 1792, inode: 0),
                                                                      fileSystem: Array("/dev/sdb1 fuseblk".utf8),
                                                                      limits: MirrorLimitsTests.exfat))),
        ChangeCase("setMirror of a local disk", .setMirror(MirrorRoot(identity: FileIdentity(device: .max, inode: .max),
                                                                     fileSystem: [], limits: .none))),
    ]

    /// Three batches of mixed changes, as the log tests use them.
    static let batches: [[RecordChange]] = [
        [.setRoot(FileIdentity(device: 1, inode: 2)), .put(record(Array("one".utf8))),
         .put(record([0xE9, 0x0A], kind: .symlink, target: [0xFE], seed: 2))],
        [.remove(RelativePath("one")), .put(record(Array("two/three".utf8), seed: 3))],
        [.put(record(Array("four".utf8), kind: .directory, seed: 4)), .remove(RelativePath(bytes: [0xE9, 0x0A])),
         .put(record(Array("five".utf8), seed: 5))],
    ]

    /// A log of `batches` and the offset where each batch's frame starts (plus the end).
    static func log(generation: UInt64 = 9) -> (bytes: [UInt8], starts: [Int]) {
        var bytes = RecordJournalCodec.encodeLogHeader(generation: generation)
        var starts: [Int] = []
        for batch in batches {
            starts.append(bytes.count)
            bytes += RecordJournalCodec.encodeBatch(batch)
        }
        starts.append(bytes.count)
        return (bytes, starts)
    }

    static func sampleSet(records count: Int, pathLength: Int = 12) -> RecordSet {
        var set = RecordSet(root: FileIdentity(device: 42, inode: 2))
        for i in 0..<count {
            var path = Array("d\(i % 7)/f\(i)-".utf8) + [0xE9, 0x0A]
            while path.count < pathLength { path.append(0x78) }
            let kind: FileKind = i % 3 == 0 ? .symlink : .regular
            let r = record(path, kind: kind, target: kind == .symlink ? [0x74, UInt8(i & 0xFF)] : nil, seed: UInt64(i))
            set.table[r.path] = r
        }
        return set
    }

    /// Little-endian bytes of `value`, for hand-built frames.
    static func le<T: FixedWidthInteger & UnsignedInteger>(_ value: T) -> [UInt8] {
        (0..<MemoryLayout<T>.size).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) }
    }

    /// A frame with a correct checksum around any payload.
    static func frame(_ payload: [UInt8]) -> [UInt8] {
        le(UInt32(payload.count)) + le(CRC32C.checksum(payload)) + payload
    }

    // MARK: Checksum

    @Test func theChecksumIsCRC32CAndChainsThroughItsSeed() {
        let text = Array("123456789".utf8)
        #expect(CRC32C.checksum(text) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8]()) == 0)
        #expect(CRC32C.checksum(text[4...], seed: CRC32C.checksum(text[..<4])) == 0xE306_9283)
        let frame = RecordJournalCodec.encodeBatch(Self.batches[0])
        #expect(Array(frame[4..<8]) == Self.le(CRC32C.checksum(frame[8...])))
        #expect(Array(frame[0..<4]) == Self.le(UInt32(frame.count - 8)))
    }

    // MARK: Round trips

    @Test("Every change kind survives a round trip through a log", arguments: changeCases)
    func everyChangeKindRoundTrips(_ testCase: ChangeCase) {
        let change = testCase.change
        let bytes = RecordJournalCodec.encodeLogHeader(generation: 3) + RecordJournalCodec.encodeBatch([change])
        let decoded = RecordJournalCodec.decodeLog(bytes)
        #expect(decoded.changes == [[change]])
        #expect(decoded.validLength == bytes.count)
        #expect(!decoded.damaged)
        #expect(decoded.generation == 3)
    }

    @Test func aBatchOfAllChangeKindsAndAnEmptyBatchRoundTrip() {
        let bytes = RecordJournalCodec.encodeLogHeader(generation: .max)
            + RecordJournalCodec.encodeBatch(Self.changeCases.map(\.change)) + RecordJournalCodec.encodeBatch([])
        let decoded = RecordJournalCodec.decodeLog(bytes)
        #expect(decoded.changes == [Self.changeCases.map(\.change), []])
        #expect(decoded.generation == .max)
        #expect(!decoded.damaged)
    }

    @Test func aLogWithOnlyItsHeaderHasNoBatchesAndNoDamage() {
        let bytes = RecordJournalCodec.encodeLogHeader(generation: 0)
        let decoded = RecordJournalCodec.decodeLog(bytes)
        #expect(decoded.changes.isEmpty)
        #expect(decoded.validLength == bytes.count)
        #expect(!decoded.damaged)
        #expect(decoded.generation == 0)
    }

    @Test("Snapshots round trip", arguments: [0, 1, 5, 300])
    func snapshotsRoundTrip(records: Int) throws {
        let set = Self.sampleSet(records: records)
        let decoded = try #require(RecordJournalCodec.decodeSnapshot(RecordJournalCodec.encodeSnapshot(set, generation: 17)))
        #expect(decoded.set == set)
        #expect(decoded.generation == 17)
    }

    @Test func aLargeSnapshotOfLongPathsSpansManyFramesAndRoundTrips() throws {
        var set = Self.sampleSet(records: 200, pathLength: 4096)
        set.root = nil
        let bytes = RecordJournalCodec.encodeSnapshot(set, generation: 2)
        let decoded = try #require(RecordJournalCodec.decodeSnapshot(bytes))
        #expect(decoded.set == set)
        #expect(decoded.set.root == nil)
        // Cutting at any frame boundary loses the end frame.
        var at = 20
        var boundaries: [Int] = []
        while at < bytes.count {
            boundaries.append(at)
            at += 8 + (Int(bytes[at]) | Int(bytes[at + 1]) << 8 | Int(bytes[at + 2]) << 16 | Int(bytes[at + 3]) << 24)
        }
        #expect(boundaries.count > 3)
        for cut in boundaries {
            #expect(RecordJournalCodec.decodeSnapshot(Array(bytes[..<cut])) == nil, "cut at \(cut)")
        }
    }

    @Test func aSnapshotDoesNotStoreTheDamageFlagAndIsDeterministic() throws {
        var set = Self.sampleSet(records: 20)
        let clean = RecordJournalCodec.encodeSnapshot(set, generation: 1)
        set.wasDamaged = true
        #expect(RecordJournalCodec.encodeSnapshot(set, generation: 1) == clean)
        let decoded = try #require(RecordJournalCodec.decodeSnapshot(clean))
        #expect(!decoded.set.wasDamaged)
    }

    // MARK: Torn and corrupt logs

    @Test func aLogCutAtEveryOffsetOfItsLastBatchKeepsEveryEarlierBatch() {
        let (bytes, starts) = Self.log()
        let last = starts[starts.count - 2]
        for cut in last...bytes.count {
            let decoded = RecordJournalCodec.decodeLog(Array(bytes[..<cut]))
            if cut == bytes.count {
                #expect(decoded.changes == Self.batches)
                #expect(decoded.validLength == cut)
                #expect(!decoded.damaged)
            } else {
                #expect(decoded.changes == Array(Self.batches.dropLast()), "cut at \(cut)")
                #expect(decoded.validLength == last, "cut at \(cut)")
                #expect(decoded.damaged == (cut > last), "cut at \(cut)")
            }
            #expect(decoded.generation == 9)
        }
    }

    @Test("A flipped byte in any batch drops that batch and the later ones", arguments: [UInt8(0x01), 0x80, 0xFF])
    func aFlippedByteInAnyBatchIsDetected(mask: UInt8) {
        let (bytes, starts) = Self.log()
        for offset in starts[0]..<bytes.count {
            var damaged = bytes
            damaged[offset] ^= mask
            let batch = starts.lastIndex { $0 <= offset }!
            let decoded = RecordJournalCodec.decodeLog(damaged)
            #expect(decoded.changes == Array(Self.batches[..<batch]), "byte \(offset)")
            #expect(decoded.validLength == starts[batch], "byte \(offset)")
            #expect(decoded.damaged, "byte \(offset)")
            #expect(decoded.generation == 9)
        }
    }

    @Test func aDamagedOrTruncatedLogHeaderYieldsNothing() {
        let (bytes, starts) = Self.log()
        for offset in 0..<starts[0] {
            var damaged = bytes
            damaged[offset] ^= 0x10
            let decoded = RecordJournalCodec.decodeLog(damaged)
            #expect(decoded.generation == nil, "byte \(offset)")
            #expect(decoded.changes.isEmpty)
            #expect(decoded.validLength == 0)
            #expect(decoded.damaged)
        }
        for cut in 1..<starts[0] {
            let decoded = RecordJournalCodec.decodeLog(Array(bytes[..<cut]))
            #expect(decoded.generation == nil)
            #expect(decoded.damaged)
        }
        let empty = RecordJournalCodec.decodeLog([])
        #expect(empty.generation == nil)
        #expect(!empty.damaged)
        #expect(empty.validLength == 0)
    }

    @Test func aSnapshotIsNotALog() {
        let snapshot = RecordJournalCodec.encodeSnapshot(Self.sampleSet(records: 2), generation: 1)
        #expect(RecordJournalCodec.decodeLog(snapshot).generation == nil)
        #expect(RecordJournalCodec.decodeSnapshot(Self.log().bytes) == nil)
    }

    @Test func hostileLengthsAndCountsWithGoodChecksumsAreRejected() {
        let header = RecordJournalCodec.encodeLogHeader(generation: 1)
        let good = RecordJournalCodec.encodeBatch(Self.batches[0])
        let hostile: [[UInt8]] = [
            Self.le(UInt32.max) + Self.le(UInt32(0)) + [1, 2, 3],         // 4 GiB frame
            Self.frame(Self.le(UInt32.max)),                            // 4 billion changes, no bytes
            Self.frame(Self.le(UInt32(1)) + [2] + Self.le(UInt32.max)),   // 4 GiB path
            Self.frame(Self.le(UInt32(1)) + [9]),                       // unknown tag
            Self.frame(Self.le(UInt32(1)) + [4] + Self.le(UInt64(0))),    // snapshot end frame in a log
            Self.frame(Self.le(UInt32(0)) + [0]),                       // trailing byte
            Self.frame([1, 0]),                                         // count cut short
            Self.frame([]),                                             // no count at all
        ]
        for (i, junk) in hostile.enumerated() {
            let decoded = RecordJournalCodec.decodeLog(header + good + junk + good)
            #expect(decoded.changes == [Self.batches[0]], "case \(i)")
            #expect(decoded.validLength == header.count + good.count, "case \(i)")
            #expect(decoded.damaged, "case \(i)")
        }
    }

    // MARK: Corrupt snapshots

    @Test func aSnapshotWithAnyFlippedByteOrCutIsRejected() throws {
        let bytes = RecordJournalCodec.encodeSnapshot(Self.sampleSet(records: 6), generation: 4)
        try #require(RecordJournalCodec.decodeSnapshot(bytes) != nil)
        for offset in bytes.indices {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = bytes
                damaged[offset] ^= mask
                #expect(RecordJournalCodec.decodeSnapshot(damaged) == nil, "byte \(offset) ^ \(mask)")
            }
        }
        for cut in 0..<bytes.count {
            #expect(RecordJournalCodec.decodeSnapshot(Array(bytes[..<cut])) == nil, "cut at \(cut)")
        }
        #expect(RecordJournalCodec.decodeSnapshot(bytes + [0]) == nil)
        #expect(RecordJournalCodec.decodeSnapshot(bytes + RecordJournalCodec.encodeBatch([])) == nil)
    }

    @Test func aSnapshotWhoseEndCountOrContentDisagreesIsRejected() {
        let header = Array(RecordJournalCodec.encodeSnapshot(RecordSet(), generation: 5)[..<20])
        let put = RecordJournalCodec.encodeBatch([.put(Self.record(Array("x".utf8)))])
        let remove = RecordJournalCodec.encodeBatch([.remove(RelativePath("x"))])
        func end(_ count: UInt64) -> [UInt8] { Self.frame(Self.le(UInt32(1)) + [4] + Self.le(count)) }
        #expect(RecordJournalCodec.decodeSnapshot(header + put + end(1)) != nil)
        #expect(RecordJournalCodec.decodeSnapshot(header + put + end(2)) == nil)
        #expect(RecordJournalCodec.decodeSnapshot(header + put + end(0)) == nil)
        #expect(RecordJournalCodec.decodeSnapshot(header + put + remove + end(0)) == nil)
        #expect(RecordJournalCodec.decodeSnapshot(header + put) == nil)
        #expect(RecordJournalCodec.decodeSnapshot(header) == nil)
    }

    // MARK: Garbage

    @Test func randomGarbageNeverCrashesEitherDecoder() {
        var rng = SplitMix64(seed: 0x5EED)
        let (log, _) = Self.log()
        let snapshot = RecordJournalCodec.encodeSnapshot(Self.sampleSet(records: 3), generation: 9)
        for iteration in 0..<20_000 {
            var bytes: [UInt8]
            switch iteration % 4 {
            case 0:
                // Pure noise.
                bytes = (0..<Int.random(in: 0..<120, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            case 1:
                // A good header, then frames of noise with valid checksums: hostile payloads.
                bytes = RecordJournalCodec.encodeLogHeader(generation: 1)
                for _ in 0..<Int.random(in: 1...3, using: &rng) {
                    var payload = Self.le(UInt32.random(in: 0...3, using: &rng))
                    for _ in 0..<Int.random(in: 0..<60, using: &rng) {
                        payload.append(rng.next() % 3 == 0 ? UInt8.random(in: 0...4, using: &rng) : UInt8.random(in: 0...255, using: &rng))
                    }
                    bytes += Self.frame(payload)
                }
            case 2:
                // A real log with a few random bytes overwritten.
                bytes = log
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                }
            default:
                bytes = snapshot
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                }
                bytes.removeLast(Int.random(in: 0..<8, using: &rng))
            }
            let decoded = RecordJournalCodec.decodeLog(bytes)
            #expect(decoded.validLength >= 0 && decoded.validLength <= bytes.count)
            #expect(decoded.damaged == (decoded.validLength < bytes.count))
            if decoded.generation == nil { #expect(decoded.validLength == 0 && decoded.changes.isEmpty) }
            if let snapshot = RecordJournalCodec.decodeSnapshot(bytes) {
                // Anything accepted must be a faithful encoding of what was decoded.
                #expect(RecordJournalCodec.decodeSnapshot(RecordJournalCodec.encodeSnapshot(snapshot.set, generation: snapshot.generation))?.set == snapshot.set)
            }
        }
    }
}
