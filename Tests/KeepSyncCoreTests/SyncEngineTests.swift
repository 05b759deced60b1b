import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

@Suite("SyncEngine")
struct SyncEngineTests {
    // MARK: Harness

    /// Lines logged by the engine.
    final class LogCapture: Sendable {
        let lines = Mutex<[(LogLevel, String)]>([])
        var logger: Logger {
            Logger(level: .debug) { [self] level, text in lines.withLock { $0.append((level, text)) } }
        }
        func messages(_ level: LogLevel) -> [String] { lines.withLock { $0.filter { $0.0 == level }.map(\.1) } }
    }

    /// Mirror operations in the order they were attempted (through the failure hook).
    final class OperationLog: Sendable {
        let entries = Mutex<[(InMemoryTree.Operation, RelativePath)]>([])
        func append(_ op: InMemoryTree.Operation, _ path: RelativePath) { entries.withLock { $0.append((op, path)) } }
        var all: [(InMemoryTree.Operation, RelativePath)] { entries.withLock { $0 } }
    }

    /// A counter usable from `@Sendable` hooks.
    final class Counter: Sendable {
        let value = Mutex(0)
        /// Increments and returns the new value.
        func next() -> Int { value.withLock { $0 += 1; return $0 } }
    }

    /// Two in-memory trees, a store and the real TreeScanner + SyncEngine over them.
    final class Harness {
        let source: InMemoryTree
        let mirror = InMemoryTree(device: 2)
        let store: InMemoryStore
        let log = LogCapture()
        private(set) var engine: SyncEngine

        init(options: SyncOptions = SyncOptions(), records: RecordSet = RecordSet(), source: InMemoryTree = InMemoryTree(device: 1)) {
            self.source = source
            store = InMemoryStore(records)
            engine = SyncEngine(source: source, mirror: LocalMirror(mirror), store: store, records: records, options: options,
                                logger: log.logger)
        }

        var options: SyncOptions {
            get { engine.options }
            set { engine.reconfigure(newValue) }
        }

        /// One full pass, streamed (directory renames made before the directories are walked).
        @discardableResult
        func pass() throws -> SyncSummary {
            try engine.fullPass().summary
        }

        /// A new engine over the records the store holds, as after a restart.
        func restart() throws {
            engine = SyncEngine(source: source, mirror: LocalMirror(mirror), store: store, records: try store.load(),
                                options: engine.options, logger: log.logger)
        }

        /// Resets the operation counters of both trees.
        func resetCounts() {
            source.resetCounts()
            mirror.resetCounts()
        }

        /// Mirror writes of any kind, plus opens on either side.
        var writesAndOpens: [String: Int] {
            var out: [String: Int] = [:]
            for op in [InMemoryTree.Operation.install, .makeDirectory, .makeSymlink, .remove, .rename, .setAttributes, .open] {
                let n = mirror.count(op)
                if n > 0 { out["mirror.\(op.rawValue)"] = n }
            }
            let opens = source.count(.open)
            if opens > 0 { out["source.open"] = opens }
            return out
        }

        /// Records never claim what the mirror lacks: every record names a mirror object of
        /// its kind with the recorded inode, and the store holds exactly the engine's records.
        func expectRecordsFollowMirror(sourceLocation: SourceLocation = #_sourceLocation) throws {
            let stored = try store.load()
            #expect(stored.table == engine.records.table, "store and engine disagree", sourceLocation: sourceLocation)
            for (path, record) in engine.records.table.sorted(by: { $0.key < $1.key }) {
                guard let node = mirror.node(path) else {
                    Issue.record("record claims \(path.escaped) (\(record.kind)) but the mirror lacks it",
                                 sourceLocation: sourceLocation)
                    continue
                }
                #expect(node.inode == record.mirrorInode, "mirror inode of \(path.escaped)", sourceLocation: sourceLocation)
                #expect(node.kind == record.kind, "kind of \(path.escaped)", sourceLocation: sourceLocation)
            }
        }

        /// Sets the mirror's failure hook.
        func failMirror(_ hook: @escaping @Sendable (InMemoryTree.Operation, RelativePath) -> KeepSyncError?) {
            mirror.failure.withLock { $0 = hook }
        }

        func clearFailures() { mirror.failure.withLock { $0 = nil } }
    }

    static func p(_ text: String) -> RelativePath { RelativePath(text) }
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
    static let cafe = RelativePath(bytes: [0x63, 0x61, 0x66, 0xE9])   // "caf\xe9", not UTF-8
    static let newline = RelativePath("new\nline")

    /// Compares every node of two trees except special files (and `ignoring` paths): the same
    /// paths, and for each the kind, mode, mtime, content of files and target of links.
    static func assertTreesEqual(_ source: InMemoryTree, _ mirror: InMemoryTree,
                                 ignoring: (RelativePath) -> Bool = { _ in false },
                                 sourceLocation: SourceLocation = #_sourceLocation) {
        let specials = Set(source.nodes.filter { $0.value.kind == .special }.keys)
        let s = source.nodes.filter { !specials.contains($0.key) && !ignoring($0.key) }
        let m = mirror.nodes.filter { !specials.contains($0.key) && !ignoring($0.key) }
        let missing = s.keys.filter { m[$0] == nil }.sorted().map(\.escaped)
        let extra = m.keys.filter { s[$0] == nil }.sorted().map(\.escaped)
        #expect(missing == [], "missing in the mirror", sourceLocation: sourceLocation)
        #expect(extra == [], "extra in the mirror", sourceLocation: sourceLocation)
        for (path, a) in s.sorted(by: { $0.key < $1.key }) {
            guard let b = m[path] else { continue }
            let name = path.escaped
            #expect(a.kind == b.kind, "kind of \(name)", sourceLocation: sourceLocation)
            guard a.kind == b.kind else { continue }
            #expect(a.mtime == b.mtime, "mtime of \(name)", sourceLocation: sourceLocation)
            switch a.kind {
            case .regular:
                #expect(a.content == b.content, "content of \(name)", sourceLocation: sourceLocation)
                #expect(a.mode == b.mode, "mode of \(name)", sourceLocation: sourceLocation)
            case .directory:
                #expect(a.mode == b.mode, "mode of \(name)", sourceLocation: sourceLocation)
            case .symlink:
                #expect(a.target == b.target, "target of \(name)", sourceLocation: sourceLocation)
            case .special:
                break
            }
        }
    }

