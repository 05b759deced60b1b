import Dispatch
import Glibc
import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// The engine and the manager need nothing of a mirror beyond `MirrorProviding`: a
/// batch-level mirror of the test's own sees every change as one of its calls.
@Suite("MirrorProviding")
struct MirrorSeamTests {
    /// Limits of a mirror whose names ignore ASCII case.
    static let folding: MirrorLimits = {
        var limits = MirrorLimits()
        limits.foldsCase = true
        return limits
    }()

    /// A call the seam received.
    enum Call: Equatable {
        case install([RelativePath])
        case beginInstall([RelativePath])
        case commit
        case finish
        case makeDirectory(RelativePath)
        case makeDirectories([RelativePath])
        case makeSymlinks([RelativePath])
        case statEach([RelativePath])
        case setAttributesAll([RelativePath])
        case makeSymlink(RelativePath)
        case remove(RelativePath)
        case rename(RelativePath, RelativePath)
        case setAttributes(RelativePath)
        case barrier
        case removeLeftover(RelativePath)
        case probe
    }

    /// A mirror known only through the upper seam: it records each call and carries it
    /// out in an in-memory tree (through `LocalMirror`, as a remote would through rsync).
    final class RecordingMirror: MirrorProviding {
        let tree = InMemoryTree(device: 2)
        let inner: LocalMirror
        let calls = Mutex<[Call]>([])
        /// Passes begun and ended, the calls made when the last one ended, and what
        /// `beginPass` throws (nil: nothing).
        struct Passes {
            var begun = 0
            var ended = 0
            var callsAtEnd = 0
            var failure: KeepSyncError?
        }
        let passes = Mutex(Passes())

        /// Group installs at once (`MirrorProviding.concurrentGroups`).
        let concurrentGroups: Int

        /// Whether it makes entries in batches (`MirrorProviding.batchesEntries`).
        let batchesEntries: Bool

        /// `MirrorProviding.groupFiles` and `firstGroupFiles`.
        let groupFiles: Int
        let firstGroupFiles: Int

        init(readDelay: Duration = .zero, concurrentGroups: Int = 2, batchesEntries: Bool = false,
             groupFiles: Int = 256, firstGroupFiles: Int? = nil, foldsCase: Bool = false) {
            inner = LocalMirror(tree)
            self.foldsCase = foldsCase
            self.groupFiles = groupFiles
            self.firstGroupFiles = firstGroupFiles ?? groupFiles
            self.readDelay = readDelay
            self.concurrentGroups = concurrentGroups
            self.batchesEntries = batchesEntries
        }

        var recorded: [Call] { calls.withLock { $0 } }
        func note(_ call: Call) { calls.withLock { $0.append(call) } }

        /// Whether names ignore ASCII case, as on exFAT: `stat`, `remove` and `rename`
        /// find an entry under any case of its name.
        let foldsCase: Bool

        /// The entry `path` names under folding: each component as stored.
        func stored(_ path: RelativePath) -> RelativePath {
            guard foldsCase else { return path }
            var out = RelativePath.root
            for component in path.components {
                let key = MirrorSeamTests.folding.caseKey(component)
                let match = (try? inner.list(out))?.first { MirrorSeamTests.folding.caseKey($0.name) == key }
                out = out.appending(match?.name ?? component)
            }
            return out
        }

        /// What `stat` of a path throws (nil: nothing), as a remote's would once its host is gone.
        let statFailure = Mutex<(@Sendable (RelativePath) -> KeepSyncError?)?>(nil)
        /// What `remove` of a path throws (nil: nothing).
        let removeFailure = Mutex<(@Sendable (RelativePath) -> KeepSyncError?)?>(nil)

        func stat(_ path: RelativePath) throws -> FileStat? {
            if let hook = statFailure.withLock({ $0 }), let error = hook(path) { throw error }
            return try inner.stat(stored(path))
        }
        func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try inner.list(directory) }
        func readLink(_ path: RelativePath) throws -> [UInt8] { try inner.readLink(path) }
        func open(_ path: RelativePath) throws -> any SourceFile { try inner.open(path) }

