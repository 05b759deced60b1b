import Dispatch
import Glibc
import KeepSyncCore
import KeepSyncLinux
import KeepSyncTestSupport
import Synchronization
import Testing

/// The live pipeline in-process, as `keepsync run` wires it: a real `InotifyWatcher` on a
/// temp source feeding a `SyncManager` over `SyncEngine`, `PosixFileSystem`,
/// `AtomicFileAccessor` and `JournalBookmarkStore`, with Dispatch copies. Every test
/// changes the source while the manager runs, waits (deadline poll) until the mirror
/// equals the source byte for byte, and checks what was copied.
/// Serialized: the burst test fills the inotify queue on purpose.
@Suite("Live mirroring (SyncManager + InotifyWatcher)", .serialized, .offThePool)
struct LiveMirrorTests {
    // MARK: Cases

    @Test("mkdir -p a/b/c and 200 files written there at once: all are mirrored")
    func newDirectoryChainIsMirrored() async throws {
        try await withLiveAgent { live in
            try LiveFS.makeDirectories(live.source, "a/b/c")
            for i in 0..<200 {
                try LiveFS.writeFile(live.source + Array("/a/b/c/file-\(i)".utf8), Array("content of file \(i)\n".utf8))
            }
            try await live.expectConverges("200 files in a new a/b/c")
        }
    }

    @Test("50,000 files created in a burst (inotify queue overflow) all reach the mirror")
    func burstOfFiftyThousandFilesConverges() async throws {
        // The 50 directories are made and watched first. Then the watcher thread is held
        // at its next read while the 50,000 files are written, so that the kernel queue
        // (fs.inotify.max_queued_events) really overflows on any machine: the overflow
        // rescan is what must bring the files. One file in 25 has content, the rest are
        // empty (unlinking 100,000 files with data blocks takes minutes on this disk).
        let gate = WatcherGate()
        try await withLiveAgent(logLevel: .info, hold: gate) { live in
            let source = live.source
            for d in 0..<50 { try LiveFS.mkdir(source + Array("/d\(d)".utf8), mode: 0o755) }
            try await live.expectConverges("50 empty directories")
            let watched = await eventually(timeout: .seconds(10)) { live.watcher.watchedDirectories == 51 }
            try #require(watched, "the watcher watches \(live.watcher.watchedDirectories) directories, not 51")
            gate.arm()
            try LiveFS.writeFile(source + Array("/trigger".utf8), [])
            let held = await eventually(timeout: .seconds(10)) { gate.isHolding }
            try #require(held, "the watcher thread never read the trigger event")

            let clock = ContinuousClock()
            let start = clock.now
            do {
                defer { gate.open() }
                try await LiveFS.offPool {
                    for d in 0..<50 {
                        let dir = source + Array("/d\(d)".utf8)
                        for f in 0..<1000 {
                            let content: [UInt8] = f % 25 == 0 ? Array("d\(d) f\(f)\n".utf8) : []
                            try LiveFS.writeFile(dir + Array("/f\(f)".utf8), content)
                        }
                    }
                }
            }
            let written = clock.now
            let outcome = try await live.waitForConvergence(timeout: .seconds(150))
            let overflowed = live.logLines.contains { $0.contains("overflow") }
            print("LiveMirrorTests: 50,000 files written in \(written - start); mirror converged \(outcome.elapsed) after the last write (\(clock.now - start) in all, directory mtimes included); inotify overflow seen: \(overflowed); copied \(await live.manager.snapshot().copiedFiles) files")
            #expect(overflowed, "the burst did not overflow the inotify queue; the overflow path was not exercised")
            live.expect(outcome, "50,000-file burst")
        }
    }

