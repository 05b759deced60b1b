import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

@Suite("JournalBookmarkStore", .offThePool)
struct JournalBookmarkStoreTests {
    /// A fresh directory made by `mkdtemp` under /tmp; `remove()` deletes it and its files.
    struct TemporaryDirectory {
        let path: [UInt8]

        init() throws {
            path = try ScratchDirectory.make(prefix: "keepsync-store")
        }

        func file(_ name: String) -> [UInt8] { path + [0x2F] + Array(name.utf8) }

        /// The file's bytes; nil when it does not exist.
        func read(_ name: String) -> [UInt8]? {
            let fd = withCString(file(name)) { Glibc.open($0, O_RDONLY) }
            if fd < 0 { return nil }
            defer { close(fd) }
            var out: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { return out }
                out += chunk[..<n]
            }
        }

        /// Replaces the file with `bytes`.
        func write(_ name: String, _ bytes: [UInt8]) throws {
            let fd = withCString(file(name)) { Glibc.open($0, O_WRONLY | O_CREAT | O_TRUNC, 0o600) }
            try #require(fd >= 0)
            defer { close(fd) }
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            try #require(n == bytes.count)
        }

        /// Removes a file if it exists.
        func delete(_ name: String) { _ = withCString(file(name)) { unlink($0) } }