    static let t = Timespec(seconds: 1_600_000_000, nanoseconds: 987_654_321)

    /// A source with nested directories, modes, ns mtimes, links, odd names and a FIFO.
    static func populate(_ tree: InMemoryTree) {
        tree.writeFile(p("a.txt"), bytes("alpha"), mode: 0o644, mtime: Timespec(seconds: 1_500_000_000, nanoseconds: 1))
        tree.makeDirectory(p("bin"), mode: 0o755, mtime: nil)
        tree.writeFile(p("bin/run.sh"), bytes("#!/bin/sh\necho hi\n"), mode: 0o755)
        tree.makeDirectory(p("docs"), mode: 0o750, mtime: nil)
        tree.writeFile(p("docs/readme"), bytes("read me"), mode: 0o600, mtime: t)
        tree.makeDirectory(p("docs/deep"), mode: 0o711, mtime: nil)
        tree.writeFile(p("docs/deep/nested.bin"), (0...255).map { UInt8($0) }, mode: 0o640)
        tree.makeLink(p("docs/dangling"), to: bytes("../nowhere"))
        tree.makeDirectory(p("empty"), mode: 0o700, mtime: nil)
        tree.makeLink(p("link"), to: bytes("a.txt"))
        tree.writeFile(cafe, [0xFF, 0x00, 0x7F], mode: 0o644)
        tree.writeFile(newline, bytes("two\nlines"), mode: 0o644)
        tree.makeSpecial(p("fifo"))
    }

    /// A harness whose mirror was synced once from `populate`d source; counters reset.
    static func synced(options: SyncOptions = SyncOptions()) throws -> Harness {
        let h = Harness(options: options)
        populate(h.source)
        let summary = try h.pass()
        try #require(summary.errors.isEmpty, "initial pass: \(summary.errors)")
        assertTreesEqual(h.source, h.mirror)
        h.resetCounts()
        return h
    }

    // MARK: First and second pass

    @Test("the first pass makes the mirror equal to the source")
    func firstPassMirrorsEverything() throws {
        let h = Harness()
        Self.populate(h.source)
        let summary = try h.pass()
        #expect(summary.errors == [])
        Self.assertTreesEqual(h.source, h.mirror)
        #expect(h.mirror.node(Self.p("fifo")) == nil, "special files are not mirrored")
        #expect(summary.copiedFiles == 6)
        let expectedBytes: UInt64 = 298  // 5 + 18 + 7 + 256 + 3 + 9
        #expect(summary.copiedBytes == expectedBytes)
        #expect(summary.createdDirectories == 4)
        #expect(summary.createdLinks == 2)
        #expect(summary.skippedSpecial == 1)
        #expect(summary.removedEntries == 0)
        #expect(summary.heldDeletes == 0)
        // Every mirrored path, the root included, has a record; the FIFO has none.
        let expected = Set(h.source.nodes.filter { $0.value.kind != .special }.keys)
        #expect(Set(h.engine.records.table.keys) == expected)
        #expect(h.engine.records.table[Self.p("link")]?.linkTarget == Self.bytes("a.txt"))
        try h.expectRecordsFollowMirror()
    }

    @Test("a second pass over an unchanged tree opens, writes and records nothing")
    func secondPassIsQuiet() throws {
        let h = try Self.synced()
        let batches = h.store.batches.count
        let summary = try h.pass()
        #expect(h.writesAndOpens == [:])
        #expect(h.store.batches.count == batches, "no record batch appended")
        var expected = SyncSummary()
        expected.skippedSpecial = 1
        #expect(summary == expected)
        // The same after a restart from the stored records.
        try h.restart()
        try h.pass()
        #expect(h.writesAndOpens == [:])
        #expect(h.store.batches.count == batches)
        try h.expectRecordsFollowMirror()
    }