    @Test("a synced 64 MiB file renamed in the source is renamed in the mirror, not copied again")
    func renamedLargeFileKeepsItsMirrorInode() async throws {
        let size = 64 << 20
        try await withLiveAgent(prepare: { source in
            try LiveFS.writeLargeFile(source + Array("/big.bin".utf8), size: size, seed: 7)
        }) { live in
            try await live.expectConverges("initial sync of a 64 MiB file")
            let before = await live.manager.snapshot()
            #expect(before.copiedBytes >= UInt64(size), "the initial sync copied \(before.copiedBytes) bytes")
            let inodeBefore = try #require(LiveFS.lstat(live.mirror + Array("/big.bin".utf8)), "big.bin not in the mirror").st_ino

            try LiveFS.rename(live.source + Array("/big.bin".utf8), live.source + Array("/renamed.bin".utf8))
            try await live.expectConverges("64 MiB file renamed")

            let after = await live.manager.snapshot()
            let inodeAfter = try #require(LiveFS.lstat(live.mirror + Array("/renamed.bin".utf8)), "renamed.bin not in the mirror").st_ino
            #expect(inodeAfter == inodeBefore, "the mirror file was replaced (inode \(inodeBefore) -> \(inodeAfter)): copied, not renamed")
            #expect(after.copiedBytes - before.copiedBytes == 0,
                    "renaming copied \(after.copiedBytes - before.copiedBytes) bytes (\(after.copiedFiles - before.copiedFiles) files)")
        }
    }

    @Test("a synced directory of 1,000 files renamed in the source copies 0 bytes")
    func renamedDirectoryCopiesNothing() async throws {
        try await withLiveAgent(prepare: { source in
            let dir = source + Array("/photos".utf8)
            try LiveFS.mkdir(dir, mode: 0o755)
            for i in 0..<1000 {
                try LiveFS.writeFile(dir + Array("/img-\(i).jpg".utf8), Array(repeating: UInt8(truncatingIfNeeded: i), count: 100 + i))
            }
        }) { live in
            try await live.expectConverges("initial sync of 1,000 files")
            let before = await live.manager.snapshot()
            let dirInode = try #require(LiveFS.lstat(live.mirror + Array("/photos".utf8))).st_ino
            let fileInode = try #require(LiveFS.lstat(live.mirror + Array("/photos/img-500.jpg".utf8))).st_ino

            try LiveFS.rename(live.source + Array("/photos".utf8), live.source + Array("/pictures".utf8))
            try await live.expectConverges("directory of 1,000 files renamed")

            let after = await live.manager.snapshot()
            #expect(after.copiedBytes == before.copiedBytes,
                    "renaming the directory copied \(after.copiedBytes - before.copiedBytes) bytes in \(after.copiedFiles - before.copiedFiles) files")
            #expect(LiveFS.lstat(live.mirror + Array("/pictures".utf8))?.st_ino == dirInode, "the mirror directory was recreated, not renamed")
            #expect(LiveFS.lstat(live.mirror + Array("/pictures/img-500.jpg".utf8))?.st_ino == fileInode, "a mirror file was recreated")
        }
    }

    @Test("a file hard-linked under two names and written through one is updated at both names")
    func hardLinkedFileWrittenThroughOneName() async throws {
        // Hard-link structure is not mirrored: each name is an independent copy, and each
        // must follow the content. inotify reports the write only under the name used.
        try await withLiveAgent(prepare: { source in
            try LiveFS.makeDirectories(source, "x")
            try LiveFS.makeDirectories(source, "y")
            try LiveFS.writeFile(source + Array("/x/a".utf8), Array("one\n".utf8))
            try LiveFS.link(source + Array("/x/a".utf8), source + Array("/y/b".utf8))
        }) { live in
            try await live.expectConverges("initial sync of two hard links")
            try LiveFS.writeFile(live.source + Array("/x/a".utf8), Array("two, and longer\n".utf8))
            try await live.expectConverges("written through x/a", timeout: .seconds(10))
        }
    }

    @Test("a chmod, then a touch, through one name of a hard-linked file reach its other name live")
    func hardLinkedFileChangedThroughOneName() async throws {
        try await withLiveAgent(prepare: { source in
            try LiveFS.makeDirectories(source, "x")
            try LiveFS.makeDirectories(source, "y")
            try LiveFS.writeFile(source + Array("/x/a".utf8), Array("one\n".utf8))
            try LiveFS.chmod(source + Array("/x/a".utf8), 0o640)
            try LiveFS.link(source + Array("/x/a".utf8), source + Array("/y/b".utf8))
        }) { live in
            try await live.expectConverges("initial sync of two hard links")
            try LiveFS.chmod(live.source + Array("/x/a".utf8), 0o700)
            try await live.expectConverges("chmod through x/a", timeout: .seconds(5))
            try LiveFS.setTimes(live.source + Array("/x/a".utf8), seconds: 1_600_000_000, nanoseconds: 123_456_789)
            try await live.expectConverges("touch through x/a", timeout: .seconds(5))
        }
    }

    @Test("hard-linked pairs, then half written through one name while other files keep copies busy: every other name follows")
    func manyHardLinkedFilesWrittenWhileBusy() async throws {
        try await withLiveAgent(prepare: { source in
            for d in ["x", "y", "busy"] { try LiveFS.makeDirectories(source, d) }
            for i in 0..<400 {
                try LiveFS.writeFile(source + Array("/x/\(i)".utf8), Array("one \(i)\n".utf8))
                try LiveFS.link(source + Array("/x/\(i)".utf8), source + Array("/y/\(i)".utf8))
            }
        }) { live in
            try await live.expectConverges("initial sync of 400 hard-linked pairs")
            for i in stride(from: 0, to: 400, by: 2) {
                try LiveFS.writeFile(live.source + Array("/x/\(i)".utf8), Array("two, and longer \(i)\n".utf8))
                try LiveFS.writeFile(live.source + Array("/busy/\(i)".utf8), Array(repeating: UInt8(i % 251), count: 64 << 10))
            }
            try await live.expectConverges("200 written through x/", timeout: .seconds(20))
        }
    }

    @Test("a seeded random workload run against the live source converges (hard links, touch, chmod, directory renames, type flips)",
          arguments: Array(1...12) as [UInt64])
    func randomWorkloadConverges(seed: UInt64) async throws {
        try await withLiveAgent { live in
            let outside = live.root + Array("/O".utf8)
            try LiveFS.mkdir(outside, mode: 0o755)
            var workload = Workload(source: live.source, outside: outside, seed: seed)
            var log: [String] = []
            guard try await Self.run(&workload, operations: 1200, log: &log, seed: seed) else { return }
            let outcome = try await live.waitForConvergence(timeout: .seconds(60))
            Self.report(outcome, live, workload, log: log, "seed \(seed)")
        }
    }

    @Test("a seeded random workload converges when the agent is stopped in the middle, part of it lands while nobody watches, and the agent restarts",
          arguments: Array(1...4) as [UInt64])
    func randomWorkloadAcrossARestartConverges(seed: UInt64) async throws {
        let root = try ScratchDirectory.make(prefix: "keepsync-live")
        defer { try? ScratchDirectory.removeTree(root) }
        for (name, mode) in [("S", 0o755), ("M", 0o755), ("T", 0o700), ("O", 0o755)] as [(String, mode_t)] {
            try LiveFS.mkdir(root + Array("/\(name)".utf8), mode: mode)
        }
        var workload = Workload(source: root + Array("/S".utf8), outside: root + Array("/O".utf8), seed: seed)
        var log: [String] = []
        for phase in ["before the stop", "while stopped", "after the restart"] {
            if phase == "while stopped" {
                guard try await Self.run(&workload, operations: 400, log: &log, seed: seed) else { return }
                continue
            }
            let live = try await LiveAgent.start(root: root, logLevel: .warning, hold: nil)
            let ran = try await Self.run(&workload, operations: 400, log: &log, seed: seed)
            let outcome = try await live.waitForConvergence(timeout: .seconds(60))
            await live.shutdown()
            guard ran else { return }
            Self.report(outcome, live, workload, log: log, "seed \(seed), \(phase)")
        }
        #expect(workload.counts["rename directory", default: 0] + workload.counts["rename into a just-renamed directory", default: 0] > 0)
    }

    /// Runs `operations` random steps; false (with an issue recorded) when one failed.
    static func run(_ workload: inout Workload, operations: Int, log: inout [String], seed: UInt64) async throws -> Bool {
        for i in 0..<operations {
            do {
                log.append(try workload.step())
            } catch {
                Issue.record("seed \(seed): operation \(i) failed: \(error); last operations: \(log.suffix(5))")
                return false
            }
            // Pacing, not synchronisation: a pause now and then lets copies and rescans
            // be in flight while the next operations land.
            if i % 50 == 49 { try await Task.sleep(for: .milliseconds(workload.random.below(40))) }
        }
        return true
    }

    /// Records the outcome's issues, with the last operations when it failed (all of them
    /// to `$KEEPSYNC_WORKLOAD_DUMP-<what>` when that is set), and prints what the workload did.
    static func report(_ outcome: LiveAgent.Outcome, _ live: LiveAgent, _ workload: Workload, log: [String], _ what: String) {
        if !outcome.converged || !outcome.directoryTimesConverged || !outcome.errors.isEmpty || outcome.counts != nil {
            print("\(what): last operations:\n" + log.suffix(40).joined(separator: "\n"))
            if let dump = getenv("KEEPSYNC_WORKLOAD_DUMP") {
                try? LiveFS.writeFile(Array((String(cString: dump) + "-" + what.split(separator: " ").joined(separator: "_")).utf8),
                                      Array(log.joined(separator: "\n").utf8))
            }
        }
        live.expect(outcome, what)
        print("LiveMirrorTests: \(what): \(workload.counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")); converged in \(outcome.elapsed)")
    }
}

// MARK: - Races replayed deterministically