        /// Names in the directory.
        func names() -> [String] {
            guard let dir = withCString(path, { opendir($0) }) else { return [] }
            defer { closedir(dir) }
            var names: [String] = []
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name != "." && name != ".." { names.append(name) }
            }
            return names.sorted()
        }

        /// Deletes the directory and the files in it.
        func remove() { try? ScratchDirectory.removeTree(path) }

        private func withCString<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
            (bytes + [0]).withUnsafeBufferPointer { buf in
                buf.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
            }
        }
    }

    /// The two places a crashed compaction can stop, and the states around them.
    enum CrashPoint: String, CaseIterable, Sendable {
        case whileWritingTheSnapshot, afterRenamingTheSnapshot, whileWritingTheLog, afterRenamingTheLog
        case afterRenamingTheFirstSnapshot
    }

    static func record(_ path: [UInt8], kind: FileKind = .regular, seed: UInt64) -> FileRecord {
        FileRecord(path: RelativePath(bytes: path), kind: kind, device: 2049, inode: 500 + seed, size: seed * 10,
                   mtime: Timespec(seconds: 1_750_000_000 + Int64(seed), nanoseconds: Int64(seed) * 1000),
                   mode: 0o640, linkTarget: kind == .symlink ? [0xE9, 0x2F, 0x0A] : nil, mirrorInode: 9000 + seed)
    }

    static let longPath: [UInt8] = (0..<4096).map { i in i % 100 == 99 ? 0x2F : UInt8(0x41 + i % 26) }

    static let batches: [[RecordChange]] = [
        [.setRoot(FileIdentity(device: 2049, inode: 2)), .put(record(Array("a".utf8), kind: .directory, seed: 1)),
         .put(record([0x61, 0x2F, 0xE9, 0x0A], seed: 2)), .put(record(longPath, seed: 3))],
        [.remove(RelativePath("a/gone")), .put(record(Array("link".utf8), kind: .symlink, seed: 4))],
        [.remove(RelativePath(bytes: [0x61, 0x2F, 0xE9, 0x0A])), .put(record(Array("b".utf8), seed: 5))],
    ]

    static let extraBatch: [RecordChange] = [.put(record(Array("extra".utf8), seed: 99)), .remove(RelativePath("b"))]

    /// The set after applying `batches` to `start`.
    static func applying(_ batches: [[RecordChange]], to start: RecordSet = RecordSet()) -> RecordSet {
        var set = start
        for batch in batches { for change in batch { set.apply(change) } }
        set.wasDamaged = false
        return set
    }

    static func store(_ dir: TemporaryDirectory, readOnly: Bool = false) throws -> JournalBookmarkStore {
        try JournalBookmarkStore(directory: dir.path, readOnly: readOnly)
    }

    // MARK: Round trips

    @Test func aFreshDirectoryLoadsAsAnEmptyUndamagedSet() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        #expect(try Self.store(dir).load() == RecordSet())
        #expect(dir.names().isEmpty)
    }

    @Test func appliedBatchesSurviveReopening() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.store(dir)
            _ = try store.load()
            for batch in Self.batches { try store.apply(batch) }
        }
        let loaded = try Self.store(dir).load()
        #expect(loaded == Self.applying(Self.batches))
        #expect(loaded.table[RelativePath(bytes: Self.longPath)] == Self.record(Self.longPath, seed: 3))
        #expect(loaded.root == FileIdentity(device: 2049, inode: 2))
        #expect(dir.names() == ["records.log"])
    }

    @Test func anEmptyBatchWritesNothing() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.store(dir).apply([])
        #expect(dir.names().isEmpty)
    }

    @Test func concurrentAppliesAllLand() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Self.store(dir)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for i in 0..<10 { try store.apply([.put(Self.record(Array("t\(task)-\(i)".utf8), seed: UInt64(i)))]) }
                }
            }
            try await group.waitForAll()
        }
        #expect(try Self.store(dir).load().table.count == 80)
    }

    // MARK: Torn tails

    @Test("A torn tail is dropped and cut off so that later appends load", arguments: [1, 4, 8, 9, 40, -1])
    func aTornTailIsDroppedAndCut(kept: Int) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.store(dir)
            for batch in Self.batches.dropLast() { try store.apply(batch) }
        }
        let intact = try #require(dir.read("records.log"))
        let frame = RecordJournalCodec.encodeBatch(Self.batches[2])
        try dir.write("records.log", intact + frame.prefix(kept < 0 ? frame.count - 1 : kept))

        let store = try Self.store(dir)
        let loaded = try store.load()
        #expect(loaded.wasDamaged)
        #expect(loaded.table == Self.applying(Self.batches.dropLast()).table)
        #expect(dir.read("records.log") == intact)

        try store.apply(Self.extraBatch)
        let reloaded = try Self.store(dir).load()
        #expect(reloaded == Self.applying(Array(Self.batches.dropLast()) + [Self.extraBatch]))
    }

    @Test func anApplyWithoutALoadFirstCutsATornTail() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.store(dir).apply(Self.batches[0])
        let intact = try #require(dir.read("records.log"))
        try dir.write("records.log", intact + [0xFF, 0xFF, 0xFF, 0x7F, 1, 2, 3])
        try Self.store(dir).apply(Self.batches[1])
        #expect(try Self.store(dir).load() == Self.applying(Array(Self.batches[0...1])))
    }

    // MARK: Compaction

    @Test("snapshotLength is the snapshot file's size after a compaction and after a load, 0 without one")
    func snapshotLengthIsTheFileSize() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Self.store(dir)
        _ = try store.load()
        #expect(store.snapshotLength == 0)
        try store.apply(Self.batches[0])
        try store.compact(Self.applying([Self.batches[0]]))
        let size = UInt64(try #require(dir.read("records.snapshot")).count)
        #expect(size > 0)
        #expect(store.snapshotLength == size)
        try store.apply(Self.batches[1])
        #expect(store.snapshotLength == size, "an append does not change the snapshot")
        let reopened = try Self.store(dir)
        _ = try reopened.load()
        #expect(reopened.snapshotLength == size)
    }

    @Test("a log longer than both the allowance and the snapshot needs a compaction, which ends the need")
    func needsCompactionFollowsTheLengths() throws {
        // Appends batches until the store asks; checks it asks exactly when the log passes `bar`.
        func appendUntilAsked(_ store: JournalBookmarkStore, _ set: inout RecordSet, bar: UInt64) throws {
            var n = 0
            while !store.needsCompaction {
                #expect(store.logLength <= bar)
                let batch = Self.batches[n % Self.batches.count]
                try store.apply(batch)
                for c in batch { set.apply(c) }
                n += 1
            }
            #expect(store.logLength > bar)
        }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The allowance is the bar while the snapshot is smaller.
        let allowance = UInt64(3 * RecordJournalCodec.encodeBatch(Self.batches[0]).count)
        var set = RecordSet()
        let store = try JournalBookmarkStore(directory: dir.path, logAllowance: allowance)
        _ = try store.load()
        try appendUntilAsked(store, &set, bar: allowance)
        try store.compact(set)
        #expect(!store.needsCompaction)

        // Past the allowance, the snapshot's size is the bar.
        let tight = try JournalBookmarkStore(directory: dir.path, logAllowance: 1)
        #expect(try tight.load() == set)
        #expect(tight.snapshotLength > 1)
        try appendUntilAsked(tight, &set, bar: tight.snapshotLength)
        try tight.compact(set)
        #expect(!tight.needsCompaction)
        #expect(try Self.store(dir).load() == set)
    }

    @Test func compactionThenMoreAppendsReload() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Self.store(dir)
        _ = try store.load()
        try store.apply(Self.batches[0])
        try store.apply(Self.batches[1])
        let compacted = Self.applying(Array(Self.batches[0...1]))
        try store.compact(compacted)
        #expect(dir.read("records.log") == RecordJournalCodec.encodeLogHeader(generation: 1))
        #expect(store.logLength == 20)
        try store.apply(Self.batches[2])
        #expect(store.logLength == UInt64(20 + RecordJournalCodec.encodeBatch(Self.batches[2]).count))
        try store.compact(Self.applying([Self.batches[2]], to: compacted))
        try store.apply(Self.extraBatch)

        let loaded = try Self.store(dir).load()
        #expect(loaded == Self.applying(Self.batches + [Self.extraBatch]))
        #expect(dir.names() == ["records.log", "records.snapshot"])
        #expect(dir.read("records.log") == RecordJournalCodec.encodeLogHeader(generation: 2)
            + RecordJournalCodec.encodeBatch(Self.extraBatch))
        let snapshotBytes = try #require(dir.read("records.snapshot"))
        let snapshot = try #require(RecordJournalCodec.decodeSnapshot(snapshotBytes))
        #expect(snapshot.generation == 2)
    }

    @Test func compactionOfADamagedSetStoresItCleanly() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var set = Self.applying(Self.batches)
        set.wasDamaged = true
        try Self.store(dir).compact(set)
        set.wasDamaged = false
        #expect(try Self.store(dir).load() == set)
    }

    @Test("A crash anywhere in a compaction loads the same set", arguments: CrashPoint.allCases)
    func aCrashDuringCompactionLoadsTheSameSet(at point: CrashPoint) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let base = Self.applying([Self.batches[0]])
        let oldView = Self.applying(Array(Self.batches[1...]), to: base)
        // What the compaction stores differs from base + log (a resync changed it), so
        // replaying the old log over the new snapshot would show.
        let newView = Self.applying([[.remove(RelativePath("link")), .put(Self.record(Array("fresh".utf8), seed: 7))]],
                                    to: oldView)
        let expected = point == .whileWritingTheSnapshot ? oldView : newView
        let oldGeneration: UInt64 = point == .afterRenamingTheFirstSnapshot ? 0 : 6
        let oldLog = RecordJournalCodec.encodeLogHeader(generation: oldGeneration)
            + RecordJournalCodec.encodeBatch(Self.batches[1]) + RecordJournalCodec.encodeBatch(Self.batches[2])
        let newSnapshot = RecordJournalCodec.encodeSnapshot(newView, generation: oldGeneration + 1)
        let newLog = RecordJournalCodec.encodeLogHeader(generation: oldGeneration + 1)
        switch point {
        case .whileWritingTheSnapshot:
            try dir.write("records.snapshot", RecordJournalCodec.encodeSnapshot(base, generation: oldGeneration))
            try dir.write("records.log", oldLog)
            try dir.write("records.snapshot.tmp", Array(newSnapshot.prefix(newSnapshot.count / 2)))
        case .afterRenamingTheSnapshot, .afterRenamingTheFirstSnapshot:
            try dir.write("records.snapshot", newSnapshot)
            try dir.write("records.log", oldLog)
        case .whileWritingTheLog:
            try dir.write("records.snapshot", newSnapshot)
            try dir.write("records.log", oldLog)
            try dir.write("records.log.tmp", Array(newLog.prefix(5)))
        case .afterRenamingTheLog:
            try dir.write("records.snapshot", newSnapshot)
            try dir.write("records.log", newLog)
        }
        if point == .afterRenamingTheFirstSnapshot {
            // The first compaction of a store that had only a log: the base was empty.
            try dir.write("records.log", RecordJournalCodec.encodeLogHeader(generation: 0)
                + Self.batches.map(RecordJournalCodec.encodeBatch).reduce([], +))
        }

        let store = try Self.store(dir)
        #expect(try store.load() == expected)
        #expect(dir.names() == ["records.log", "records.snapshot"])
        try store.apply(Self.extraBatch)
        #expect(try Self.store(dir).load() == Self.applying([Self.extraBatch], to: expected))
    }

    // MARK: Damage

    @Test func aCorruptSnapshotLoadsEmptyAndDamagedIgnoringTheLog() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            let store = try Self.store(dir)
            try store.apply(Self.batches[0])
            try store.compact(Self.applying([Self.batches[0]]))
            try store.apply(Self.batches[1])
        }
        var snapshot = try #require(dir.read("records.snapshot"))
        snapshot[snapshot.count / 2] ^= 0x20
        try dir.write("records.snapshot", snapshot)

        let store = try Self.store(dir)
        let loaded = try store.load()
        #expect(loaded.table.isEmpty)
        #expect(loaded.root == nil)
        #expect(loaded.wasDamaged)
        #expect(try Self.store(dir).load() == loaded, "a load alone repairs nothing")

        try store.apply(Self.extraBatch)
        #expect(try Self.store(dir).load() == Self.applying([Self.extraBatch]))
    }

    @Test("A log with a bad header or a future generation is damage", arguments: [false, true])
    func aLogThatCannotExtendTheSnapshotIsDamage(futureGeneration: Bool) throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let base = Self.applying([Self.batches[0]])
        try dir.write("records.snapshot", RecordJournalCodec.encodeSnapshot(base, generation: 3))
        var log = RecordJournalCodec.encodeLogHeader(generation: futureGeneration ? 4 : 3)
            + RecordJournalCodec.encodeBatch(Self.batches[1])
        if !futureGeneration { log[10] ^= 1 }
        try dir.write("records.log", log)

        let store = try Self.store(dir)
        let loaded = try store.load()
        #expect(loaded.wasDamaged)
        #expect(loaded.table == base.table)
        try store.apply(Self.extraBatch)
        #expect(try Self.store(dir).load() == Self.applying([Self.extraBatch], to: base))
        try store.compact(base)
        #expect(try Self.store(dir).load() == base)
    }

    @Test func randomTruncationsAndBitFlipsNeverThrowAndTheNextWriteRepairs() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let base = Self.applying([Self.batches[0]])
        let snapshot = RecordJournalCodec.encodeSnapshot(base, generation: 3)
        let log = RecordJournalCodec.encodeLogHeader(generation: 3)
            + Self.batches[1...].map(RecordJournalCodec.encodeBatch).reduce([], +)
        let prefixes = (1...Self.batches.count).map { Self.applying(Array(Self.batches[..<$0])) }
        var rng = SplitMix64(seed: 20_261_202)

        for iteration in 0..<100 {
            let hitsSnapshot = Bool.random(using: &rng)
            var damaged = hitsSnapshot ? snapshot : log
            let flip = Bool.random(using: &rng)
            if flip {
                damaged[Int.random(in: 0..<damaged.count, using: &rng)] ^= 1 << UInt8.random(in: 0..<8, using: &rng)
            } else {
                damaged.removeLast(Int.random(in: 1...damaged.count, using: &rng))
            }
            dir.remove()
            try #require(mkdir(dir.path.map { CChar(bitPattern: $0) } + [0], 0o700) == 0)
            try dir.write("records.snapshot", hitsSnapshot ? damaged : snapshot)
            try dir.write("records.log", hitsSnapshot ? log : damaged)
            let what = "iteration \(iteration): \(flip ? "flip" : "cut") in \(hitsSnapshot ? "snapshot" : "log")"

            let store = try Self.store(dir)
            let loaded = try store.load()
            if flip {
                #expect(loaded.wasDamaged, "\(what)")
            }
            if hitsSnapshot {
                #expect(loaded.wasDamaged && loaded.table.isEmpty && loaded.root == nil, "\(what)")
            } else {
                // A cut at a frame boundary looks like fewer appends: any prefix is honest.
                #expect(prefixes.contains { $0.table == loaded.table && $0.root == loaded.root }, "\(what)")
            }
            try store.apply(Self.extraBatch)
            var expected = Self.applying([Self.extraBatch], to: loaded)
            expected.wasDamaged = false
            #expect(try Self.store(dir).load() == expected, "\(what)")
        }
    }

    // MARK: Read-only use and errors

    @Test func aReadOnlyStoreNeitherRepairsNorWrites() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.store(dir).apply(Self.batches[0])
        let torn = try #require(dir.read("records.log")) + [1, 2, 3]
        try dir.write("records.log", torn)

        let store = try Self.store(dir, readOnly: true)
        let loaded = try store.load()
        #expect(loaded.wasDamaged)
        #expect(loaded.table == Self.applying([Self.batches[0]]).table)
        #expect(dir.read("records.log") == torn)
        let applyError = #expect(throws: KeepSyncError.self) { try store.apply(Self.batches[1]) }
        #expect(applyError?.code == .readOnly)
        let compactError = #expect(throws: KeepSyncError.self) { try store.compact(loaded) }
        #expect(compactError?.code == .readOnly)
        #expect(dir.names() == ["records.log"])
    }

    @Test func aMissingDirectoryIsAnError() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let error = #expect(throws: KeepSyncError.self) { try JournalBookmarkStore(directory: dir.file("missing")) }
        #expect(error?.code == .notFound)
    }
}