    @Test("one changed file is installed exactly once")
    func oneChangedFile() throws {
        let h = try Self.synced()
        h.source.writeFile(Self.p("docs/readme"), Self.bytes("read me, changed"), mode: 0o600)
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.count(.install) == 1)
        #expect(h.source.count(.open) == 1)
        #expect(summary.copiedFiles == 1)
        #expect(h.mirror.count(.makeDirectory) + h.mirror.count(.makeSymlink) + h.mirror.count(.remove) == 0)
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
        h.resetCounts()
        try h.pass()
        #expect(h.writesAndOpens == [:])
    }

    // MARK: Repairs

    enum Tamper: String, Sendable, CaseIterable {
        case contentAndSize, sameSizeAndMtimeNewInode, fileMode, fileDeleted, fileReplacedByDirectory
        case linkRetargeted, linkDeleted, directoryMode, directoryMtime, directoryDeleted

        /// Installs the repair needs.
        var expectedInstalls: Int {
            switch self {
            case .contentAndSize, .sameSizeAndMtimeNewInode, .fileDeleted, .fileReplacedByDirectory: 1
            case .directoryDeleted: 2    // docs/readme and docs/deep/nested.bin
            case .fileMode, .linkRetargeted, .linkDeleted, .directoryMode, .directoryMtime: 0
            }
        }

        func apply(to mirror: InMemoryTree) {
            let readme = SyncEngineTests.p("docs/readme")
            switch self {
            case .contentAndSize:
                let old = mirror.node(readme)!
                mirror.writeFile(readme, SyncEngineTests.bytes("tampered with"), mode: old.mode, mtime: old.mtime)
            case .sameSizeAndMtimeNewInode:
                let old = mirror.node(readme)!
                mirror.delete(readme)
                mirror.writeFile(readme, SyncEngineTests.bytes("READ ME"), mode: old.mode, mtime: old.mtime)
                #expect(mirror.node(readme)!.inode != old.inode)
            case .fileMode:
                mirror.modify(readme) { $0.mode = 0o666 }
            case .fileDeleted:
                mirror.delete(readme)
            case .fileReplacedByDirectory:
                mirror.delete(readme)
                mirror.makeDirectory(readme, mode: 0o755, mtime: nil)
                mirror.writeFile(SyncEngineTests.p("docs/readme/inner"), [1, 2, 3])
            case .linkRetargeted:
                mirror.makeLink(SyncEngineTests.p("link"), to: SyncEngineTests.bytes("elsewhere"))
            case .linkDeleted:
                mirror.delete(SyncEngineTests.p("link"))
            case .directoryMode:
                mirror.modify(SyncEngineTests.p("docs")) { $0.mode = 0o777 }
            case .directoryMtime:
                mirror.modify(SyncEngineTests.p("docs/deep")) { $0.mtime = Timespec(seconds: 5, nanoseconds: 5) }
            case .directoryDeleted:
                mirror.delete(SyncEngineTests.p("docs"))
            }
        }
    }

    @Test("what was changed in the mirror behind our back is repaired", arguments: Tamper.allCases)
    func mirrorTamperingIsRepaired(tamper: Tamper) throws {
        let h = try Self.synced()
        tamper.apply(to: h.mirror)
        h.resetCounts()
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.count(.install) == tamper.expectedInstalls)
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
        h.resetCounts()
        try h.pass()
        #expect(h.writesAndOpens == [:], "converged")
    }

    @Test("compareContent finds same-size, same-mtime files with different bytes")
    func compareContentDetectsBytes() throws {
        let h = try Self.synced()
        let path = Self.p("docs/readme")
        h.mirror.modify(path) { $0.content = Self.bytes("READ ME") }   // same size, mtime and inode
        try h.pass()
        #expect(h.mirror.count(.install) == 0, "metadata alone cannot see it")
        #expect(h.source.count(.open) == 0 && h.mirror.count(.open) == 0, "no contents read without --content")
        #expect(h.mirror.node(path)?.content == Self.bytes("READ ME"))

        h.options.compareContent = true
        h.resetCounts()
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.count(.install) == 1)
        #expect(h.mirror.node(path)?.content == Self.bytes("read me"))
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()

        // Equal contents: files are read and compared, nothing is written.
        h.resetCounts()
        try h.pass()
        #expect(h.mirror.count(.open) > 0)
        #expect(h.mirror.count(.install) == 0)
    }

    /// A tree whose files hand out at most `chunk` bytes per read, as a pipe-like or FUSE
    /// file may.
    final class ShortReads: FileSystemProviding {
        let base: InMemoryTree
        let chunk: Int
        init(_ base: InMemoryTree, chunk: Int) { self.base = base; self.chunk = chunk }
        final class File: SourceFile {
            let inner: any SourceFile
            let chunk: Int
            init(_ inner: any SourceFile, chunk: Int) { self.inner = inner; self.chunk = chunk }
            var stat: FileStat { inner.stat }
            func read(upTo count: Int) throws -> [UInt8] { try inner.read(upTo: min(count, chunk)) }
            func currentStat() throws -> FileStat { try inner.currentStat() }
            func close() { inner.close() }
        }
        func stat(_ path: RelativePath) throws -> FileStat? { try base.stat(path) }
        func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try base.list(directory) }
        func readLink(_ path: RelativePath) throws -> [UInt8] { try base.readLink(path) }
        func open(_ path: RelativePath) throws -> any SourceFile { File(try base.open(path), chunk: chunk) }
    }

    @Test("--content reads until the end: short reads on either side are no difference")
    func compareContentWithShortReads() throws {
        let h = try Self.synced()
        var options = SyncOptions()
        options.compareContent = true
        let scan = try TreeScanner(source: ShortReads(h.source, chunk: 7), mirror: ShortReads(h.mirror, chunk: 13),
                                   records: h.engine.records, options: options).scan()
        let compared = scan.steps.filter { if case .path(let s, _, _) = $0 { return s.contentEqual != nil }; return false }
        #expect(compared.count == 0, "equal files reported as differing: \(compared)")
        #expect(h.mirror.count(.open) >= 6, "the contents were read")
    }

    // MARK: Deletions

    @Test("deletions propagate, and --no-delete keeps them", arguments: [true, false])
    func deletions(deleteEnabled: Bool) throws {
        let h = try Self.synced(options: SyncOptions(deleteEnabled: deleteEnabled))
        let gone = [Self.p("docs"), Self.p("a.txt"), Self.p("link")]
        for path in gone { h.source.delete(path) }
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(summary.heldDeletes == 0)
        let isGone: (RelativePath) -> Bool = { path in gone.contains { path.isWithin($0) } }
        if deleteEnabled {
            #expect(summary.removedEntries == 3)
            Self.assertTreesEqual(h.source, h.mirror)
        } else {
            #expect(h.mirror.count(.remove) == 0)
            #expect(summary.removedEntries == 0)
            for path in gone { #expect(h.mirror.node(path) != nil, "\(path.escaped) kept") }
            #expect(h.mirror.node(Self.p("docs/deep/nested.bin"))?.content == (0...255).map { UInt8($0) })
            Self.assertTreesEqual(h.source, h.mirror, ignoring: isGone)
        }
        #expect(h.engine.records.table.keys.filter(isGone) == [], "records of deleted paths are dropped")
        try h.expectRecordsFollowMirror()
        h.resetCounts()
        try h.pass()
        #expect(h.writesAndOpens == [:], "converged")
    }

    @Test("stale records of paths gone from both sides are dropped", arguments: [true, false])
    func staleRecordsDropped(deleteEnabled: Bool) throws {
        let ghost = FileRecord(path: Self.p("ghost"), kind: .regular, device: 1, inode: 9_999, size: 1,
                               mtime: Self.t, mode: 0o644, mirrorInode: 8_888)
        let deeper = FileRecord(path: Self.p("gone/deeper"), kind: .regular, device: 1, inode: 9_998, size: 1,
                                mtime: Self.t, mode: 0o644, mirrorInode: 8_887)
        let h = Harness(options: SyncOptions(deleteEnabled: deleteEnabled),
                        records: RecordSet(records: [ghost.path: ghost, deeper.path: deeper]))
        h.source.writeFile(Self.p("kept"), [1])
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.engine.records.table[ghost.path] == nil)
        #expect(h.engine.records.table[deeper.path] == nil)
        #expect(try h.store.load().table[ghost.path] == nil)
        #expect(h.engine.records.table[Self.p("kept")] != nil)
        try h.expectRecordsFollowMirror()
    }

    // MARK: Excludes

    @Test("excluded paths are neither copied nor deleted, and mirror content under them is left alone")
    func excludes() throws {
        let excludes = try ExcludeMatcher(patterns: [Self.bytes("*.log"), Self.bytes("cache/")])
        let h = Harness(options: SyncOptions(excludes: excludes))
        h.source.writeFile(Self.p("keep.txt"), Self.bytes("keep"))
        h.source.writeFile(Self.p("app.log"), Self.bytes("source only"))
        h.source.writeFile(Self.p("both.log"), Self.bytes("source version"))
        h.source.makeDirectory(Self.p("cache"), mode: 0o755, mtime: nil)
        h.source.writeFile(Self.p("cache/new"), Self.bytes("source cache"))
        h.source.makeDirectory(Self.p("sub"), mode: 0o755, mtime: nil)
        h.source.writeFile(Self.p("sub/deep.log"), Self.bytes("deep"))
        h.mirror.writeFile(Self.p("both.log"), Self.bytes("mirror version"))
        h.mirror.writeFile(Self.p("extra.log"), Self.bytes("mirror only"))
        h.mirror.makeDirectory(Self.p("cache"), mode: 0o700, mtime: nil)
        h.mirror.writeFile(Self.p("cache/old"), Self.bytes("mirror cache"))
        let before = h.mirror.nodes.filter { $0.key.bytes.starts(with: Self.bytes("cache")) || $0.key.name.ends(with: ".log") }

        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.node(Self.p("keep.txt"))?.content == Self.bytes("keep"))
        #expect(h.mirror.node(Self.p("app.log")) == nil)
        #expect(h.mirror.node(Self.p("sub/deep.log")) == nil)
        #expect(h.mirror.node(Self.p("cache/new")) == nil)
        let after = h.mirror.nodes.filter { $0.key.bytes.starts(with: Self.bytes("cache")) || $0.key.name.ends(with: ".log") }
        #expect(after == before, "mirror content under excluded paths is untouched")
        #expect(h.mirror.count(.remove) == 0)
        #expect(h.engine.records.table.keys.filter { $0.name.ends(with: ".log") || $0.bytes.starts(with: Self.bytes("cache")) } == [])
        try h.expectRecordsFollowMirror()
    }

    // MARK: The mass-delete brake

    struct BrakeCase: Sendable, CustomTestStringConvertible {
        let files: Int
        let deleted: Int
        let percent: Int
        let allow: Bool
        let held: Bool
        var testDescription: String {
            "\(deleted) of \(files) deleted, max \(percent)%\(allow ? ", allowed" : ""): \(held ? "held" : "applied")"
        }
    }

    static let brakeCases: [BrakeCase] = [
        BrakeCase(files: 20, deleted: 11, percent: 50, allow: false, held: true),
        BrakeCase(files: 20, deleted: 11, percent: 50, allow: true, held: false),
        BrakeCase(files: 20, deleted: 10, percent: 50, allow: false, held: false),   // not more than 10
        BrakeCase(files: 30, deleted: 11, percent: 50, allow: false, held: false),   // 36 %
        BrakeCase(files: 21, deleted: 11, percent: 50, allow: false, held: true),    // 52 %: the root is not counted
        BrakeCase(files: 22, deleted: 11, percent: 50, allow: false, held: false),   // exactly 50 % is not more
        BrakeCase(files: 20, deleted: 20, percent: 100, allow: false, held: false),  // 100 turns it off
        BrakeCase(files: 100, deleted: 11, percent: 0, allow: false, held: true),
        BrakeCase(files: 100, deleted: 11, percent: 10, allow: false, held: true),   // 11 %
        BrakeCase(files: 100, deleted: 11, percent: 11, allow: false, held: false),
    ]

    static func name(_ i: Int) -> RelativePath { RelativePath(String(format3(i))) }
    static func format3(_ i: Int) -> String { "f" + String(repeating: "0", count: max(0, 3 - String(i).count)) + String(i) }

    @Test("the mass-delete brake holds large deletions and still applies other changes", arguments: brakeCases)
    func brake(c: BrakeCase) throws {
        let h = Harness(options: SyncOptions(maxDeletePercent: c.percent, allowMassDelete: c.allow))
        for i in 0..<c.files { h.source.writeFile(Self.name(i), [UInt8(i % 256)]) }
        try #require(try h.pass().errors == [])
        h.resetCounts()
        for i in 0..<c.deleted { h.source.delete(Self.name(i)) }
        h.source.writeFile(Self.p("new"), Self.bytes("new file"))
        let changes = c.deleted < c.files   // the last file is changed when it was not deleted
        if changes { h.source.writeFile(Self.name(c.files - 1), Self.bytes("changed")) }
        let scan = try h.engine.scan()
        #expect(scan.deletions == c.deleted)
        #expect(scan.mirrorEntries == c.files)
        #expect(h.engine.brakeHolds(scan) == c.held)
        let summary = h.engine.apply(scan)
        #expect(summary.errors == [])
        #expect(h.mirror.count(.install) == (changes ? 2 : 1), "other changes are applied either way")
        #expect(h.mirror.node(Self.p("new"))?.content == Self.bytes("new file"))
        if changes { #expect(h.mirror.node(Self.name(c.files - 1))?.content == Self.bytes("changed")) }
        if c.held {
            #expect(summary.heldDeletes == c.deleted)
            #expect(summary.removedEntries == 0)
            #expect(h.mirror.count(.remove) == 0)
            for i in 0..<c.deleted { #expect(h.mirror.node(Self.name(i)) != nil) }
        } else {
            #expect(summary.heldDeletes == 0)
            #expect(summary.removedEntries == c.deleted)
            Self.assertTreesEqual(h.source, h.mirror)
        }
        try h.expectRecordsFollowMirror()
    }

    @Test("type changes count as deletions for the brake; allowMassDelete applies them")
    func brakeCountsTypeChanges() throws {
        let h = Harness()
        for i in 0..<20 { h.source.writeFile(Self.name(i), [1]) }
        try #require(try h.pass().errors == [])
        h.resetCounts()
        for i in 0..<12 {
            h.source.delete(Self.name(i))
            h.source.makeDirectory(Self.name(i), mode: 0o755, mtime: nil)
            h.source.writeFile(Self.name(i).appending(Self.bytes("inner")), [2])
        }
        let summary = try h.pass()
        #expect(summary.heldDeletes == 12)
        #expect(h.mirror.count(.remove) == 0)
        #expect(h.mirror.count(.makeDirectory) == 0)
        #expect(h.mirror.count(.install) == 0, "nothing is written below a held type change")
        for i in 0..<12 { #expect(h.mirror.node(Self.name(i))?.kind == .regular) }
        try h.expectRecordsFollowMirror()

        h.options.allowMassDelete = true
        let lifted = try h.pass()
        #expect(lifted.errors == [])
        #expect(lifted.heldDeletes == 0)
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
    }

    @Test("a removed directory counts with everything below it")
    func brakeCountsSubtrees() throws {
        let h = Harness()
        h.source.makeDirectory(Self.p("big"), mode: 0o755, mtime: nil)
        for i in 0..<15 { h.source.writeFile(Self.p("big").appending(Self.bytes("f\(i)")), [1]) }
        for i in 0..<5 { h.source.writeFile(Self.name(i), [1]) }
        try #require(try h.pass().errors == [])
        h.source.delete(Self.p("big"))
        let scan = try h.engine.scan()
        #expect(scan.deletions == 16)
        #expect(scan.mirrorEntries == 21)
        let summary = h.engine.apply(scan)
        #expect(summary.heldDeletes == 16)
        #expect(h.mirror.node(Self.p("big/f3")) != nil)
        try h.expectRecordsFollowMirror()
    }

    @Test("on a first run without records, entries already in the mirror count too")
    func brakeOnFirstRun() throws {
        let h = Harness()
        for i in 0..<20 { h.mirror.writeFile(Self.name(i), [9]) }
        for i in 0..<3 { h.source.writeFile(Self.p("s\(i)"), [UInt8(i)]) }
        let summary = try h.pass()
        #expect(summary.heldDeletes == 20)
        #expect(h.mirror.count(.remove) == 0)
        #expect(summary.copiedFiles == 3)
        for i in 0..<3 { #expect(h.mirror.node(Self.p("s\(i)"))?.content == [UInt8(i)]) }
        try h.expectRecordsFollowMirror()
    }

    // MARK: Temp files

    static let tempName = ".keepsync-tmp-0123456789abcdef"

    @Test("unclaimed temp files in the mirror are removed, even under --no-delete", arguments: [true, false])
    func leftoverTempFilesRemoved(deleteEnabled: Bool) throws {
        let h = Harness(options: SyncOptions(deleteEnabled: deleteEnabled))
        h.source.makeDirectory(Self.p("sub"), mode: 0o755, mtime: nil)
        h.source.writeFile(Self.p("sub/file"), [1])
        h.mirror.makeDirectory(Self.p("sub"), mode: 0o755, mtime: nil)
        h.mirror.writeFile(Self.p(Self.tempName), [0, 0])
        h.mirror.writeFile(Self.p("sub/.keepsync-tmp-ffffffffffffffff"), [0])
        let lookalikes = [".keepsync-tmp-0123", ".keepsync-tmp-0123456789ABCDEF", ".keepsync-tmp-0123456789abcdef0",
                          "x.keepsync-tmp-0123456789abcdef"]
        for name in lookalikes { h.mirror.writeFile(Self.p(name), [7]) }
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.node(Self.p(Self.tempName)) == nil)
        #expect(h.mirror.node(Self.p("sub/.keepsync-tmp-ffffffffffffffff")) == nil)
        for name in lookalikes {
            // Not keepsync's names: ordinary extra files, kept under --no-delete.
            #expect((h.mirror.node(Self.p(name)) != nil) == !deleteEnabled, "\(name)")
        }
        #expect(h.mirror.node(Self.p("sub/file"))?.content == [1])
        // The directories whose temp files went get the source's mtime back.
        #expect(h.mirror.node(Self.p("sub"))?.mtime == h.source.node(Self.p("sub"))?.mtime)
        try h.expectRecordsFollowMirror()
    }

    @Test("temp files never count toward the brake, also inside an extra directory being removed")
    func tempFilesAreNoDeletions() throws {
        let h = Harness()
        for i in 0..<20 { h.source.writeFile(Self.name(i), [1]) }
        try #require(try h.pass().errors == [])
        h.mirror.makeDirectory(Self.p("swapped-away"), mode: 0o755, mtime: nil)
        h.mirror.writeFile(Self.p("swapped-away/real"), [2])
        for i in 0..<60 {
            let hex = String(String(i, radix: 16).reversed()).padding(toLength: 16, withPad: "0", startingAt: 0)
            h.mirror.writeFile(Self.p("swapped-away/.keepsync-tmp-\(hex)"), [0])
            h.mirror.writeFile(Self.p(".keepsync-tmp-\(hex)"), [0])
        }
        let scan = try h.engine.scan()
        #expect(scan.deletions == 2, "the directory and its one real file")
        let summary = h.engine.apply(scan)
        #expect(summary.heldDeletes == 0 && summary.errors == [], "\(summary)")
        Self.assertTreesEqual(h.source, h.mirror)
    }

    @Test("a staged temp file waiting for its rename is not swept; once discarded it is gone")
    func stagedTempFileIsNotSwept() throws {
        let h = Harness()
        h.source.writeFile(Self.p("a"), [1, 2, 3])
        let file = try h.source.open(Self.p("a"))
        let staged = try h.mirror.stage(Self.p("a"), from: file, durable: false)
        let temp = RelativePath.root.appending(staged.temporaryName)
        try #require(h.mirror.node(temp) != nil)
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.node(temp) != nil, "a copy in flight lost its temp file to a sweep")
        h.mirror.discard(staged)
        #expect(h.mirror.node(temp) == nil)
    }

    @Test("a source file with a temp-file name is mirrored like any other")
    func sourceFileWithTempName() throws {
        let h = Harness()
        h.source.writeFile(Self.p(Self.tempName), Self.bytes("mine"), mode: 0o600)
        try #require(try h.pass().errors == [])
        #expect(h.mirror.node(Self.p(Self.tempName))?.content == Self.bytes("mine"))
        #expect(h.engine.records.table[Self.p(Self.tempName)] != nil)
        h.resetCounts()
        try h.pass()
        #expect(h.writesAndOpens == [:])
        #expect(h.mirror.node(Self.p(Self.tempName)) != nil)
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
    }

    // MARK: Races and failures

    @Test("a source file that vanishes between scan and apply is not an error")
    func vanishedBetweenScanAndApply() throws {
        let h = Harness()
        h.source.writeFile(Self.p("a"), [1])
        h.source.writeFile(Self.p("b"), [2])
        let scan = try h.engine.scan()
        h.source.delete(Self.p("a"))
        let summary = h.engine.apply(scan)
        #expect(summary.errors == [])
        #expect(summary.copiedFiles == 1)
        #expect(h.mirror.node(Self.p("a")) == nil)
        #expect(h.mirror.node(Self.p("b"))?.content == [2])
        #expect(h.engine.records.table[Self.p("a")] == nil)
        try h.expectRecordsFollowMirror()
        try h.pass()
        Self.assertTreesEqual(h.source, h.mirror)
    }

    @Test("a file that changes during its copy is copied again")
    func changedDuringCopyIsCopiedAgain() throws {
        let h = Harness()
        let path = Self.p("growing")
        h.source.writeFile(path, Self.bytes("version 1"))
        let calls = Counter()
        let source = h.source
        h.failMirror { op, p in
            if op == .install, p == path, calls.next() == 1 {
                // A writer appends while we copy (in place: the directory's mtime stays).
                source.modify(path) { node in
                    node.content = Self.bytes("version 2, longer")
                    node.mtime = Timespec(seconds: node.mtime.seconds + 1, nanoseconds: 5)
                }
            }
            return nil
        }
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.count(.install) == 2)
        #expect(summary.copiedFiles == 1)
        #expect(h.mirror.node(path)?.content == Self.bytes("version 2, longer"))
        let record = try #require(h.engine.records.table[path])
        #expect(record.describes(source: try #require(try h.source.stat(path))))
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
    }

    @Test("a file that never stops changing fails after a few attempts and is not recorded")
    func neverSettlingFileFails() throws {
        let h = Harness()
        let path = Self.p("busy")
        h.source.writeFile(path, [0])
        h.source.writeFile(Self.p("calm"), [1])
        let calls = Counter()
        let source = h.source
        h.failMirror { op, p in
            if op == .install, p == path { source.writeFile(path, [UInt8(calls.next() % 256), 1]) }
            return nil
        }
        let summary = try h.pass()
        #expect(summary.errors.map(\.code) == [.sourceChanged])
        #expect(summary.errors.first?.path == path)
        // One staged attempt in the group commit, five more on its own, one for "calm".
        #expect(h.mirror.count(.install) == 1 + 5 + 1)
        #expect(h.mirror.node(path) == nil)
        #expect(h.engine.records.table[path] == nil)
        #expect(h.mirror.node(Self.p("calm"))?.content == [1])
        try h.expectRecordsFollowMirror()
    }

    @Test("an error on one path is reported for it alone; everything else is synced")
    func injectedErrorOnOnePath() throws {
        let h = Harness()
        Self.populate(h.source)
        h.source.writeFile(Self.p("docs/bad"), Self.bytes("will not fit"))
        let bad = Self.p("docs/bad")
        h.failMirror { op, p in op == .install && p == bad ? KeepSyncError(.noSpace, "write: No space left on device") : nil }
        let summary = try h.pass()
        #expect(summary.errors.count == 1)
        #expect(summary.errors.first?.code == .noSpace)
        #expect(summary.errors.first?.path == bad)
        #expect(h.mirror.node(bad) == nil)
        #expect(h.engine.records.table[bad] == nil, "no record claims the failed path")
        Self.assertTreesEqual(h.source, h.mirror, ignoring: { $0 == bad })
        // The directory still gets its mode and mtime after its entries, though one failed.
        #expect(h.mirror.node(Self.p("docs"))?.mtime == h.source.node(Self.p("docs"))?.mtime)
        #expect(h.mirror.node(Self.p("docs"))?.mode == 0o750)
        try h.expectRecordsFollowMirror()

        h.clearFailures()
        h.resetCounts()
        let retry = try h.pass()
        #expect(retry.errors == [])
        #expect(h.mirror.count(.install) == 1)
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
    }

    @Test("a source directory that cannot be listed (EACCES) is one error; nothing below it is removed or forgotten, the rest syncs")
    func unreadableSourceDirectory() throws {
        let h = try Self.synced()
        let docs = Self.p("docs")
        h.source.failure.withLock {
            $0 = { op, path in op == .list && path == docs ? KeepSyncError(.permissionDenied, "open directory: Permission denied") : nil }
        }
        h.source.writeFile(Self.p("a.txt"), Self.bytes("alpha, changed"))
        let recordsBelow = h.engine.records.table.keys.filter { $0 != docs && $0.isWithin(docs) }
        let summary = try h.pass()
        #expect(summary.errors.map(\.path) == [docs])
        #expect(summary.errors.first?.code == .permissionDenied)
        #expect(summary.removedEntries == 0, "entries below an unreadable directory were removed")
        #expect(h.mirror.node(Self.p("docs/deep/nested.bin")) != nil)
        #expect(h.mirror.node(Self.p("a.txt"))?.content == Self.bytes("alpha, changed"), "the rest of the tree syncs")
        let stored = try h.store.load().table
        for path in recordsBelow { #expect(stored[path] != nil, "the record of \(path.escaped) was forgotten") }

        h.source.failure.withLock { $0 = nil }
        #expect(try h.pass().errors == [])
        Self.assertTreesEqual(h.source, h.mirror)
    }

    @Test("a directory that cannot be created is reported once and its entries are not attempted")
    func failedDirectory() throws {
        let h = Harness()
        h.source.makeDirectory(Self.p("d"), mode: 0o755, mtime: nil)
        h.source.writeFile(Self.p("d/x"), [1])
        h.source.makeDirectory(Self.p("d/sub"), mode: 0o755, mtime: nil)
        h.source.writeFile(Self.p("d/sub/y"), [2])
        h.source.writeFile(Self.p("ok"), [3])
        let operations = OperationLog()
        h.failMirror { op, p in
            operations.append(op, p)
            return op == .makeDirectory && p == Self.p("d") ? KeepSyncError(.permissionDenied, "mkdirat: Permission denied") : nil
        }
        let summary = try h.pass()
        #expect(summary.errors.map(\.path) == [Self.p("d")])
        #expect(summary.errors.map(\.code) == [.permissionDenied])
        #expect(!operations.all.contains { $0.1 != Self.p("d") && $0.1.isWithin(Self.p("d")) }, "nothing below d attempted")
        #expect(h.mirror.node(Self.p("ok"))?.content == [3])
        #expect(h.engine.records.table.keys.filter { $0.isWithin(Self.p("d")) } == [])
        try h.expectRecordsFollowMirror()
    }

    // MARK: Directories and type changes

    @Test("directories get their mode and mtime after their entries (a 0555 directory with files)")
    func readOnlyDirectoryFinishedLast() throws {
        let h = Harness()
        let ro = Self.p("ro")
        h.source.makeDirectory(ro, mode: 0o555, mtime: nil)
        h.source.writeFile(Self.p("ro/a"), [1], mode: 0o444)
        h.source.makeDirectory(Self.p("ro/inner"), mode: 0o555, mtime: nil)
        h.source.writeFile(Self.p("ro/inner/b"), [2])
        let stamp = Timespec(seconds: 1_234_567_890, nanoseconds: 555)
        h.source.modify(ro) { $0.mtime = stamp }
        let operations = OperationLog()
        h.failMirror { op, p in operations.append(op, p); return nil }
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.node(ro)?.mode == 0o555)
        #expect(h.mirror.node(ro)?.mtime == stamp)
        #expect(h.mirror.node(Self.p("ro/inner"))?.mode == 0o555)
        Self.assertTreesEqual(h.source, h.mirror)
        // The last operation on anything within ro is setting ro's own attributes, and the
        // inner directory is finished before it.
        let within = operations.all.filter { $0.1.isWithin(ro) }
        #expect(within.last?.0 == .setAttributes)
        #expect(within.last?.1 == ro)
        let innerFinish = within.lastIndex { $0.0 == .setAttributes && $0.1 == Self.p("ro/inner") }
        let innerWrite = within.lastIndex { $0.0 == .install && $0.1 == Self.p("ro/inner/b") }
        #expect(innerFinish != nil && innerWrite != nil && innerFinish! > innerWrite!)
        try h.expectRecordsFollowMirror()
    }

    enum Shape: String, Sendable, CaseIterable {
        case file, directory, symlink

        func make(_ path: RelativePath, in tree: InMemoryTree) {
            switch self {
            case .file: tree.writeFile(path, SyncEngineTests.bytes("a file"), mode: 0o640)
            case .directory:
                tree.makeDirectory(path, mode: 0o751, mtime: nil)
                tree.writeFile(path.appending(SyncEngineTests.bytes("child")), [4, 2])
                tree.makeDirectory(path.appending(SyncEngineTests.bytes("grandchildren")), mode: 0o755, mtime: nil)
                tree.writeFile(path.appending(SyncEngineTests.bytes("grandchildren/g")), [1])
            case .symlink: tree.makeLink(path, to: SyncEngineTests.bytes("some/where"))
            }
        }
    }

    struct Flip: Sendable, CustomTestStringConvertible {
        let from: Shape
        let to: Shape
        var testDescription: String { "\(from.rawValue) → \(to.rawValue)" }
    }

    static let flips: [Flip] = Shape.allCases.flatMap { a in Shape.allCases.filter { $0 != a }.map { Flip(from: a, to: $0) } }

    @Test("type changes in the source are mirrored", arguments: flips)
    func typeChange(flip: Flip) throws {
        let h = Harness()
        let path = Self.p("x")
        flip.from.make(path, in: h.source)
        h.source.writeFile(Self.p("other"), [0])
        try #require(try h.pass().errors == [])
        h.source.delete(path)
        flip.to.make(path, in: h.source)
        h.resetCounts()
        let summary = try h.pass()
        #expect(summary.errors == [])
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
        #expect(h.engine.records.table[path]?.kind == h.source.node(path)?.kind)
        h.resetCounts()
        try h.pass()
        #expect(h.writesAndOpens == [:], "converged")
    }

    @Test("under --no-delete a type change never removes; a directory in the way is an error for that path",
          arguments: flips)
    func typeChangeWithoutDelete(flip: Flip) throws {
        let h = Harness(options: SyncOptions(deleteEnabled: false))
        let path = Self.p("x")
        flip.from.make(path, in: h.source)
        try #require(try h.pass().errors == [])
        h.source.delete(path)
        flip.to.make(path, in: h.source)
        h.resetCounts()
        let summary = try h.pass()
        #expect(h.mirror.count(.remove) == 0)
        switch (flip.from, flip.to) {
        case (.directory, _), (_, .directory):
            // A directory cannot replace, or be replaced by, anything without a removal.
            #expect(summary.errors.map(\.path) == [path])
            #expect(summary.errors.map(\.code) == [.conflict])
        default:
            // A file and a link replace each other by rename.
            #expect(summary.errors == [])
            Self.assertTreesEqual(h.source, h.mirror)
        }
        try h.expectRecordsFollowMirror()
    }

    enum FailedFlip: String, Sendable, CaseIterable {
        case symlinkToFile, directoryToFile, fileToDirectory, directoryToSymlink

        var shapes: (Shape, Shape) {
            switch self {
            case .symlinkToFile: (.symlink, .file)
            case .directoryToFile: (.directory, .file)
            case .fileToDirectory: (.file, .directory)
            case .directoryToSymlink: (.directory, .symlink)
            }
        }

        var failingOperation: InMemoryTree.Operation {
            switch self {
            case .symlinkToFile, .directoryToFile: .install
            case .fileToDirectory: .makeDirectory
            case .directoryToSymlink: .makeSymlink
            }
        }
    }

    // Regression: a type change whose second step (copy, mkdir, link) failed used to leave
    // the path's own record claiming the removed object and its mirror inode.
    @Test("a type change whose second step fails leaves no record of the removed object",
          arguments: FailedFlip.allCases)
    func typeChangeWithFailedWrite(flip: FailedFlip) throws {
        let h = Harness()
        let path = Self.p("x")
        flip.shapes.0.make(path, in: h.source)
        try #require(try h.pass().errors == [])
        h.source.delete(path)
        flip.shapes.1.make(path, in: h.source)
        let op = flip.failingOperation
        h.failMirror { o, p in o == op && p == path ? KeepSyncError(.noSpace, "No space left on device") : nil }
        let summary = try h.pass()
        #expect(summary.errors.map(\.path) == [path])
        #expect(h.mirror.node(path) == nil, "the old object was removed")
        #expect(h.engine.records.table[path] == nil, "no record claims the removed object")
        try h.expectRecordsFollowMirror()
        h.clearFailures()
        try h.pass()
        Self.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
    }

    // MARK: Adoption, links, specials, root identity

    @Test("a mirror that already matches is adopted without copying")
    func adoptExistingMirror() throws {
        let h = Harness()
        Self.populate(h.source)
        // Build an identical mirror by hand: same content, modes, mtimes, links; other inodes.
        for (path, node) in h.source.nodes.sorted(by: { $0.key < $1.key }) where !path.isRoot {
            switch node.kind {
            case .regular: h.mirror.writeFile(path, node.content, mode: node.mode, mtime: node.mtime)
            case .directory: h.mirror.makeDirectory(path, mode: node.mode, mtime: nil)
            case .symlink: h.mirror.makeLink(path, to: node.target)
            case .special: break
            }
        }
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(h.mirror.count(.install) == 0)
        #expect(h.mirror.count(.makeSymlink) == 0)
        #expect(h.mirror.count(.makeDirectory) == 0)
        #expect(h.mirror.count(.remove) == 0)
        #expect(h.source.count(.open) == 0)
        #expect(h.engine.records.table.count == 13)
        try h.expectRecordsFollowMirror()
    }

    @Test("a changed link target is relinked once, nothing is copied")
    func relink() throws {
        let h = try Self.synced()
        h.source.makeLink(Self.p("link"), to: Self.bytes("bin/run.sh"))
        let summary = try h.pass()
        #expect(summary.errors == [])
        #expect(summary.createdLinks == 1)
        #expect(h.mirror.count(.makeSymlink) == 1)
        #expect(h.mirror.count(.install) == 0)
        #expect(h.mirror.node(Self.p("link"))?.target == Self.bytes("bin/run.sh"))
        try h.expectRecordsFollowMirror()
    }

    @Test("a special file is skipped with one warning per path per process")
    func specialFileWarnedOnce() throws {
        let h = Harness()
        h.source.makeSpecial(Self.p("fifo"))
        h.source.makeSpecial(Self.p("sock"))
        let first = try h.pass()
        let second = try h.pass()
        #expect(first.skippedSpecial == 2)
        #expect(second.skippedSpecial == 2)
        let warnings = h.log.messages(.warning)
        #expect(warnings.count == 2)
        #expect(warnings.contains { $0.contains("fifo") })
        #expect(warnings.contains { $0.contains("sock") })
        #expect(h.mirror.node(Self.p("fifo")) == nil)
        #expect(first.errors == [])
    }

    @Test("the root identity is stored once")
    func recordRoot() throws {
        let h = Harness()
        let id = FileIdentity(device: 1, inode: 2)
        try h.engine.recordRoot(id)
        try h.engine.recordRoot(id)
        #expect(h.store.batches == [[.setRoot(id)]])
        #expect(try h.store.load().root == id)
        let other = FileIdentity(device: 1, inode: 3)
        try h.engine.recordRoot(other)
        #expect(h.store.batches.last == [.setRoot(other)])
    }
}

extension [UInt8] {
    fileprivate func ends(with suffix: String) -> Bool {
        let s = Array(suffix.utf8)
        return count >= s.count && Array(self[(count - s.count)...]) == s
    }
}