extension LiveMirrorTests {
    /// The source tree, with a one-shot hook run just before a chosen directory is listed:
    /// replays "another process changes the tree while keepsync scans it" at an exact point.
    final class RacingSource: FileSystemProviding {
        let base: PosixFileSystem
        private let hook = Mutex<(path: RelativePath, action: @Sendable () -> Void)?>(nil)

        init(rootPath: [UInt8]) throws { base = try PosixFileSystem(rootPath: rootPath) }

        /// Runs `action` once, right before `path` is next listed.
        func beforeListing(_ path: RelativePath, _ action: @escaping @Sendable () -> Void) {
            hook.withLock { $0 = (path, action) }
        }

        func stat(_ path: RelativePath) throws -> FileStat? { try base.stat(path) }
        func readLink(_ path: RelativePath) throws -> [UInt8] { try base.readLink(path) }
        func open(_ path: RelativePath) throws -> any SourceFile { try base.open(path) }
        func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
            let action = hook.withLock { h -> (@Sendable () -> Void)? in
                guard let current = h, current.path == directory else { return nil }
                h = nil
                return current.action
            }
            action?()
            return try base.list(directory)
        }
    }

    /// A manager on a manual clock with inline copies over real temp dirs and a racing
    /// source: events are delivered by hand, as the watcher would, in an exact order.
    final class Replay {
        let root: [UInt8]
        let source: [UInt8]
        let mirror: [UInt8]
        let outside: [UInt8]
        let racing: RacingSource
        let clock = ManualClock()
        let manager: SyncManager<ManualClock>

        /// Builds the source with `prepare`, then runs the initial full pass.
        init(_ prepare: ([UInt8]) throws -> Void) async throws {
            root = try ScratchDirectory.make(prefix: "keepsync-live")
            source = root + Array("/S".utf8)
            mirror = root + Array("/M".utf8)
            outside = root + Array("/O".utf8)
            let state = root + Array("/T".utf8)
            for (dir, mode) in [(source, 0o755), (mirror, 0o755), (state, 0o700), (outside, 0o755)] as [([UInt8], mode_t)] {
                try LiveFS.mkdir(dir, mode: mode)
            }
            try prepare(source)
            racing = try RacingSource(rootPath: source)
            let mirrorTree = try AtomicFileAccessor(rootPath: mirror)
            let store = try JournalBookmarkStore(directory: state)
            let engine = SyncEngine(source: racing, mirror: LocalMirror(mirrorTree), store: store, records: try store.load(), options: SyncOptions())
            manager = SyncManager(engine: engine, clock: clock, timing: .init(), executor: .inline)
        }

        deinit { try? ScratchDirectory.removeTree(root) }

        func path(_ relative: String) -> [UInt8] { source + [0x2F] + Array(relative.utf8) }

        func receive(_ events: [WatchEvent]) async {
            for event in events { await manager.receive(event) }
        }

        /// Lets time pass past every settle deadline, a few rounds.
        func settle() async {
            for _ in 0..<3 {
                clock.advance(by: .milliseconds(100))
                await manager.processDue()
                await manager.waitForCopies()
            }
        }

        /// Mirror against source, byte for byte, directory mtimes included.
        func differences() throws -> [String] {
            try LiveTree.take(source, content: true).differences(to: try LiveTree.take(mirror, content: true), directoryTimes: true)
        }
    }

    @Test("a change due with its directory is not lost when a subdirectory vanishes while the directory is scanned")
    func subdirectoryVanishingDuringAScanLosesNothing() async throws {
        // `chmod -R` on a tree (IN_ATTRIB on a and a/f, due in the same round) while another
        // process removes a/sub. The manager scans a, which covers a/f; listing a/sub fails
        // with ENOENT because a/sub just went; then the watcher reports a/sub's removal.
        let replay = try await Replay { source in
            try LiveFS.makeDirectories(source, "a/sub")
            try LiveFS.writeFile(source + Array("/a/f".utf8), Array("f\n".utf8))
            try LiveFS.writeFile(source + Array("/a/sub/x".utf8), Array("x\n".utf8))
        }
        await replay.manager.requestFullResync()
        await replay.settle()
        let initial = try replay.differences()
        try #require(initial.isEmpty, "initial sync: \(initial)")

        try LiveFS.chmod(replay.path("a/f"), 0o600)
        try LiveFS.chmod(replay.path("a"), 0o750)
        let doomed = replay.path("a/sub")
        replay.racing.beforeListing(RelativePath("a/sub")) { try? ScratchDirectory.removeTree(doomed) }
        await replay.receive([.changed(RelativePath("a")), .changed(RelativePath("a/f"))])
        replay.clock.advance(by: .milliseconds(100))
        await replay.manager.processDue()
        await replay.receive([.removed(RelativePath("a/sub/x")), .removed(RelativePath("a/sub"))])
        await replay.settle()

        let snapshot = await replay.manager.snapshot()
        #expect(snapshot.pending == 0)
        let differences = try replay.differences()
        #expect(differences.isEmpty, "the mirror never converges; lost: \(differences)")
        #expect(snapshot.errors.isEmpty, "an error stays for a scan that only met a vanished directory: \(snapshot.errors.map { "\($0.key.escaped): \($0.value)" })")
    }

    @Test("a full resync that meets a directory vanishing mid-walk still mirrors everything else")
    func fullResyncSurvivesAVanishingDirectory() async throws {
        // The startup pass, or the rescan after an inotify overflow, walks a tree that is
        // still changing: a directory listed in its parent is gone when its turn comes.
        let replay = try await Replay { source in
            for dir in ["a", "b/sub", "c"] { try LiveFS.makeDirectories(source, dir) }
            try LiveFS.writeFile(source + Array("/a/f".utf8), Array("a\n".utf8))
            try LiveFS.writeFile(source + Array("/b/sub/x".utf8), Array("x\n".utf8))
            try LiveFS.writeFile(source + Array("/c/g".utf8), Array("c\n".utf8))
        }
        let doomed = replay.path("b/sub")
        replay.racing.beforeListing(RelativePath("b/sub")) { try? ScratchDirectory.removeTree(doomed) }
        await replay.manager.requestFullResync()
        await replay.manager.processDue()
        await replay.receive([.removed(RelativePath("b/sub/x")), .removed(RelativePath("b/sub"))])
        await replay.settle()

        let snapshot = await replay.manager.snapshot()
        let differences = try replay.differences()
        #expect(differences.isEmpty, "the mirror never converges: \(differences); errors: \(snapshot.errors.map { "\($0.key.escaped): \($0.value)" })")
        #expect(snapshot.fullPasses == 1, "the full pass did not complete (`run` never reports watching after such a start)")
        #expect(snapshot.errors.isEmpty, "errors: \(snapshot.errors.map { "\($0.key.escaped): \($0.value)" })")
    }

    @Test("files moved out of a directory just before it is renamed are removed from the mirror, not held")
    func removalsPendingUnderARenamedDirectoryAreNotHeld() async throws {
        // `mv d/* ~/elsewhere && mv d e` within the settle time: the removals are queued
        // under d, then d's rename is applied in the mirror at once. The scan of e then
        // sees 12 of 13 entries gone; those deletions were seen live and must not be held.
        let replay = try await Replay { source in
            try LiveFS.mkdir(source + Array("/d".utf8), mode: 0o755)
            for i in 0..<13 { try LiveFS.writeFile(source + Array("/d/f\(i)".utf8), Array("file \(i)\n".utf8)) }
        }
        await replay.manager.requestFullResync()
        await replay.settle()
        let initial = try replay.differences()
        try #require(initial.isEmpty, "initial sync: \(initial)")

        var events: [WatchEvent] = []
        for i in 0..<12 {
            try LiveFS.rename(replay.path("d/f\(i)"), replay.outside + Array("/f\(i)".utf8))
            events.append(.removed(RelativePath("d/f\(i)")))
        }
        try LiveFS.rename(replay.path("d"), replay.path("e"))
        events.append(.moved(from: RelativePath("d"), to: RelativePath("e")))
        await replay.receive(events)
        await replay.settle()

        let snapshot = await replay.manager.snapshot()
        let differences = try replay.differences()
        #expect(differences.isEmpty, "the mirror never converges: \(differences)")
        #expect(snapshot.heldDeletes == 0, "\(snapshot.heldDeletes) live deletions held by the mass-delete brake")
    }
}