        func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat {
            note(.makeDirectory(path))
            return try inner.makeDirectory(path, mode: mode)
        }
        func makeDirectories(_ directories: [(path: RelativePath, mode: UInt32)]) -> [Result<FileStat, any Error>] {
            note(.makeDirectories(directories.map(\.path)))
            return directories.map { d in Result { try inner.makeDirectory(d.path, mode: d.mode) } }
        }
        func makeSymlinks(_ links: [(path: RelativePath, target: [UInt8], mtime: Timespec)]) -> [Result<FileStat, any Error>] {
            note(.makeSymlinks(links.map(\.path)))
            return links.map { l in Result { try inner.makeSymlink(l.path, target: l.target, mtime: l.mtime) } }
        }
        func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat {
            note(.makeSymlink(path))
            return try inner.makeSymlink(path, target: target, mtime: mtime)
        }
        func remove(_ path: RelativePath) throws {
            note(.remove(path))
            if let hook = removeFailure.withLock({ $0 }), let error = hook(path) { throw error }
            try inner.remove(stored(path))
        }
        func rename(_ from: RelativePath, to: RelativePath) throws {
            note(.rename(from, to))
            let target = stored(to) == stored(from) ? to : stored(to)
            try inner.rename(stored(from), to: target)
        }
        func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
            note(.setAttributes(path))
            try inner.setAttributes(path, mode: mode, mtime: mtime)
        }
        func statEach(_ paths: [RelativePath]) -> [Result<FileStat?, any Error>] {
            if batchesEntries { note(.statEach(paths)) }
            return paths.map { p in Result { try inner.stat(p) } }
        }
        func setAttributesAll(_ changes: [(path: RelativePath, mode: UInt32?, mtime: Timespec?)]) -> [Result<Void, any Error>] {
            guard batchesEntries else { return changes.map { c in Result { try setAttributes(c.path, mode: c.mode, mtime: c.mtime) } } }
            note(.setAttributesAll(changes.map(\.path)))
            return changes.map { c in Result { try inner.setAttributes(c.path, mode: c.mode, mtime: c.mtime) } }
        }
        /// While set and not signalled, installs wait here (copies stay under way).
        let installGate = Mutex<DispatchSemaphore?>(nil)
        func passGate() {
            guard let gate = installGate.withLock({ $0 }) else { return }
            gate.wait()
            gate.signal()
        }
        func install(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                     logger: Logger) -> [(path: RelativePath, result: Result<CopyResult?, any Error>)] {
            passGate()
            note(.install(paths))
            return inner.install(paths, from: source, io: io, logger: logger)
        }
        func beginInstall(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                          logger: Logger) -> any PendingInstall {
            passGate()
            note(.beginInstall(paths))
            return Pending(inner.beginInstall(paths, from: source, io: io, logger: logger), mirror: self)
        }
        func barrier() throws {
            note(.barrier)
            try inner.barrier()
        }
        func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool {
            note(.removeLeftover(path))
            return try inner.removeLeftoverTemporary(path)
        }
        func probe() throws {
            note(.probe)
            try inner.probe()
        }
        func beginPass() throws {
            let failure = passes.withLock { p in
                p.begun += 1
                return p.failure
            }
            if let failure { throw failure }
        }
        /// The trees of each `beginReads` that named any (one per round of live changes).
        let readRounds = Mutex<[Int]>([])
        /// How long a round's `beginReads` takes (a remote's round trip).
        let readDelay: Duration
        func beginReads(trees: [RelativePath], stats: [RelativePath]) throws {
            guard !trees.isEmpty else { return }
            readRounds.withLock { $0.append(trees.count) }
            // Blocks like a round trip to a remote host (the manager's thread waits).
            if readDelay > .zero { usleep(UInt32(readDelay / .microseconds(1))) }
        }
        func endPass() {
            let count = recorded.count
            passes.withLock { p in
                p.ended += 1
                p.callsAtEnd = count
            }
        }

        /// Records the steps of a group install.
        final class Pending: PendingInstall {
            let inner: any PendingInstall
            let mirror: RecordingMirror
            init(_ inner: any PendingInstall, mirror: RecordingMirror) {
                self.inner = inner
                self.mirror = mirror
            }
            func commit() {
                mirror.note(.commit)
                inner.commit()
            }
            func finish() -> [(path: RelativePath, result: Result<CopyResult?, any Error>)] {
                mirror.note(.finish)
                return inner.finish()
            }
        }
    }

    static func p(_ s: String) -> RelativePath { RelativePath(s) }
    static let files = ["a", "b", "c", "d/e", "old", "gone"].map(p)

    static func populatedSource() -> InMemoryTree {
        let source = InMemoryTree(device: 1)
        source.makeDirectory(p("d"), mode: 0o750, mtime: nil)
        for f in files { source.writeFile(f, Array("bytes of \(f.escaped)".utf8)) }
        return source
    }

    @Test("the engine's copies, renames and removals reach a mirror as batch calls of the seam")
    func engineSpeaksTheSeam() throws {
        let source = Self.populatedSource()
        let mirror = RecordingMirror()
        let store = InMemoryStore()
        let engine = SyncEngine(source: source, mirror: mirror, store: store, records: RecordSet(), options: SyncOptions())

        let first = try engine.fullPass().summary
        try #require(first.errors.isEmpty, "\(first.errors)")
        let calls = mirror.recorded
        let begun = calls.compactMap { if case .beginInstall(let paths) = $0 { paths } else { nil } }
        #expect(begun.count == 1, "one group for the whole pass: \(calls)")
        #expect(Set(begun.first ?? []) == Set(Self.files))
        #expect(!calls.contains { if case .install = $0 { true } else { false } }, "no file went on its own")
        #expect(calls.filter { $0 == .commit }.count == 1 && calls.filter { $0 == .finish }.count == 1)
        #expect(calls.firstIndex(of: .makeDirectory(Self.p("d")))! < calls.firstIndex(of: .finish)!)
        // Records follow the mirror: the last thing the engine asks before appending is a barrier.
        #expect(calls.last == .barrier)
        #expect(try store.load().table.regularFiles == Self.files.count)
        SyncEngineTests.assertTreesEqual(source, mirror.tree)

        mirror.calls.withLock { $0.removeAll() }
        try source.rename(Self.p("old"), to: Self.p("new"))
        source.delete(Self.p("gone"))
        let second = try engine.fullPass().summary
        try #require(second.errors.isEmpty, "\(second.errors)")
        let again = mirror.recorded
        #expect(second.renamed == 1 && second.copiedFiles == 0, "\(second)")
        #expect(again.contains(.rename(Self.p("old"), Self.p("new"))), "\(again)")
        #expect(again.contains(.remove(Self.p("gone"))), "\(again)")
        #expect(!again.contains { if case .install = $0 { true } else if case .beginInstall = $0 { true } else { false } })
        #expect(again.last == .barrier)
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
    }

    @Test("a full pass is bracketed by beginPass and endPass; a mirror unreadable at beginPass fails the pass, nothing changed")
    func fullPassIsBracketed() throws {
        let source = Self.populatedSource()
        let mirror = RecordingMirror()
        let store = InMemoryStore()
        let engine = SyncEngine(source: source, mirror: mirror, store: store, records: RecordSet(), options: SyncOptions())
        mirror.passes.withLock { $0.failure = KeepSyncError(.unreachable, "host unreachable: test") }
        #expect { _ = try engine.fullPass() } throws: { ($0 as? KeepSyncError)?.code == .unreachable }
        #expect(mirror.recorded.isEmpty && mirror.tree.nodes.keys.allSatisfy(\.isRoot), "the pass stopped before any change")
        #expect(try store.load().table.count == 0)
        #expect(mirror.passes.withLock { ($0.begun, $0.ended) } == (1, 0), "a pass that did not begin does not end")

        mirror.passes.withLock { $0.failure = nil }
        let summary = try engine.fullPass().summary
        try #require(summary.errors.isEmpty, "\(summary.errors)")
        let passes = mirror.passes.withLock { $0 }
        #expect(passes.begun == 2 && passes.ended == 1)
        #expect(!mirror.recorded.isEmpty && passes.callsAtEnd == mirror.recorded.count, "ended after the pass's last call")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
    }

    @Test("the manager's copies reach a mirror as install batches")
    func managerSpeaksTheSeam() async throws {
        let source = Self.populatedSource()
        let mirror = RecordingMirror()
        let store = InMemoryStore()
        let engine = SyncEngine(source: source, mirror: mirror, store: store, records: RecordSet(), options: SyncOptions())
        let manager = SyncManager(engine: engine, clock: ManualClock(), executor: .inline)
        await manager.requestFullResync()
        await manager.processDue()
        await manager.waitForCopies()

        let installs = mirror.recorded.compactMap { if case .install(let paths) = $0 { paths } else { nil } }
        #expect(installs.count == 1, "one batch: \(mirror.recorded)")
        #expect(Set(installs.joined()) == Set(Self.files))
        #expect(!mirror.recorded.contains { if case .beginInstall = $0 { true } else { false } })
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
    }

    @Test("events that come while a round waits on the mirror are taken by the next round, not one round each")
    func waitingEventsShareARound() async throws {
        let source = InMemoryTree(device: 1)
        let names = (0..<300).map { Self.p("f\($0)") }
        for name in names { source.writeFile(name, Array("bytes of \(name.escaped)".utf8)) }
        let mirror = RecordingMirror(readDelay: .milliseconds(5))
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions())
        let manager = SyncManager(engine: engine, clock: ContinuousClock(), executor: .inline)
        // All 300 wait in the stream before the manager takes any, as behind a slow round.
        let (events, feed) = AsyncStream<WatchEvent>.makeStream()
        for name in names { feed.yield(.closedAfterWrite(name)) }
        // Off the test pool (its tasks inherit the thread): in a full run blocking tests hold
        // the pool's two threads for seconds, and a consumer started there waited with them.
        let done = try await offThePool {
            let consumer = Task { await manager.consume(events) }
            let runner = Task { await manager.run() }
            let done = await eventually(timeout: .seconds(30), every: .milliseconds(10)) { mirror.tree.nodes.values.filter { $0.kind == .regular }.count == names.count }
            feed.finish()
            await manager.stop()
            await runner.value
            await consumer.value
            return done
        }
        let rounds = mirror.readRounds.withLock { $0 }
        #expect(done, "\(mirror.tree.nodes.values.filter { $0.kind == .regular }.count) of \(names.count) files mirrored")
        #expect(rounds.reduce(0, +) >= names.count && rounds.count <= 5, "\(rounds.count) rounds for \(names.count) waiting events: \(rounds.prefix(20))")
    }

    @Test("a mirror that batches directories gets each stretch's new directories, then its links, in one call each: a mode to set ends a stretch, a type change waits for the end")
    func newDirectoriesOfAStretchInOneCall() throws {
        let source = InMemoryTree(device: 1)
        for d in ["d1", "d1/s", "d2", "d4", "d5", "d6"] {
            source.makeDirectory(Self.p(d))
            source.writeFile(Self.p("\(d)/f"), Array("in \(d)".utf8))
        }
        let stamp = Timespec(seconds: 1_700_000_000, nanoseconds: 0)
        for l in ["d4/l", "d6/l"] { _ = try source.makeSymlink(Self.p(l), target: Array("f".utf8), mtime: stamp) }
        source.writeFile(Self.p("d3"), Array("same bytes".utf8), mode: 0o600, mtime: stamp)
        let mirror = RecordingMirror(batchesEntries: true)
        mirror.tree.writeFile(Self.p("d3"), Array("same bytes".utf8), mode: 0o644, mtime: stamp)
        mirror.tree.writeFile(Self.p("d5"), Array("a file where a directory goes".utf8))
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(),
                                options: SyncOptions(maxDeletePercent: 100))
        let summary = try engine.fullPass().summary
        #expect(summary.errors.isEmpty && summary.createdDirectories == 6 && summary.createdLinks == 2, "\(summary)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        let made = mirror.recorded.filter {
            switch $0 {
            case .makeDirectory, .makeDirectories, .makeSymlink, .makeSymlinks, .remove: true
            case .setAttributes(let path): path == Self.p("d3")
            default: false
            }
        }
        // d5 replaces a file: its step waits for the end of the pass, and runs alone.
        #expect(made == [.makeDirectories([Self.p("d1"), Self.p("d1/s"), Self.p("d2")]), .setAttributes(Self.p("d3")),
                         .makeDirectories([Self.p("d4"), Self.p("d6")]), .makeSymlinks([Self.p("d4/l"), Self.p("d6/l")]),
                         .remove(Self.p("d5")), .makeDirectory(Self.p("d5"))],
                "\(made)")
    }

    @Test("on a mirror that batches, the finishes of a stretch's empty directories are one stat call and one attribute call")
    func finishesOfAStretchTogether() throws {
        let source = InMemoryTree(device: 1)
        let names = (0..<20).map { Self.p("d/empty\($0)") }
        source.makeDirectory(Self.p("d"))
        for name in names { source.makeDirectory(name, mtime: Timespec(seconds: 1_600_000_000, nanoseconds: 0)) }
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions())
        let summary = try engine.fullPass().summary
        #expect(summary.errors.isEmpty && summary.createdDirectories == 21, "\(summary)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        let stats = mirror.recorded.compactMap { if case .statEach(let p) = $0 { p } else { nil } }
        let attributes = mirror.recorded.compactMap { if case .setAttributesAll(let p) = $0 { p } else { nil } }
        #expect(stats.contains { Set(names).isSubset(of: $0) }, "\(stats)")
        #expect(attributes.contains { Set(names).isSubset(of: $0) }, "\(attributes)")
    }

    @Test("a pass keeps up to the mirror's concurrentGroups group installs under way: one committed before the first finishes with two, three with four")
    func passGroupsUpToConcurrentGroups() throws {
        func commitsBeforeFirstFinish(_ groups: Int) throws -> (commits: Int, groups: Int) {
            let source = InMemoryTree(device: 1)
            for i in 0..<1000 { source.writeFile(Self.p(String(format: "f%04d", i)), Array("bytes \(i)".utf8)) }
            let mirror = RecordingMirror(concurrentGroups: groups)
            let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions())
            let summary = try engine.fullPass().summary
            #expect(summary.copiedFiles == 1000 && summary.errors.isEmpty, "\(summary)")
            SyncEngineTests.assertTreesEqual(source, mirror.tree)
            let calls = mirror.recorded
            let firstFinish = try #require(calls.firstIndex(of: .finish))
            let begun = calls.filter { if case .beginInstall = $0 { true } else { false } }.count
            return (calls[..<firstFinish].filter { $0 == .commit }.count, begun)
        }
        let two = try commitsBeforeFirstFinish(2), four = try commitsBeforeFirstFinish(4)
        #expect(two.groups == 4 && four.groups == 4, "1000 files in groups of 256: \(two.groups), \(four.groups)")
        #expect(two.commits == 1, "with two at once, \(two.commits) groups committed before the first finished")
        #expect(four.commits == 3, "with four at once, \(four.commits) groups committed before the first finished")
    }

    @Test("a pass's groups start at the mirror's firstGroupFiles and double up to its groupFiles: 60 files in 4, 8, 16, 16, 16")
    func passGroupsGrowFromTheFirst() throws {
        let source = InMemoryTree(device: 1)
        for i in 0..<60 { source.writeFile(Self.p(String(format: "f%02d", i)), Array("bytes \(i)".utf8)) }
        let mirror = RecordingMirror(concurrentGroups: 4, groupFiles: 16, firstGroupFiles: 4)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions())
        let summary = try engine.fullPass().summary
        #expect(summary.copiedFiles == 60 && summary.errors.isEmpty, "\(summary)")
        let groups = mirror.recorded.compactMap { if case .beginInstall(let paths) = $0 { paths.count } else { nil } }
        #expect(groups == [4, 8, 16, 16, 16], "group sizes: \(groups)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        // The next pass starts small again.
        for i in 0..<6 { source.writeFile(Self.p(String(format: "g%02d", i)), Array("more \(i)".utf8)) }
        let before = mirror.recorded.count
        _ = try engine.fullPass()
        let next = mirror.recorded[before...].compactMap { if case .beginInstall(let paths) = $0 { paths.count } else { nil } }
        #expect(next == [4, 2], "group sizes of the second pass: \(next)")
    }

    @Test("a pass appends records in batches of two of the mirror's groups (at least 1,024): each append waits on a mirror barrier")
    func recordAppendsFollowTheGroupSize() throws {
        func appends(groupFiles: Int) throws -> [Int] {
            let source = InMemoryTree(device: 1)
            for i in 0..<3000 { source.writeFile(Self.p(String(format: "f%04d", i)), Array("bytes \(i)".utf8)) }
            let mirror = RecordingMirror(concurrentGroups: 4, groupFiles: groupFiles)
            let store = InMemoryStore()
            let engine = SyncEngine(source: source, mirror: mirror, store: store, records: RecordSet(), options: SyncOptions())
            let summary = try engine.fullPass().summary
            #expect(summary.copiedFiles == 3000 && summary.errors.isEmpty, "\(summary)")
            #expect(try store.load().table.count == 3001)
            return store.batches.map(\.count)
        }
        let local = try appends(groupFiles: 256), remote = try appends(groupFiles: 2048)
        #expect(local.count == 3 && local.allSatisfy { $0 <= 1024 }, "appends of 256-file groups: \(local)")
        #expect(remote == [3001], "appends of 2,048-file groups: \(remote)")
    }

    @Test("on a batching mirror a pass walks chunks growing from 256 steps to 8,192: 3,000 new directories in a few calls, the first small")
    func walkChunksGrowOnABatchingMirror() throws {
        let source = InMemoryTree(device: 1)
        for i in 0..<3000 { source.makeDirectory(Self.p(String(format: "d%04d", i))) }
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions())
        let summary = try engine.fullPass().summary
        #expect(summary.createdDirectories == 3000 && summary.errors.isEmpty, "\(summary)")
        let calls = mirror.recorded.compactMap { if case .makeDirectories(let paths) = $0 { paths.count } else { nil } }
        #expect(calls.reduce(0, +) == 3000)
        // A step to make each, one to finish it: 128 in the first chunk of 256 steps.
        #expect(calls.first == 128 && calls.count <= 6, "directories per call: \(calls)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
    }

    @Test("on a batching mirror the directories whose groups landed are finished at the end of the stretch, together: 2,000 files in 32 groups, a few attribute calls")
    func landedFinishesWaitForTheStretch() throws {
        let source = InMemoryTree(device: 1)
        for d in 0..<40 {
            source.makeDirectory(Self.p("d\(d)"))
            for f in 0..<50 { source.writeFile(Self.p("d\(d)/f\(f)"), Array("bytes \(d)/\(f)".utf8)) }
        }
        let mirror = RecordingMirror(concurrentGroups: 4, batchesEntries: true, groupFiles: 64)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions())
        let summary = try engine.fullPass().summary
        #expect(summary.copiedFiles == 2000 && summary.errors.isEmpty, "\(summary)")
        let calls = mirror.recorded
        let groups = calls.filter { if case .beginInstall = $0 { true } else { false } }.count
        let attributeCalls = calls.filter { if case .setAttributesAll = $0 { true } else { false } }.count
        #expect(groups >= 32, "\(groups) groups")
        // One per walk chunk (2,081 steps: 256, 512, 1,024, 289) and one per group still
        // under way when the walk ended (three), not one per group.
        #expect(attributeCalls <= 7, "\(attributeCalls) attribute calls for \(groups) groups")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
    }

    @Test("a round's copies are shared evenly among the mirror's free group slots: 300 files, four slots, four groups of 75")
    func roundCopiesShareTheGroupSlots() async throws {
        let source = InMemoryTree(device: 1)
        let names = (0..<300).map { Self.p(String(format: "f%03d", $0)) }
        for name in names { source.writeFile(name, Array("bytes of \(name.escaped)".utf8)) }
        let mirror = RecordingMirror(concurrentGroups: 4)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .dispatch(limit: 4))
        for name in names { await manager.receive(.closedAfterWrite(name)) }
        await manager.processDue()
        await manager.waitForCopies()
        let groups = mirror.recorded.compactMap { if case .install(let paths) = $0 { paths.count } else { nil } }
        #expect(groups == [75, 75, 75, 75], "group sizes: \(groups)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("on a batching mirror a round's new directories are made in one call: 150 new directories of a burst, not a call each")
    func roundMakesItsDirectoriesInOneCall() async throws {
        let source = InMemoryTree(device: 1)
        source.makeDirectory(Self.p("old"))
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .dispatch(limit: 4))
        var events: [WatchEvent] = []
        for d in 0..<150 {
            let dir = Self.p(String(format: "new%03d", d))
            source.makeDirectory(dir)
            events.append(.changed(dir))
            for f in 0..<5 {
                let file = dir.appending(Array("f\(f)".utf8))
                source.writeFile(file, Array("bytes \(d)/\(f)".utf8))
                events.append(.closedAfterWrite(file))
            }
        }
        source.writeFile(Self.p("old/file"), Array("old".utf8))
        events.append(.closedAfterWrite(Self.p("old/file")))
        let before = mirror.recorded.count
        for event in events { await manager.receive(event) }
        await manager.processDue()
        await manager.waitForCopies()
        let round = mirror.recorded.dropFirst(before)
        let single = round.filter { if case .makeDirectory = $0 { true } else { false } }.count
        let batches = round.compactMap { if case .makeDirectories(let paths) = $0 { paths.count } else { nil } }
        #expect(single == 0 && batches == [150], "one-by-one: \(single), batches: \(batches)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("a round finishes the directories of all its scans with one stat and one attribute call: six directories whose mtime changed, one scope each")
    func roundFinishesItsDirectoriesInOneCall() async throws {
        let source = InMemoryTree(device: 1)
        let dirs = (0..<6).map { Self.p("d\($0)") }
        for d in dirs {
            source.makeDirectory(d)
            source.writeFile(d.appending(Array("f".utf8)), Array("f".utf8))
        }
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .dispatch(limit: 4))
        let before = mirror.recorded.count
        for (i, d) in dirs.enumerated() {
            source.modify(d) { $0.mtime = Timespec(seconds: 1_700_000_000 + Int64(i), nanoseconds: 5) }
            await manager.receive(.changed(d))
        }
        if let next = await manager.nextDeadline() { clock.advance(by: clock.now.duration(to: next)) }
        await manager.processDue()
        await manager.waitForCopies()
        let round = mirror.recorded.dropFirst(before)
        let stats = round.compactMap { if case .statEach(let paths) = $0 { paths.count } else { nil } }
        let sets = round.compactMap { if case .setAttributesAll(let paths) = $0 { paths.count } else { nil } }
        let single = round.filter { if case .setAttributes = $0 { true } else { false } }.count
        // Then their parent, the root, once the round's copies are done (none here).
        #expect(stats == [6, 1] && sets == [6, 1] && single == 0, "stats \(stats), attribute calls \(sets), one by one \(single)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("a directory the round's scan fixed again after a rename out of it is not finished a second time at the round's end")
    func roundSkipsFinishesTheCloseRedid() async throws {
        let source = InMemoryTree(device: 1)
        for d in ["p", "p/a", "p/c", "q"] { source.makeDirectory(Self.p(d)) }
        source.writeFile(Self.p("p/a/x"), Array("x".utf8))
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .dispatch(limit: 4))
        // `p/a` changes its mtime and loses `x` to `p/c`: one scope `p`; `q` is the second.
        try source.rename(Self.p("p/a/x"), to: Self.p("p/c/x"))
        source.modify(Self.p("q")) { $0.mode = 0o700 }
        let before = mirror.recorded.count
        for event in [WatchEvent.changed(Self.p("p")), .changed(Self.p("q"))] { await manager.receive(event) }
        if let next = await manager.nextDeadline() { clock.advance(by: clock.now.duration(to: next)) }
        await manager.processDue()
        await manager.waitForCopies()
        let round = mirror.recorded.dropFirst(before)
        let renames = round.filter { if case .rename = $0 { true } else { false } }.count
        let stats = round.compactMap { if case .statEach(let paths) = $0 { paths } else { nil } }.joined()
        #expect(renames == 1, "the move was not a rename: \(Array(round))")
        #expect(!stats.contains(Self.p("p/a")), "finished again: \(Array(stats))")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("a round applies its scans once they hold 8,192 steps: three new directories of 5,000 files, the first two made together, the third alone")
    func roundScansAreAppliedInBoundedBatches() async throws {
        let source = InMemoryTree(device: 1)
        let mirror = RecordingMirror(batchesEntries: true, groupFiles: 2048)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        let manager = SyncManager(engine: engine, clock: ManualClock(), executor: .dispatch(limit: 4))
        for d in 0..<3 {
            let dir = Self.p("big\(d)")
            source.makeDirectory(dir)
            for f in 0..<5000 { source.writeFile(dir.appending(Array("f\(f)".utf8)), Array("\(d)/\(f)".utf8)) }
            // A file's event: due at once, its scope the new directory (the mirror lacks it).
            await manager.receive(.closedAfterWrite(dir.appending(Array("f0".utf8))))
        }
        let before = mirror.recorded.count
        await manager.processDue()
        await manager.waitForCopies()
        let round = mirror.recorded.dropFirst(before)
        let single = round.compactMap { if case .makeDirectory(let path) = $0 { path } else { nil } }
        let batches = round.compactMap { if case .makeDirectories(let paths) = $0 { paths } else { nil } }
        #expect(batches == [[Self.p("big0"), Self.p("big1")]] && single == [Self.p("big2")], "batches: \(batches), one-by-one: \(single)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("due paths below one missing directory are one scope, scanned once: a new tree's files and subdirectories in one round")
    func pathsBelowOneNewDirectoryAreOneScope() async throws {
        let source = InMemoryTree(device: 1)
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        let manager = SyncManager(engine: engine, clock: ManualClock(), executor: .dispatch(limit: 4))
        source.makeDirectory(Self.p("top"))
        for sub in ["a", "b", "c"] {
            source.makeDirectory(Self.p("top/\(sub)"))
            source.writeFile(Self.p("top/\(sub)/f"), Array(sub.utf8))
            // Events for the files only: each names a path whose parents the mirror lacks.
            await manager.receive(.closedAfterWrite(Self.p("top/\(sub)/f")))
        }
        let before = mirror.recorded.count
        await manager.processDue()
        await manager.waitForCopies()
        let round = Array(mirror.recorded.dropFirst(before))
        let made = round.flatMap { call -> [RelativePath] in
            switch call {
            case .makeDirectory(let path): [path]
            case .makeDirectories(let paths): paths
            default: []
            }
        }
        #expect(made == [Self.p("top"), Self.p("top/a"), Self.p("top/b"), Self.p("top/c")], "made: \(made)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("on a mirror that folds case both names of a case-only rename due in one round: the rename is applied before the old name is looked at, which then removes nothing")
    func caseOnlyRenameInOneRoundOnAFoldingMirror() async throws {
        let source = InMemoryTree(device: 1)
        source.writeFile(Self.p("photo.jpg"), Array("pixels".utf8))
        let mirror = RecordingMirror(foldsCase: true)
        var records = RecordSet()
        records.mirror = MirrorRoot(identity: FileIdentity(device: 2, inode: 1), fileSystem: [], limits: Self.folding)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: records, options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        try source.rename(Self.p("photo.jpg"), to: Self.p("Photo.JPG"))
        let manager = SyncManager(engine: engine, clock: ManualClock(), executor: .dispatch(limit: 4))
        // Not a live rename (say the old name was still settling): both names come due.
        await manager.receive(.closedAfterWrite(Self.p("Photo.JPG")))
        await manager.receive(.closedAfterWrite(Self.p("photo.jpg")))
        let before = mirror.recorded.count
        await manager.processDue()
        await manager.waitForCopies()
        let round = Array(mirror.recorded.dropFirst(before))
        #expect(round.first == .rename(Self.p("photo.jpg"), Self.p("Photo.JPG")), "\(round)")
        // On a real mirror that folds case, removing `photo.jpg` after the rename removes `Photo.JPG`.
        #expect(!round.contains { if case .remove = $0 { true } else { false } }, "\(round)")
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    /// From now on a `stat` of `path` (`removing`: its `remove`) fails as it would once
    /// the mirror's host is gone.
    static func loseHost(_ mirror: RecordingMirror, at path: RelativePath, removing: Bool = false) {
        let hook: @Sendable (RelativePath) -> KeepSyncError? = { p in
            p == path ? KeepSyncError(.unreachable, "mirror.example: unreachable", path: p) : nil
        }
        if removing { mirror.removeFailure.withLock { $0 = hook } } else { mirror.statFailure.withLock { $0 = hook } }
    }

    /// Brings the host back, then runs the manager's next `rounds` deadlines and their copies.
    static func hostBack(_ mirror: RecordingMirror, _ manager: SyncManager<ManualClock>, _ clock: ManualClock, rounds: Int) async {
        mirror.statFailure.withLock { $0 = nil }
        mirror.removeFailure.withLock { $0 = nil }
        for _ in 0..<rounds {
            guard let next = await manager.nextDeadline() else { break }
            clock.advance(by: clock.now.duration(to: next))
            await manager.processDue()
            await manager.waitForCopies()
        }
    }

    @Test("the host lost in the middle of a round: the scopes scanned before are not applied to it, they wait with the rest and land once it is back",
          .timeLimit(.minutes(1)))
    func hostLostMidRound() async throws {
        let source = InMemoryTree(device: 1)
        for d in ["a", "b", "c"] { source.makeDirectory(Self.p(d)) }
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .dispatch(limit: 4))
        for d in ["a", "b", "c"] { source.writeFile(Self.p("\(d)/new"), Array(d.utf8)) }
        // Gone when the round looks at `b/new`, after it scanned `a/new`.
        Self.loseHost(mirror, at: Self.p("b/new"))
        for d in ["a", "b", "c"] { await manager.receive(.closedAfterWrite(Self.p("\(d)/new"))) }
        let before = mirror.recorded.count
        await manager.processDue()
        await manager.waitForCopies()
        // Calls with nothing in them ask the host nothing.
        let round = mirror.recorded.dropFirst(before).filter { call in
            switch call {
            case .statEach(let paths), .setAttributesAll(let paths): !paths.isEmpty
            default: true
            }
        }
        #expect(await manager.snapshot().unreachable != nil)
        #expect(round.isEmpty, "written to a host already lost: \(round)")
        #expect(await manager.snapshot().pending == 3)
        await Self.hostBack(mirror, manager, clock, rounds: 3)
        #expect(await manager.snapshot().unreachable == nil)
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    /// Lost at `b/new`: after the round scanned `a`, held with its live removal. Lost at
    /// `a`: while scanning it. With only the removal due, lost while scanning `a/big`, or
    /// while removing it. Each time the live removal waits as one, and the full pass on
    /// the host's return must not hold it (it did, and warned, before).
    @Test("the host lost in the middle of a round keeps the live removals: a directory removed live is not held by the brake once the host is back",
          .timeLimit(.minutes(1)), arguments: ["b/new", "a", "a/big", "remove a/big"])
    func hostLostMidRoundKeepsLiveRemovals(lostAt: String) async throws {
        let removing = lostAt.hasPrefix("remove ")
        let lost = Self.p(removing ? String(lostAt.dropFirst(7)) : lostAt)
        let source = InMemoryTree(device: 1)
        for d in ["a", "a/big", "b"] { source.makeDirectory(Self.p(d)) }
        for f in 0..<20 { source.writeFile(Self.p("a/big/f\(f)"), Array("\(f)".utf8)) }
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        _ = try engine.fullPass()
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .dispatch(limit: 4))
        // `rm -r a/big` seen live (most of the mirror: the brake holds it when not seen
        // live), and a change that makes `a` a scope covering it, all due in one round.
        source.delete(Self.p("a/big"))
        source.writeFile(Self.p("a/new"), Array("new".utf8))
        source.writeFile(Self.p("b/new"), Array("new".utf8))
        let events = lost == Self.p("a/big") ? [WatchEvent.removed(lost)]
            : [WatchEvent.removed(Self.p("a/big")), .changed(Self.p("a")), .changed(Self.p("b/new"))]
        for event in events { await manager.receive(event) }
        Self.loseHost(mirror, at: lost, removing: removing)
        if let next = await manager.nextDeadline() { clock.advance(by: clock.now.duration(to: next)) }
        await manager.processDue()
        #expect(await manager.snapshot().unreachable != nil)
        #expect(mirror.tree.nodes[Self.p("a/big")] != nil, "applied to a lost host")
        await Self.hostBack(mirror, manager, clock, rounds: 6)
        #expect(await manager.snapshot().unreachable == nil)
        #expect(await manager.snapshot().heldDeletes == 0)
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("a directory whose files are still being copied waits for them without asking the mirror, then is read once")
    func directoryWaitsForItsCopiesWithoutReads() async throws {
        let source = InMemoryTree(device: 1)
        source.makeDirectory(Self.p("d"))
        let names = (0..<8).map { Self.p("d/f\($0)") }
        for name in names { source.writeFile(name, Array("bytes of \(name.escaped)".utf8)) }
        let mirror = RecordingMirror()
        _ = try mirror.inner.makeDirectory(Self.p("d"), mode: 0o755)
        let gate = DispatchSemaphore(value: 0)
        mirror.installGate.withLock { $0 = gate }
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .dispatch(limit: 2))
        for name in names { await manager.receive(.closedAfterWrite(name)) }
        await manager.processDue()
        let copying = await manager.copies.runningCount
        await manager.receive(.changed(Self.p("d")))
        let before = mirror.readRounds.withLock { $0.count }
        for _ in 0..<3 {
            clock.advance(by: .milliseconds(50))
            await manager.processDue()
        }
        let whileCopying = mirror.readRounds.withLock { $0.count } - before
        gate.signal()
        await manager.waitForCopies()
        clock.advance(by: .milliseconds(50))
        await manager.processDue()
        let after = mirror.readRounds.withLock { $0.count } - before
        #expect(copying > 0, "no copy was under way")
        #expect(whileCopying == 0, "\(whileCopying) reads of d while its copies ran")
        #expect(after == 1, "\(after) reads of d after its copies ended")
        await manager.waitForCopies()
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        await manager.stop()
    }

    @Test("waitForCopies returns however its wait meets the copies' ends: 100 rounds of two gated groups released just before the wait",
          .timeLimit(.minutes(1)))
    func waitForCopiesNeverMissesTheEnd() async throws {
        var rounds = 0
        for round in 0..<100 {
            let source = InMemoryTree(device: 1)
            let names = (0..<8).map { Self.p("f\(round)-\($0)") }
            for name in names { source.writeFile(name, Array("bytes of \(name.escaped)".utf8)) }
            let mirror = RecordingMirror()
            let gate = DispatchSemaphore(value: 0)
            mirror.installGate.withLock { $0 = gate }
            let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions(), recordScheduler: .serialQueue())
            let manager = SyncManager(engine: engine, clock: ManualClock(), executor: .dispatch(limit: 2))
            for name in names { await manager.receive(.closedAfterWrite(name)) }
            await manager.processDue()
            #expect(await !manager.copies.nothingRunning, "no copy under way")
            // The groups end while the wait is on its way to the manager.
            gate.signal()
            await manager.waitForCopies()
            #expect(await manager.copies.nothingRunning)
            await manager.stop()
            rounds += 1
        }
        #expect(rounds == 100)
    }

    @Test("new directories of a live round with files in them are finished once their copies landed: one stat call and one attribute call for all, none before")
    func newDirectoriesFinishedTogetherAfterTheirCopies() async throws {
        let source = InMemoryTree(device: 1)
        let directories = (0..<5).map { Self.p("n\($0)") }
        for d in directories {
            source.makeDirectory(d)
            for f in 0..<3 { source.writeFile(d.appending(Array("f\(f)".utf8)), Array("bytes of \(d.escaped)/\(f)".utf8)) }
        }
        let mirror = RecordingMirror(batchesEntries: true)
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(), options: SyncOptions())
        let clock = ManualClock()
        let manager = SyncManager(engine: engine, clock: clock, executor: .inline)
        for d in directories { await manager.receive(.changed(d)) }
        clock.advance(by: .milliseconds(50))
        await manager.processDue()
        await manager.waitForCopies()
        let calls = mirror.recorded
        let touching: (Call) -> [RelativePath] = { call in
            switch call {
            case .statEach(let paths), .setAttributesAll(let paths): return paths.filter(directories.contains)
            case .setAttributes(let path): return directories.contains(path) ? [path] : []
            default: return []
            }
        }
        let finishing = calls.filter { !touching($0).isEmpty }
        #expect(finishing.count == 2, "calls finishing the new directories: \(finishing)")
        if finishing.count == 2 {
            #expect(Set(touching(finishing[0])) == Set(directories) && Set(touching(finishing[1])) == Set(directories))
            let lastInstall = calls.lastIndex { if case .install = $0 { true } else { false } } ?? calls.endIndex
            #expect(calls.firstIndex(of: finishing[0])! > lastInstall, "a finish came before the copies into the directories")
        }
        SyncEngineTests.assertTreesEqual(source, mirror.tree)
        #expect(await manager.simulationRecords().table[directories[0]] != nil, "no record of a finished directory")
        await manager.stop()
    }
}