// MARK: - Harness

extension LiveMirrorTests {
    /// Runs `body` with a live agent on fresh temp dirs (source prepared by `prepare`
    /// before the agent starts); stops the agent and removes the dirs afterwards.
    func withLiveAgent(logLevel: LogLevel = .warning, hold: WatcherGate? = nil, prepare: ([UInt8]) throws -> Void = { _ in },
                       _ body: (LiveAgent) async throws -> Void) async throws {
        let root = try ScratchDirectory.make(prefix: "keepsync-live")
        defer { try? ScratchDirectory.removeTree(root) }
        try LiveFS.mkdir(root + Array("/S".utf8), mode: 0o755)
        try LiveFS.mkdir(root + Array("/M".utf8), mode: 0o755)
        try LiveFS.mkdir(root + Array("/T".utf8), mode: 0o700)
        try prepare(root + Array("/S".utf8))
        let live = try await LiveAgent.start(root: root, logLevel: logLevel, hold: hold)
        do {
            try await body(live)
        } catch {
            hold?.open()
            await live.shutdown()
            throw error
        }
        let clock = ContinuousClock()
        let t0 = clock.now
        await live.shutdown()
        let t1 = clock.now
        try? ScratchDirectory.removeTree(root)
        if clock.now - t0 > .seconds(5) { print("LiveMirrorTests: shutdown took \(t1 - t0), removing the temp dirs \(clock.now - t1)") }
    }

    /// Once armed, holds the inotify thread at its next read (its debug log line) until opened.
    final class WatcherGate: Sendable {
        private let semaphore = DispatchSemaphore(value: 0)
        private let state = Mutex<(armed: Bool, holding: Bool, opened: Bool)>((false, false, false))

        func arm() { state.withLock { $0.armed = true } }

        var isHolding: Bool { state.withLock { $0.holding } }

        func passOnce() {
            let hold = state.withLock { s -> Bool in
                guard s.armed, !s.holding, !s.opened else { return false }
                s.holding = true
                return true
            }
            if hold { semaphore.wait() }
        }

        func open() {
            let release = state.withLock { s -> Bool in
                defer { s.opened = true }
                return !s.opened && s.holding
            }
            if release { semaphore.signal() }
        }
    }

    /// Log lines captured from the manager's and the watcher's threads.
    final class LogBox: Sendable {
        let lines = Mutex<[String]>([])
    }

    final class LiveAgent {
        let root: [UInt8]
        let source: [UInt8]
        let mirror: [UInt8]
        let state: [UInt8]
        let manager: SyncManager<ContinuousClock>
        let watcher: InotifyWatcher
        let consumer: Task<Void, Never>
        let runner: Task<Void, Never>
        private let lines: LogBox

        private init(root: [UInt8], source: [UInt8], mirror: [UInt8], state: [UInt8], manager: SyncManager<ContinuousClock>,
                     watcher: InotifyWatcher, consumer: Task<Void, Never>, runner: Task<Void, Never>, lines: LogBox) {
            self.root = root
            self.source = source
            self.mirror = mirror
            self.state = state
            self.manager = manager
            self.watcher = watcher
            self.consumer = consumer
            self.runner = runner
            self.lines = lines
        }

        static func start(root: [UInt8], logLevel: LogLevel, hold: WatcherGate?) async throws -> LiveAgent {
            let source = root + Array("/S".utf8)
            let mirror = root + Array("/M".utf8)
            let state = root + Array("/T".utf8)
            let lines = LogBox()
            let logger = Logger(level: hold == nil ? logLevel : .debug) { level, message in
                if let hold, message.hasPrefix("inotify: read") { hold.passOnce() }
                if level <= logLevel { lines.lines.withLock { $0.append("\(level): \(message)") } }
            }
            let sourceTree = try PosixFileSystem(rootPath: source)
            let mirrorTree = try AtomicFileAccessor(rootPath: mirror)
            let store = try JournalBookmarkStore(directory: state)
            let records = try store.load()
            // Brake off: random workloads on small trees delete most of them between rescans
            // (an overflow rescan rightly holds that); the brake has its own tests.
            let engine = SyncEngine(source: sourceTree, mirror: LocalMirror(mirrorTree), store: store, records: records,
                                    options: SyncOptions(maxDeletePercent: 100), logger: logger, recordScheduler: .serialQueue())
            let manager = SyncManager(engine: engine, clock: ContinuousClock(),
                                      timing: .init(), executor: .dispatch(limit: 4), logger: logger)
            let watcher = InotifyWatcher(rootPath: source, logger: logger)
            let events = try watcher.start(excluding: .none)
            let consumer = Task { await manager.consume(events) }
            await manager.requestFullResync()
            let runner = Task { await manager.run() }
            return LiveAgent(root: root, source: source, mirror: mirror, state: state, manager: manager, watcher: watcher,
                             consumer: consumer, runner: runner, lines: lines)
        }

        func shutdown() async {
            watcher.stop()
            await manager.stop()
            await runner.value
            consumer.cancel()
        }

        /// What the manager logged (at the harness's level).
        var logLines: [String] { lines.lines.withLock { $0 } }

        struct Outcome {
            var converged: Bool
            var directoryTimesConverged: Bool
            var elapsed: Duration
            var differences: [String]
            var errors: [RelativePath: String]
            /// Set when status's file and byte counts disagree with what the mirror holds.
            var counts: String?
        }

        /// Snapshots the (quiet) source, then polls the mirror until it equals it (file
        /// contents, modes, mtimes, links, kinds) with nothing pending, or `timeout`.
        /// Then gives directory mtimes a short extra while to catch up.
        func waitForConvergence(timeout: Duration) async throws -> Outcome {
            let expected = try LiveTree.take(source, content: true)
            let clock = ContinuousClock()
            let start = clock.now
            var differences: [String] = []
            var converged = false
            while true {
                if let tree = try? LiveTree.take(mirror, content: false) {
                    differences = expected.differences(to: tree, directoryTimes: false)
                    if differences.isEmpty, let full = try? LiveTree.take(mirror, content: true) {
                        differences = expected.differences(to: full, directoryTimes: false)
                        if differences.isEmpty, await manager.snapshot().pending == 0 {
                            converged = true
                            break
                        }
                    }
                } else {
                    differences = ["the mirror could not be read"]
                }
                if clock.now - start > timeout { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            let elapsed = clock.now - start
            var directoryTimes = false
            if converged {
                let settle = clock.now
                while true {
                    if let tree = try? LiveTree.take(mirror, content: true) {
                        differences = expected.differences(to: tree, directoryTimes: true)
                        if differences.isEmpty, await manager.snapshot().pending == 0 {
                            directoryTimes = true
                            break
                        }
                    }
                    if clock.now - settle > .seconds(10) { break }
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            // Errors go when their paths sync or vanish; give the last copies' reports a moment.
            var errors = await manager.snapshot().errors
            let errorsStart = clock.now
            while converged, !errors.isEmpty, clock.now - errorsStart < .seconds(5) {
                try await Task.sleep(for: .milliseconds(20))
                errors = await manager.snapshot().errors
            }
            let files = expected.entries.values.filter { $0.type == S_IFREG }
            let counted = await manager.snapshot()
            var counts: String?
            if converged, counted.files != files.count || counted.bytes != UInt64(files.reduce(0) { $0 + $1.size }) {
                counts = "the records count \(counted.files) files, \(counted.bytes) bytes; the mirror holds \(files.count) files, \(files.reduce(0) { $0 + $1.size }) bytes"
            }
            return Outcome(converged: converged, directoryTimesConverged: directoryTimes, elapsed: elapsed,
                           differences: differences, errors: errors, counts: counts)
        }

        /// Records issues for an outcome that is not a full convergence.
        func expect(_ outcome: Outcome, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
            let shown = outcome.differences.prefix(25).joined(separator: "\n")
            let more = outcome.differences.count > 25 ? "\n… \(outcome.differences.count - 25) more" : ""
            let log = logLines.suffix(15).joined(separator: "\n")
            if !outcome.converged {
                Issue.record("\(what): the mirror did not converge within \(outcome.elapsed):\n\(shown)\(more)\nlog:\n\(log)",
                             sourceLocation: sourceLocation)
            } else if !outcome.directoryTimesConverged {
                Issue.record("\(what): files converged, but directories still differ 10 s later:\n\(shown)\(more)",
                             sourceLocation: sourceLocation)
            }
            if let counts = outcome.counts {
                Issue.record("\(what): \(counts)", sourceLocation: sourceLocation)
            }
            if outcome.converged && !outcome.errors.isEmpty {
                let list = outcome.errors.sorted { $0.key < $1.key }.prefix(10).map { "\($0.key.escaped): \($0.value)" }
                Issue.record("\(what): errors remain after convergence: \(list)", sourceLocation: sourceLocation)
            }
        }

        func expectConverges(_ what: String, timeout: Duration = .seconds(30),
                             sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let outcome = try await waitForConvergence(timeout: timeout)
            expect(outcome, what, sourceLocation: sourceLocation)
        }
    }
}

// MARK: - Tree snapshots

extension LiveMirrorTests {
    /// Everything below a root by relative path bytes (the root is `[]`), read with lstat.
    struct LiveTree {
        struct Entry {
            var type: mode_t
            var mode: mode_t
            var size: Int
            var mtime: timespec
            var content: [UInt8]?
            var target: [UInt8]?
        }

        var entries: [[UInt8]: Entry] = [:]

        static func take(_ root: [UInt8], content: Bool) throws -> LiveTree {
            var tree = LiveTree()
            try tree.add(root, relative: [], content: content)
            return tree
        }

        private mutating func add(_ root: [UInt8], relative: [UInt8], content: Bool) throws {
            let full = relative.isEmpty ? root : root + [0x2F] + relative
            guard let st = LiveFS.lstat(full) else { throw LiveFS.Failure(call: "lstat", path: full, code: errno) }
            let type = st.st_mode & S_IFMT
            var entry = Entry(type: type, mode: st.st_mode & 0o7777, size: Int(st.st_size), mtime: st.st_mtim)
            switch type {
            case S_IFREG:
                if content { entry.content = try LiveFS.readFile(full) }
            case S_IFLNK:
                entry.target = try LiveFS.readlink(full)
            case S_IFDIR:
                for name in try LiveFS.list(full) {
                    try add(root, relative: relative.isEmpty ? name : relative + [0x2F] + name, content: content)
                }
            default:
                break
            }
            entries[relative] = entry
        }

        /// Human-readable differences between `self` (expected) and `actual`; empty when equal.
        /// Contents are compared when both sides read them.
        func differences(to actual: LiveTree, directoryTimes: Bool) -> [String] {
            var lines: [String] = []
            let all = Set(entries.keys).union(actual.entries.keys).sorted { $0.lexicographicallyPrecedes($1) }
            for path in all {
                let name = path.isEmpty ? "." : ByteEscaping.escape(path)
                guard let e = entries[path] else { lines.append("+ \(name) (extra in the mirror)"); continue }
                guard let a = actual.entries[path] else { lines.append("- \(name) (missing in the mirror)"); continue }
                if e.type != a.type {
                    lines.append("\(name): kind \(String(e.type, radix: 8)) vs \(String(a.type, radix: 8))")
                    continue
                }
                var what: [String] = []
                switch e.type {
                case S_IFREG:
                    if e.mode != a.mode { what.append("mode \(String(e.mode, radix: 8)) vs \(String(a.mode, radix: 8))") }
                    if e.size != a.size { what.append("size \(e.size) vs \(a.size)") }
                    if e.mtime.tv_sec != a.mtime.tv_sec || e.mtime.tv_nsec != a.mtime.tv_nsec {
                        what.append("mtime \(e.mtime.tv_sec).\(e.mtime.tv_nsec) vs \(a.mtime.tv_sec).\(a.mtime.tv_nsec)")
                    }
                    if let ec = e.content, let ac = a.content, !LiveFS.sameBytes(ec, ac) { what.append("content differs") }
                case S_IFDIR:
                    if e.mode != a.mode { what.append("mode \(String(e.mode, radix: 8)) vs \(String(a.mode, radix: 8))") }
                    if directoryTimes, e.mtime.tv_sec != a.mtime.tv_sec || e.mtime.tv_nsec != a.mtime.tv_nsec {
                        what.append("directory mtime \(e.mtime.tv_sec).\(e.mtime.tv_nsec) vs \(a.mtime.tv_sec).\(a.mtime.tv_nsec)")
                    }
                case S_IFLNK:
                    if e.target != a.target {
                        what.append("link target \(ByteEscaping.escape(e.target ?? [])) vs \(ByteEscaping.escape(a.target ?? []))")
                    }
                default:
                    break
                }
                if !what.isEmpty { lines.append("\(name): " + what.joined(separator: ", ")) }
            }
            return lines
        }
    }
}

// MARK: - Random workload

extension LiveMirrorTests {
    /// Random operations on the real source tree, tracking what it holds so that every
    /// operation is valid. Names are sometimes not UTF-8.
    struct Workload {
        let source: [UInt8]
        /// A directory beside the source (same file system) for moves in and out.
        let outside: [UInt8]
        var random: SplitMix64
        var directories: [[UInt8]] = [[]]
        var files: [[UInt8]] = []
        var links: [[UInt8]] = []
        var counter = 0
        var counts: [String: Int] = [:]

        init(source: [UInt8], outside: [UInt8], seed: UInt64) {
            self.source = source
            self.outside = outside
            random = SplitMix64(seed: seed)
        }

        func absolute(_ relative: [UInt8]) -> [UInt8] { relative.isEmpty ? source : source + [0x2F] + relative }

        static func join(_ parent: [UInt8], _ name: [UInt8]) -> [UInt8] { parent.isEmpty ? name : parent + [0x2F] + name }

        static func isWithin(_ path: [UInt8], _ dir: [UInt8]) -> Bool {
            dir.isEmpty || path == dir || path.starts(with: dir + [0x2F])
        }

        mutating func newName(_ prefix: String) -> [UInt8] {
            counter += 1
            var name = Array("\(prefix)\(counter)".utf8)
            switch random.below(10) {
            case 0: name += [0xE9]          // Latin-1 é: not UTF-8
            case 1: name += [0xFF, 0xFE, 0x5C]
            case 2: name += Array(" with space".utf8)
            default: break
            }
            return name
        }

        mutating func content() -> [UInt8] {
            random.below(20) == 0 ? random.bytes(64 << 10 + random.below(4096)) : random.bytes(random.below(3000))
        }

        /// Forgets everything at or below `path`.
        mutating func forget(_ path: [UInt8]) {
            directories.removeAll { !$0.isEmpty && Self.isWithin($0, path) }
            files.removeAll { Self.isWithin($0, path) }
            links.removeAll { Self.isWithin($0, path) }
        }

        /// Moves what is tracked at or below `from` to `to`.
        mutating func rebase(_ from: [UInt8], to: [UInt8]) {
            func move(_ p: [UInt8]) -> [UInt8] { Self.isWithin(p, from) ? to + p.dropFirst(from.count) : p }
            directories = directories.map { $0.isEmpty ? $0 : move($0) }
            files = files.map(move)
            links = links.map(move)
        }

        /// Operations and their weights.
        static let operations: [(name: String, weight: Int)] = [
            ("create", 12), ("write", 9), ("append", 7), ("truncate", 4), ("rename file", 7), ("rename directory", 5),
            ("delete", 5), ("mkdir", 9), ("rm -r", 3), ("symlink", 5), ("chmod", 6), ("replace directory by file", 3),
            ("replace file by directory", 3), ("replace file by symlink", 2), ("mkdir -p and write", 6),
            ("move out", 4), ("move in", 4), ("swap two files", 3), ("write a large file", 3),
            ("hard link", 5), ("touch", 4), ("touch -h", 2), ("rename into a just-renamed directory", 4),
            ("replace symlink by file", 2), ("replace symlink by directory", 2),
        ]
        static let totalWeight = operations.reduce(0) { $0 + $1.weight }

        /// Performs one random operation and describes it.
        mutating func step() throws -> String {
            var roll = random.below(Self.totalWeight)
            var op = Self.operations[0].name
            for (name, weight) in Self.operations {
                if roll < weight { op = name; break }
                roll -= weight
            }
            let nonRootDirectories = directories.filter { !$0.isEmpty }
            let needsFile: Set = ["write", "append", "truncate", "rename file", "replace file by directory",
                                  "replace file by symlink", "swap two files", "hard link", "touch"]
            let needsDirectory: Set = ["rename directory", "rm -r", "replace directory by file",
                                       "rename into a just-renamed directory"]
            let needsLink: Set = ["touch -h", "replace symlink by file", "replace symlink by directory"]
            if needsFile.contains(op) && files.isEmpty { return try create() }
            if needsDirectory.contains(op) && nonRootDirectories.isEmpty { return try makeDirectory() }
            if needsLink.contains(op) && links.isEmpty { return try create() }
            switch op {
            case "hard link":
                // Both names are tracked as files: writes, chmods and touches through either
                // must reach the copies of both.
                let f = random.pick(files)
                let to = Self.join(random.pick(directories), newName("h"))
                try LiveFS.link(absolute(f), absolute(to))
                files.append(to)
                return note(op, f, to)
            case "touch":
                let target = random.below(4) == 0 ? random.pick(directories) : random.pick(files)
                try LiveFS.setTimes(absolute(target), seconds: 1_600_000_000 + random.below(100_000_000),
                                    nanoseconds: random.below(1_000_000_000))
                return note(op, target)
            case "touch -h":
                let l = random.pick(links)
                try LiveFS.setTimes(absolute(l), seconds: 1_600_000_000 + random.below(100_000_000), nanoseconds: random.below(1_000_000_000))
                return note(op, l)
            case "rename into a just-renamed directory":
                // The directory's new name, then at once a file and a directory moved into it
                // (events for both land while the rename is still being paired).
                let d = random.pick(nonRootDirectories)
                let to = Self.join(random.pick(directories.filter { !Self.isWithin($0, d) }), newName("rr"))
                try LiveFS.rename(absolute(d), absolute(to))
                rebase(d, to: to)
                let outsideTo = files.filter { !Self.isWithin($0, to) }
                if !outsideTo.isEmpty {
                    let f = random.pick(outsideTo)
                    let fileTo = Self.join(to, newName("ri"))
                    try LiveFS.rename(absolute(f), absolute(fileTo))
                    files = files.map { $0 == f ? fileTo : $0 }
                }
                let movable = nonRootDirectories.map { Self.isWithin($0, d) ? to + $0.dropFirst(d.count) : $0 }
                    .filter { !Self.isWithin($0, to) && !Self.isWithin(to, $0) }
                if !movable.isEmpty {
                    let sub = random.pick(movable)
                    let subTo = Self.join(to, newName("rs"))
                    try LiveFS.rename(absolute(sub), absolute(subTo))
                    rebase(sub, to: subTo)
                }
                return note(op, d, to)
            case "replace symlink by file":
                return try replace(random.pick(links), by: S_IFREG, op)
            case "replace symlink by directory":
                return try replace(random.pick(links), by: S_IFDIR, op)
            case "write":
                let f = random.pick(files)
                try LiveFS.writeFile(absolute(f), content(), truncate: true)
                return note(op, f)
            case "write a large file":
                let f = files.isEmpty || random.below(2) == 0 ? Self.join(random.pick(directories), newName("big")) : random.pick(files)
                try LiveFS.writeFile(absolute(f), random.bytes((1 << 20) + random.below(1 << 20)), truncate: true)
                if !files.contains(f) { files.append(f) }
                return note(op, f)
            case "append":
                let f = random.pick(files)
                try LiveFS.append(absolute(f), random.bytes(1 + random.below(500)))
                return note(op, f)
            case "truncate":
                let f = random.pick(files)
                let size = LiveFS.lstat(absolute(f)).map { Int($0.st_size) } ?? 0
                try LiveFS.truncate(absolute(f), random.below(size + 1000))
                return note(op, f)
            case "rename file":
                let f = random.pick(files)
                let others = files.filter { $0 != f }
                if !others.isEmpty, random.below(4) == 0 {
                    let victim = random.pick(others)
                    try LiveFS.rename(absolute(f), absolute(victim))
                    files.removeAll { $0 == f }
                    return note("rename file over another", f, victim)
                }
                let to = Self.join(random.pick(directories), newName("r"))
                try LiveFS.rename(absolute(f), absolute(to))
                files = files.map { $0 == f ? to : $0 }
                return note(op, f, to)
            case "rename directory":
                let d = random.pick(nonRootDirectories)
                let to = Self.join(random.pick(directories.filter { !Self.isWithin($0, d) }), newName("rd"))
                try LiveFS.rename(absolute(d), absolute(to))
                rebase(d, to: to)
                return note(op, d, to)
            case "delete":
                let all = files + links
                guard !all.isEmpty else { return try create() }
                let f = random.pick(all)
                try LiveFS.unlink(absolute(f))
                forget(f)
                return note(op, f)
            case "mkdir":
                return try makeDirectory()
            case "rm -r":
                let d = random.pick(nonRootDirectories)
                try ScratchDirectory.removeTree(absolute(d))
                forget(d)
                return note(op, d)
            case "symlink":
                let link = Self.join(random.pick(directories), newName("l"))
                let target: [UInt8]
                switch random.below(4) {
                case 0: target = files.isEmpty ? Array("nowhere".utf8) : random.pick(files)
                case 1: target = Array("../up/and/away".utf8)
                case 2: target = Array("/etc/passwd".utf8)
                default: target = Array("caf".utf8) + [0xE9] + Array("/x".utf8)
                }
                try LiveFS.symlink(target, at: absolute(link))
                links.append(link)
                return note(op, link)
            case "chmod":
                if random.below(2) == 0, !files.isEmpty {
                    let f = random.pick(files)
                    try LiveFS.chmod(absolute(f), random.pick([0o644, 0o600, 0o640, 0o755, 0o700, 0o664, 0o444]))
                    return note("chmod file", f)
                }
                let d = random.pick(directories)
                try LiveFS.chmod(absolute(d), random.pick([0o755, 0o750, 0o700, 0o775, 0o711]))
                return note("chmod directory", d)
            case "replace directory by file":
                return try replace(random.pick(nonRootDirectories), by: S_IFREG, op)
            case "replace file by directory":
                return try replace(random.pick(files), by: S_IFDIR, op)
            case "replace file by symlink":
                return try replace(random.pick(files), by: S_IFLNK, op)
            case "move out":
                let candidates = nonRootDirectories + files + links
                guard !candidates.isEmpty else { return try create() }
                let p = random.pick(candidates)
                try LiveFS.rename(absolute(p), outside + Array("/out\(counter)".utf8))
                counter += 1
                forget(p)
                return note(op, p)
            case "move in":
                // A small tree built outside the source, then renamed into it in one step.
                counter += 1
                let staged = outside + Array("/in\(counter)".utf8)
                try LiveFS.mkdir(staged, mode: 0o755)
                try LiveFS.mkdir(staged + Array("/sub".utf8), mode: 0o750)
                try LiveFS.writeFile(staged + Array("/a".utf8), content())
                try LiveFS.writeFile(staged + Array("/sub/b".utf8), content())
                try LiveFS.symlink(Array("a".utf8), at: staged + Array("/sub/link".utf8))
                let to = Self.join(random.pick(directories), newName("mi"))
                try LiveFS.rename(staged, absolute(to))
                directories += [to, Self.join(to, Array("sub".utf8))]
                files += [Self.join(to, Array("a".utf8)), Self.join(to, Array("sub/b".utf8))]
                links.append(Self.join(to, Array("sub/link".utf8)))
                return note(op, to)
            case "swap two files":
                let f = random.pick(files)
                let others = files.filter { $0 != f }
                guard !others.isEmpty else { return try create() }
                let g = random.pick(others)
                let parking = Self.join(random.pick(directories), newName("swap"))
                try LiveFS.rename(absolute(f), absolute(parking))
                try LiveFS.rename(absolute(g), absolute(f))
                try LiveFS.rename(absolute(parking), absolute(g))
                return note(op, f, g)
            case "mkdir -p and write":
                let a = Self.join(random.pick(directories), newName("p"))
                let b = Self.join(a, newName("q"))
                try LiveFS.mkdir(absolute(a), mode: 0o755)
                try LiveFS.mkdir(absolute(b), mode: 0o755)
                directories += [a, b]
                let f = Self.join(b, newName("f"))
                try LiveFS.writeFile(absolute(f), content())
                files.append(f)
                return note(op, f)
            default:
                return try create()
            }
        }

        /// Removes what is at `path` (a whole tree for a directory) and makes an entry of
        /// `kind` in its place.
        mutating func replace(_ path: [UInt8], by kind: mode_t, _ op: String) throws -> String {
            if LiveFS.lstat(absolute(path)).map({ $0.st_mode & S_IFMT == S_IFDIR }) == true {
                try ScratchDirectory.removeTree(absolute(path))
            } else {
                try LiveFS.unlink(absolute(path))
            }
            forget(path)
            switch kind {
            case S_IFREG:
                try LiveFS.writeFile(absolute(path), content())
                files.append(path)
            case S_IFDIR:
                try LiveFS.mkdir(absolute(path), mode: random.pick([0o755, 0o700]))
                directories.append(path)
            default:
                try LiveFS.symlink(Array("replaced".utf8), at: absolute(path))
                links.append(path)
            }
            return note(op, path)
        }

        mutating func create() throws -> String {
            let f = Self.join(random.pick(directories), newName("f"))
            try LiveFS.writeFile(absolute(f), content())
            files.append(f)
            return note("create", f)
        }

        mutating func makeDirectory() throws -> String {
            let d = Self.join(random.pick(directories), newName("d"))
            try LiveFS.mkdir(absolute(d), mode: 0o755)
            directories.append(d)
            return note("mkdir", d)
        }

        mutating func note(_ what: String, _ path: [UInt8], _ other: [UInt8]? = nil) -> String {
            counts[what, default: 0] += 1
            return "\(what) \(ByteEscaping.escape(path))" + (other.map { " -> \(ByteEscaping.escape($0))" } ?? "")
        }
    }
}

// MARK: - Byte-path file system helpers (Glibc only)

extension LiveMirrorTests {
    enum LiveFS {
        struct Failure: Error, CustomStringConvertible {
            var call: String
            var path: [UInt8]
            var code: Int32
            var description: String { "\(call)(\(ByteEscaping.escape(path))): \(String(cString: strerror(code)))" }
        }

        static func withCPath<R>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
            let c = path.map { CChar(bitPattern: $0) } + [0]
            return try c.withUnsafeBufferPointer { try body($0.baseAddress!) }
        }

        static func check(_ result: Int32, _ call: String, _ path: [UInt8]) throws {
            if result != 0 { throw Failure(call: call, path: path, code: errno) }
        }

        /// Runs blocking work on a Dispatch thread, off the cooperative pool.
        static func offPool(_ work: @escaping @Sendable () throws -> Void) async throws {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                DispatchQueue.global().async { c.resume(with: Result { try work() }) }
            }
        }

        static func mkdir(_ path: [UInt8], mode: mode_t) throws {
            try check(withCPath(path) { Glibc.mkdir($0, mode) }, "mkdir", path)
            try chmod(path, mode)
        }

        /// `mkdir -p` of `relative` below `root`.
        static func makeDirectories(_ root: [UInt8], _ relative: String) throws {
            var path = root
            for component in relative.split(separator: "/") {
                path += [0x2F] + Array(component.utf8)
                if lstat(path) == nil { try mkdir(path, mode: 0o755) }
            }
        }

        /// `touch -d`: sets the mtime (the atime too), never through a link.
        static func setTimes(_ path: [UInt8], seconds: Int, nanoseconds: Int) throws {
            var times = [timespec(tv_sec: seconds, tv_nsec: nanoseconds), timespec(tv_sec: seconds, tv_nsec: nanoseconds)]
            try check(withCPath(path) { utimensat(AT_FDCWD, $0, &times, AT_SYMLINK_NOFOLLOW) }, "utimensat", path)
        }

        static func chmod(_ path: [UInt8], _ mode: mode_t) throws {
            try check(withCPath(path) { Glibc.chmod($0, mode) }, "chmod", path)
        }

        static func writeFile(_ path: [UInt8], _ content: [UInt8], truncate: Bool = true) throws {
            let fd = withCPath(path) { open($0, O_WRONLY | O_CREAT | (truncate ? O_TRUNC : 0) | O_NOFOLLOW | O_CLOEXEC, 0o644) }
            guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
            defer { close(fd) }
            try writeAll(fd, content, path)
        }

        static func append(_ path: [UInt8], _ content: [UInt8]) throws {
            let fd = withCPath(path) { open($0, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC) }
            guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
            defer { close(fd) }
            try writeAll(fd, content, path)
        }

        static func truncate(_ path: [UInt8], _ size: Int) throws {
            try check(withCPath(path) { Glibc.truncate($0, off_t(size)) }, "truncate", path)
        }

        /// `size` bytes: 1 MiB blocks of seeded noise, each stamped with its index.
        static func writeLargeFile(_ path: [UInt8], size: Int, seed: UInt64) throws {
            var random = SplitMix64(seed: seed)
            var block = random.bytes(1 << 20)
            let fd = withCPath(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644) }
            guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
            defer { close(fd) }
            var written = 0
            var index: UInt64 = 0
            while written < size {
                withUnsafeBytes(of: index) { stamp in
                    block.withUnsafeMutableBytes { $0.copyMemory(from: stamp) }
                }
                let count = min(block.count, size - written)
                try writeAll(fd, Array(block.prefix(count)), path)
                written += count
                index += 1
            }
        }

        private static func writeAll(_ fd: Int32, _ content: [UInt8], _ path: [UInt8]) throws {
            var offset = 0
            while offset < content.count {
                let n = content.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw Failure(call: "write", path: path, code: errno)
                }
                offset += n
            }
        }

        static func readFile(_ path: [UInt8]) throws -> [UInt8] {
            let fd = withCPath(path) { open($0, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
            guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
            defer { close(fd) }
            var result: [UInt8] = []
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                let n = read(fd, buffer.baseAddress, buffer.count)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw Failure(call: "read", path: path, code: errno)
                }
                if n == 0 { return result }
                result.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[..<n]))
            }
        }

        static func sameBytes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
            guard a.count == b.count else { return false }
            return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in a.isEmpty || memcmp(pa.baseAddress!, pb.baseAddress!, a.count) == 0 } }
        }

        static func symlink(_ target: [UInt8], at path: [UInt8]) throws {
            try check(withCPath(target) { t in withCPath(path) { Glibc.symlink(t, $0) } }, "symlink", path)
        }

        static func readlink(_ path: [UInt8]) throws -> [UInt8] {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let n = withCPath(path) { Glibc.readlink($0, &buffer, buffer.count) }
            guard n >= 0 else { throw Failure(call: "readlink", path: path, code: errno) }
            return buffer[0..<n].map { UInt8(bitPattern: $0) }
        }

        static func lstat(_ path: [UInt8]) -> stat? {
            var st = stat()
            return withCPath(path) { Glibc.lstat($0, &st) } == 0 ? st : nil
        }

        static func link(_ existing: [UInt8], _ new: [UInt8]) throws {
            try check(withCPath(existing) { e in withCPath(new) { Glibc.link(e, $0) } }, "link", new)
        }

        static func rename(_ from: [UInt8], _ to: [UInt8]) throws {
            try check(withCPath(from) { f in withCPath(to) { Glibc.rename(f, $0) } }, "rename", from)
        }

        static func unlink(_ path: [UInt8]) throws {
            try check(withCPath(path) { Glibc.unlink($0) }, "unlink", path)
        }

        /// Names in a directory (bytes), without `.` and `..`.
        static func list(_ path: [UInt8]) throws -> [[UInt8]] {
            guard let dir = withCPath(path, { opendir($0) }) else { throw Failure(call: "opendir", path: path, code: errno) }
            defer { closedir(dir) }
            var names: [[UInt8]] = []
            while let entry = readdir(dir) {
                let name: [UInt8] = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
                if name == [0x2E] || name == [0x2E, 0x2E] { continue }
                names.append(name)
            }
            return names
        }

    }
}
