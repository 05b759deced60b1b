import Foundation
import Dispatch
import Glibc
import KeepSyncCore
import KeepSyncLinux
import Synchronization
import Testing
import KeepSyncTestSupport

/// Real inotify in temp dirs under /tmp. Serialized: the watch-limit test changes a
/// system-wide sysctl for a moment.
@Suite("InotifyWatcher", .serialized)
struct InotifyWatcherTests {
    // MARK: Cases

    @Test("a file created, written and closed is reported as changed and closed after write")
    func createWriteClose() async throws {
        try await withWatcher { scratch, _, events in
            try scratch.write("f")
            #expect(await events.wait { $0.contains(.changed(RelativePath("f"))) && $0.contains(.closedAfterWrite(RelativePath("f"))) })
        }
    }

    @Test("a deleted file is reported as removed")
    func delete() async throws {
        try await withWatcher(before: { try $0.write("f") }) { scratch, _, events in
            try scratch.unlink("f")
            #expect(await events.wait { $0.contains(.removed(RelativePath("f"))) })
        }
    }

    @Test("a file renamed within the tree gives exactly one move and nothing else for it")
    func renameFile() async throws {
        try await withWatcher(before: { try $0.write("a") }) { scratch, _, events in
            try Scratch.rename(scratch.absolute("a"), scratch.absolute("b"))
            #expect(await events.wait { $0.contains(.moved(from: RelativePath("a"), to: RelativePath("b"))) })
            try await events.barrier(scratch)
            let about = events.snapshot.filter { $0.mentions(RelativePath("a")) || $0.mentions(RelativePath("b")) }
            #expect(about == [.moved(from: RelativePath("a"), to: RelativePath("b"))])
        }
    }

    @Test("after a directory is renamed, a file created inside it is reported at the new path")
    func renameDirectoryRebases() async throws {
        try await withWatcher(before: { try $0.makeDirectories("d/sub") }) { scratch, _, events in
            try Scratch.rename(scratch.absolute("d"), scratch.absolute("e"))
            #expect(await events.wait { $0.contains(.moved(from: RelativePath("d"), to: RelativePath("e"))) })
            try scratch.write("e/f")
            try scratch.write("e/sub/g")
            #expect(await events.wait { $0.contains(.closedAfterWrite(RelativePath("e/f"))) && $0.contains(.closedAfterWrite(RelativePath("e/sub/g"))) })
            #expect(!events.snapshot.contains { $0.mentions(RelativePath("d/f")) || $0.mentions(RelativePath("d/sub/g")) })
        }
    }

    @Test("mkdir -p a/b/c and 200 files written there at once: every file is reported")
    func newDirectoryChainLosesNothing() async throws {
        try await withWatcher { scratch, _, events in
            try scratch.makeDirectories("a/b/c")
            let names = (0..<200).map { "a/b/c/file-\($0)" }
            for name in names { try scratch.write(name) }
            let wanted = Set(names.map { RelativePath($0) })
            let allReported = await events.wait(timeout: .seconds(10)) { seen in
                wanted.isSubset(of: Set(seen.compactMap(\.reportedPath)))
            }
            let missing = wanted.subtracting(events.snapshot.compactMap(\.reportedPath))
            #expect(allReported, "missing: \(missing.map(\.escaped).sorted().prefix(10))")
            try scratch.write("a/b/c/later")
            #expect(await events.wait { $0.contains(.closedAfterWrite(RelativePath("a/b/c/later"))) })
        }
    }

    @Test("a consumer that falls behind gets at most the event limit, then one rescan, and events again afterwards")
    func boundedStream() async throws {
        let scratch = try Scratch()
        defer { scratch.removeAll() }
        let warned = Mutex(false)
        let logger = Logger(level: .warning) { _, text in if text.contains("full rescan follows") { warned.withLock { $0 = true } } }
        let watcher = InotifyWatcher(rootPath: scratch.path, logger: logger, eventLimit: 50)
        let stream = try watcher.start(excluding: .none)
        defer { watcher.stop() }
        for i in 0..<300 { try scratch.write("f\(i)") }
        #expect(await eventually { warned.withLock { $0 } }, "the stream never filled")
        // Only now does the consumer read, on a task of its own (never a wait without a
        // deadline: a reader starved by a loaded machine fails the test, it cannot hang it).
        let seen = Mutex<[WatchEvent]>([])
        let reader = Task { for await event in stream { seen.withLock { $0.append(event) } } }
        defer { reader.cancel() }
        let rescanned = await eventually { seen.withLock { $0.contains { if case .rescan = $0 { return true }; return false } } }
        let before = seen.withLock { events in events.firstIndex { if case .rescan = $0 { return true }; return false } ?? events.count }
        #expect(rescanned && before <= 50, "\(before) events before the rescan")
        let mark = seen.withLock { $0.count }
        try scratch.write("after")
        // The write arrives as its event; or, should the stream fill up again meanwhile,
        // within a rescan that covers it.
        let arrived = await eventually {
            seen.withLock { events in
                events[min(mark, events.count)...].contains {
                    if case .rescan = $0 { return true }
                    return $0 == .closedAfterWrite(RelativePath("after"))
                }
            }
        }
        #expect(arrived, "no event for a write after the rescan")
    }

    @Test("a file moved out of the tree is reported as removed")
    func moveOut() async throws {
        let outside = try Scratch()
        defer { outside.removeAll() }
        try await withWatcher(before: { try $0.write("f") }) { scratch, _, events in
            try Scratch.rename(scratch.absolute("f"), outside.absolute("f"))
            #expect(await events.wait { $0.contains(.removed(RelativePath("f"))) })
        }
    }

    @Test("a directory moved out of the tree is removed and no longer watched")
    func moveDirectoryOut() async throws {
        let outside = try Scratch()
        defer { outside.removeAll() }
        try await withWatcher(before: { try $0.makeDirectories("d/e") }) { scratch, watcher, events in
            #expect(watcher.watchedDirectories == 3)
            try Scratch.rename(scratch.absolute("d"), outside.absolute("d"))
            #expect(await events.wait { $0.contains(.removed(RelativePath("d"))) })
            try outside.write("d/e/f")
            try await events.barrier(scratch)
            #expect(!events.snapshot.contains { $0.mentions(RelativePath("d/e/f")) })
            #expect(await eventually { watcher.watchedDirectories == 1 })
        }
    }

    @Test("a file moved in from outside is reported as changed, a directory with all its files")
    func moveIn() async throws {
        let outside = try Scratch()
        defer { outside.removeAll() }
        try outside.write("f")
        try outside.makeDirectories("d/sub")
        try outside.write("d/x")
        try outside.write("d/sub/y")
        try await withWatcher { scratch, _, events in
            try Scratch.rename(outside.absolute("f"), scratch.absolute("f"))
            try Scratch.rename(outside.absolute("d"), scratch.absolute("d"))
            #expect(await events.wait { seen in
                [RelativePath("f"), RelativePath("d"), RelativePath("d/x"), RelativePath("d/sub"), RelativePath("d/sub/y")]
                    .allSatisfy { seen.contains(.changed($0)) }
            })
            try scratch.write("d/sub/z")
            #expect(await events.wait { $0.contains(.closedAfterWrite(RelativePath("d/sub/z"))) })
        }
    }

    @Test("a name that is not UTF-8 is reported byte for byte")
    func nonUTF8Name() async throws {
        let name: [UInt8] = [0x63, 0x61, 0x66, 0xE9]
        try await withWatcher { scratch, _, events in
            try scratch.write(name)
            #expect(await events.wait { $0.contains(.closedAfterWrite(RelativePath(bytes: name))) })
            #expect(events.snapshot.contains(.changed(RelativePath(bytes: name))))
        }
    }

    @Test("an excluded file created, renamed or removed is reported as changed (its directory's mtime moved), never as a write")
    func excludedFileEntries() async throws {
        let excludes = try ExcludeMatcher(patterns: [Array("*.o".utf8)])
        try await withWatcher(excluding: excludes, before: { try $0.makeDirectories("src") }) { scratch, _, events in
            try scratch.write("src/a.o")
            #expect(await events.wait { $0.contains(.changed(RelativePath("src/a.o"))) }, "\(events.snapshot)")
            try Scratch.rename(scratch.absolute("src/a.o"), scratch.absolute("src/b.o"))
            #expect(await events.wait { $0.contains(.changed(RelativePath("src/b.o"))) }, "\(events.snapshot)")
            try scratch.unlink("src/b.o")
            try await events.barrier(scratch)
            let objects = events.snapshot.filter { $0.mentions(RelativePath("src/a.o")) || $0.mentions(RelativePath("src/b.o")) }
            // Entry events only: a write or close of an excluded file is never reported.
            #expect(objects.allSatisfy { if case .changed = $0 { return true } else { return false } }, "\(objects)")
            #expect(objects.filter { $0 == .changed(RelativePath("src/b.o")) }.count >= 2, "rename target and removal: \(objects)")
        }
    }

    @Test("nothing is reported below an excluded directory (only the directory's own entry events)")
    func excludedDirectory() async throws {
        let excludes = try ExcludeMatcher(patterns: [Array("skip/".utf8)])
        try await withWatcher(excluding: excludes, before: { try $0.makeDirectories("skip/deep") }) { scratch, watcher, events in
            #expect(watcher.watchedDirectories == 1)
            try scratch.write("skip/f")
            try scratch.write("skip/deep/g")
            try scratch.makeDirectories("x/skip/y")
            try scratch.write("x/skip/y/h")
            try scratch.write("x/kept")
            // x may be listed only after x/kept was closed: then it is reported as changed only.
            #expect(await events.wait { $0.contains(.changed(RelativePath("x/kept"))) }, "\(events.snapshot)")
            try await events.barrier(scratch)
            let leaked = events.snapshot.filter {
                ($0.mentions(RelativePath("skip")) || $0.mentions(RelativePath("x/skip"))) && $0 != .changed(RelativePath("x/skip"))
            }
            #expect(leaked.isEmpty, "\(leaked)")
        }
    }

    @Test("a symlink to a directory is reported but never followed")
    func symlinkNotFollowed() async throws {
        let outside = try Scratch()
        defer { outside.removeAll() }
        try await withWatcher(before: { try $0.symlink("old-link", to: outside.path) }) { scratch, watcher, events in
            #expect(watcher.watchedDirectories == 1)
            try scratch.symlink("new-link", to: outside.path)
            #expect(await events.wait { $0.contains(.changed(RelativePath("new-link"))) })
            try outside.write("f")
            try await events.barrier(scratch)
            let leaked = events.snapshot.filter { $0.mentions(RelativePath("old-link/f")) || $0.mentions(RelativePath("new-link/f")) }
            #expect(leaked.isEmpty, "\(leaked)")
            #expect(watcher.watchedDirectories == 1)
        }
    }

    @Test("a change of the root's own attributes is reported as a change of the root")
    func rootAttributes() async throws {
        try await withWatcher { scratch, _, events in
            let r = Scratch.call(scratch.path) { chmod($0, 0o750) }
            try #require(r == 0)
            #expect(await events.wait { $0.contains(.changed(.root)) })
        }
    }

    @Test("the source root moved away gives a rescan naming it")
    func rootVanished() async throws {
        try await withWatcher { scratch, _, events in
            let moved = scratch.path + Array("-moved".utf8)
            try Scratch.rename(scratch.path, moved)
            defer { try? Scratch.rename(moved, scratch.path) }
            #expect(await events.wait { $0.contains(.rescan(reason: "source root vanished")) })
        }
    }

    @Test("after random directory churn, every directory is watched at its current path",
          arguments: [1, 2, 3] as [UInt64], [false, true])
    func churn(seed: UInt64, held: Bool) async throws {
        let outside = try Scratch()
        defer { outside.removeAll() }
        // Held: the watcher thread waits in its logger until the churn is over, so that every
        // event is handled late, against a tree that has moved on.
        let gate = Gate()
        let logger = Logger(level: .debug) { _, message in
            if held, message.hasPrefix("inotify: read") { gate.passOnce() }
        }
        try await withWatcher(logger: logger) { scratch, watcher, events in
            defer { gate.open() }
            var random = SplitMix64(seed: seed)
            var counter = 0
            for _ in 0..<300 {
                let dirs = scratch.directories()
                counter += 1
                let base = dirs[Int(random.next() % UInt64(dirs.count))]
                let prefix = base.isEmpty ? "" : base + "/"
                switch random.next() % 6 {
                case 0, 1:
                    try scratch.makeDirectories(prefix + "n\(counter)/m\(counter)")
                    try scratch.write(prefix + "n\(counter)/m\(counter)/f")
                case 2 where !base.isEmpty:
                    let target = dirs[Int(random.next() % UInt64(dirs.count))]
                    guard target != base, !target.hasPrefix(base + "/") else { continue }
                    let to = (target.isEmpty ? "" : target + "/") + "r\(counter)"
                    try Scratch.rename(scratch.absolute(base), scratch.absolute(to))
                case 3 where !base.isEmpty:
                    try Scratch.rename(scratch.absolute(base), outside.absolute("out\(counter)"))
                case 4:
                    try outside.makeDirectories("in\(counter)/x")
                    try Scratch.rename(outside.absolute("in\(counter)"), scratch.absolute(prefix + "in\(counter)"))
                default:
                    try scratch.write(prefix + "g\(counter)")
                }
            }
            gate.open()
            try await events.barrier(scratch)
            let dirs = scratch.directories()
            var probes: Set<RelativePath> = []
            for dir in dirs {
                let name = (dir.isEmpty ? "" : dir + "/") + "probe"
                try scratch.write(name)
                probes.insert(RelativePath(name))
            }
            let reported = await events.wait(timeout: .seconds(10)) { probes.isSubset(of: Set($0.compactMap(\.reportedPath))) }
            let missing = probes.subtracting(events.snapshot.compactMap(\.reportedPath))
            #expect(reported, "seed \(seed), held \(held): not reported: \(missing.map(\.escaped).sorted().prefix(10))")
            try await events.barrier(scratch)
            let counted = await eventually { watcher.watchedDirectories == dirs.count }
            #expect(counted, "seed \(seed), held \(held): \(watcher.watchedDirectories) watched, \(dirs.count) directories")
            #expect(watcher.unwatchedDirectories == 0)
        }
    }

    @Test("a queue overflow gives a rescan, and watching goes on")
    func overflow() async throws {
        let queued = Self.readNumber("/proc/sys/fs/inotify/max_queued_events") ?? 16384
        guard queued <= 200_000 else {
            try Test.cancel("max_queued_events = \(queued) needs too many files to overflow")
        }
        // Each file gives CREATE and CLOSE_WRITE; the watcher thread is held in its logger
        // so that the kernel queue really fills.
        let count = max(20_000, queued / 2 + 4_000)
        let gate = Gate()
        let logger = Logger(level: .debug) { _, message in
            if message.hasPrefix("inotify: read") { gate.passOnce() }
        }
        try await withWatcher(logger: logger, before: { try $0.makeDirectories("many") }) { scratch, _, events in
            defer { gate.open() }
            for i in 0..<count { try scratch.write("many/\(i)", []) }
            gate.open()
            let rescanned = await events.wait(timeout: .seconds(20)) {
                $0.contains(.rescan(reason: "inotify event queue overflowed"))
            }
            #expect(rescanned, "no rescan after \(count) creations with max_queued_events = \(queued)")
            try scratch.write("after")
            #expect(await events.wait(timeout: .seconds(10)) { $0.contains(.closedAfterWrite(RelativePath("after"))) })
            try scratch.write("many/after")
            #expect(await events.wait(timeout: .seconds(10)) { $0.contains(.closedAfterWrite(RelativePath("many/after"))) })
        }
    }

    /// At the watcher itself: a directory left unwatched shows as a write whose event never
    /// comes (the agent would find it only at its next verify).
    @Test("directories made by mkdir -p chains while the queue overflowed are all watched after the rescan: writes in them, and in new subdirectories of them, arrive live")
    func overflowWhileDirectoriesAreMade() async throws {
        let queued = Self.readNumber("/proc/sys/fs/inotify/max_queued_events") ?? 16384
        guard queued <= 50_000 else {
            try Test.cancel("max_queued_events = \(queued): the flood that overflows it would not fit the stream's event limit")
        }
        let overflows = Mutex(0)
        let gate = Gate()
        let logger = Logger(level: .debug) { _, message in
            if message.hasPrefix("inotify: read") { gate.passOnce() }
            if message.hasPrefix("inotify event queue overflowed") { overflows.withLock { $0 += 1 } }
        }
        let prepare: (Scratch) throws -> Void = { scratch in
            try scratch.makeDirectories("old")
            try scratch.write("a")
            try scratch.write("b")
        }
        try await withWatcher(logger: logger, before: prepare) { scratch, watcher, events in
            defer { gate.open() }
            // The watcher thread is held at its first read (the trigger's events): from
            // then on the kernel queue only fills.
            try scratch.write("trigger")
            let held = await eventually(timeout: .seconds(10)) { gate.isHolding }
            try #require(held, "the watcher thread never read the trigger's events")
            // One byte at a time into two files in turn: no event repeats the one before
            // it, so the kernel merges none; one more than the queue holds overflows it.
            let flood = queued + 1_000
            try scratch.alternateWrites("a", "b", count: flood)
            // Made now, the chains' creations are lost with everything else past the limit.
            let chains = 24, depth = 8
            var made: [String] = []
            for chain in 0..<chains {
                var path = chain % 2 == 0 ? "c\(chain)" : "old/c\(chain)"
                var levels: [String] = [path]
                for level in 1..<depth {
                    path += "/d\(level)"
                    levels.append(path)
                }
                try scratch.makeDirectories(path)
                for dir in levels { try scratch.write(dir + "/f") }
                made += levels
            }
            gate.open()

            let reason = WatchEvent.rescan(reason: "inotify event queue overflowed")
            let rescanned = await events.wait(timeout: .seconds(30)) { $0.contains(reason) }
            try #require(rescanned, "no rescan after \(flood) events with max_queued_events = \(queued)")
            #expect(overflows.withLock { $0 } >= 1, "the overflow was never logged")
            // What was made during the overflow: every chain, none of it reported before the rescan.
            #expect(made.count == chains * depth)
            #expect(scratch.directories().count == 2 + made.count, "\(scratch.directories().count) directories")
            let tops = (0..<chains).map { RelativePath($0 % 2 == 0 ? "c\($0)" : "old/c\($0)") }
            let beforeRescan = events.snapshot.prefix { $0 != reason }
            let early = beforeRescan.filter { event in tops.contains { event.mentions($0) } }
            #expect(early.isEmpty, "reported before the rescan, so not lost in the overflow: \(early.prefix(5))")
            let delivered = beforeRescan.filter { $0 == .changed(RelativePath("a")) || $0 == .changed(RelativePath("b")) }.count
            #expect(delivered < flood, "all \(flood) writes were reported: nothing was lost")

            // A write into every directory made during the overflow arrives as its event.
            var mark = events.snapshot.count
            for dir in made { try scratch.write(dir + "/probe") }
            let probes = Set(made.map { RelativePath($0 + "/probe") })
            #expect(await events.closes(probes, after: mark), "no live event for the writes in \(events.missingCloses(probes, after: mark).prefix(10))")

            // A new subdirectory of each is followed (watched, then listed) and watched.
            mark = events.snapshot.count
            for dir in made {
                try scratch.makeDirectories(dir + "/new")
                try scratch.write(dir + "/new/g")
            }
            let listed = Set(made.map { RelativePath($0 + "/new/g") })
            let found = await events.wait(timeout: .seconds(10)) { listed.isSubset(of: Set($0[min(mark, $0.count)...].compactMap(\.reportedPath))) }
            #expect(found, "files in new subdirectories never reported")
            mark = events.snapshot.count
            for dir in made { try scratch.write(dir + "/new/h") }
            let later = Set(made.map { RelativePath($0 + "/new/h") })
            #expect(await events.closes(later, after: mark), "no live event for the writes in \(events.missingCloses(later, after: mark).prefix(10))")
            let all = 2 + 2 * made.count
            #expect(await eventually(timeout: .seconds(10)) { watcher.watchedDirectories == all },
                    "\(watcher.watchedDirectories) of \(all) directories watched")
            print("InotifyWatcherTests: \(delivered) of \(flood) writes reported before the overflow's rescan; \(made.count) directories made during it")
        }
    }

    @Test("stop() ends the stream promptly, and the watcher can start again")
    func stopEndsStream() async throws {
        let scratch = try Scratch()
        defer { scratch.removeAll() }
        let watcher = InotifyWatcher(rootPath: scratch.path)
        let events = Recorder(try watcher.start(excluding: .none))
        #expect(throws: KeepSyncError.self) { _ = try watcher.start(excluding: .none) }
        watcher.stop()
        #expect(await events.waitUntilFinished(timeout: .seconds(1)))
        let again = Recorder(try watcher.start(excluding: .none))
        defer { watcher.stop() }
        try scratch.write("f")
        #expect(await again.wait { $0.contains(.closedAfterWrite(RelativePath("f"))) })
    }

    @Test("a stop before start made its session (the agent's cancellation set): the walk watches nothing and the stream comes back ended")
    func cancelledBeforeTheWalk() async throws {
        let scratch = try Scratch()
        defer { scratch.removeAll() }
        for i in 0..<50 { try scratch.makeDirectories("d\(i)/e") }
        let cancellation = CancellationFlag()
        cancellation.set()
        let watcher = InotifyWatcher(rootPath: scratch.path, cancellation: cancellation)
        let events = Recorder(try watcher.start(excluding: .none))
        #expect(await events.waitUntilFinished(timeout: .seconds(1)))
        #expect(watcher.watchedDirectories <= 1, "\(watcher.watchedDirectories) of 101 directories watched")
        // An unset flag: the same tree is walked whole.
        let running = InotifyWatcher(rootPath: scratch.path, cancellation: CancellationFlag())
        _ = try running.start(excluding: .none)
        defer { running.stop() }
        #expect(running.watchedDirectories == 101)
    }

    @Test("a watcher dropped without stop() ends its stream")
    func droppedWatcherEndsStream() async throws {
        let scratch = try Scratch()
        defer { scratch.removeAll() }
        var watcher: InotifyWatcher? = InotifyWatcher(rootPath: scratch.path)
        let events = Recorder(try watcher!.start(excluding: .none))
        watcher = nil
        #expect(await events.waitUntilFinished(timeout: .seconds(1)))
    }

    @Test("start throws notFound for a missing root")
    func missingRoot() throws {
        let watcher = InotifyWatcher(rootPath: Array("/tmp/keepsync-no-such-directory-\(getpid())".utf8))
        #expect { _ = try watcher.start(excluding: .none) } throws: { error in
            (error as? KeepSyncError)?.code == .notFound
        }
    }

    // MARK: Fixture

    /// Runs `body` with a fresh temp dir (prepared by `before`), a started watcher on it
    /// and a recorder of its events; stops and cleans up afterwards.
    private func withWatcher(excluding excludes: ExcludeMatcher = .none, logger: Logger = .silent,
                             before: (Scratch) throws -> Void = { _ in },
                             _ body: (Scratch, InotifyWatcher, Recorder) async throws -> Void) async throws {
        let scratch = try Scratch()
        defer { scratch.removeAll() }
        try before(scratch)
        let watcher = InotifyWatcher(rootPath: scratch.path, logger: logger)
        let events = Recorder(try watcher.start(excluding: excludes))
        defer { watcher.stop() }
        try await body(scratch, watcher, events)
    }

    /// A number from a /proc file.
    static func readNumber(_ path: String) -> Int? {
        let fd = open(path, O_RDONLY)
        if fd < 0 { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return Int(String(decoding: buffer[..<n].filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
    }
}

// MARK: - Helpers

extension InotifyWatcherTests {
    /// A fresh directory made by `mkdtemp` under /tmp; paths below it are bytes.
    struct Scratch {
        let path: [UInt8]

        init() throws {
            path = try ScratchDirectory.make(prefix: "keepsync-inotify")
        }

        /// The absolute path of `relative`.
        func absolute(_ relative: String) -> [UInt8] { absolute(Array(relative.utf8)) }

        /// The absolute path of `relative` bytes.
        func absolute(_ relative: [UInt8]) -> [UInt8] { path + [0x2F] + relative }

        /// `mkdir -p` below the root.
        func makeDirectories(_ relative: String) throws {
            var prefix: [UInt8] = []
            for component in relative.split(separator: "/") {
                if !prefix.isEmpty { prefix.append(0x2F) }
                prefix += Array(component.utf8)
                let r = Scratch.call(absolute(prefix)) { mkdir($0, 0o755) }
                try #require(r == 0 || errno == EEXIST, "mkdir \(relative): errno \(errno)")
            }
        }

        /// Creates or replaces a file and closes it.
        func write(_ relative: String, _ bytes: [UInt8] = Array("data".utf8)) throws {
            try write(Array(relative.utf8), bytes)
        }

        /// Creates or replaces a file (byte name) and closes it.
        func write(_ relative: [UInt8], _ bytes: [UInt8] = Array("data".utf8)) throws {
            let fd = Scratch.call(absolute(relative)) { open($0, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
            try #require(fd >= 0, "open \(ByteEscaping.escape(relative)): errno \(errno)")
            defer { close(fd) }
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            try #require(n == bytes.count)
        }

        /// Writes one byte `count` times, into the existing files `first` and `second` in
        /// turn (one IN_MODIFY each).
        func alternateWrites(_ first: String, _ second: String, count: Int) throws {
            let fds = [first, second].map { name in Scratch.call(absolute(name)) { open($0, O_WRONLY) } }
            defer { for fd in fds where fd >= 0 { close(fd) } }
            try #require(fds.allSatisfy { $0 >= 0 }, "open: errno \(errno)")
            var byte: UInt8 = 0x2E
            for i in 0..<count {
                let n = pwrite(fds[i % 2], &byte, 1, 0)
                try #require(n == 1, "pwrite: errno \(errno)")
            }
        }

        /// Creates a symlink to `target` (absolute bytes).
        func symlink(_ relative: String, to target: [UInt8]) throws {
            let r = Scratch.call(target) { t in Scratch.call(absolute(relative)) { Glibc.symlink(t, $0) } }
            try #require(r == 0, "symlink \(relative): errno \(errno)")
        }

        /// Every directory below the root (relative, "" for the root itself).
        func directories() -> [String] {
            var result: [String] = []
            var stack = [""]
            while let relative = stack.popLast() {
                result.append(relative)
                let full = relative.isEmpty ? path : absolute(relative)
                guard let dir = Scratch.call(full, { opendir($0) }) else { continue }
                while let entry = readdir(dir) {
                    guard entry.pointee.d_type == DT_DIR else { continue }
                    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                    if name != "." && name != ".." { stack.append(relative.isEmpty ? name : relative + "/" + name) }
                }
                closedir(dir)
            }
            return result.sorted()
        }

        /// Removes a file.
        func unlink(_ relative: String) throws {
            let r = Scratch.call(absolute(relative)) { Glibc.unlink($0) }
            try #require(r == 0, "unlink \(relative): errno \(errno)")
        }

        /// `rename` between absolute paths.
        static func rename(_ from: [UInt8], _ to: [UInt8]) throws {
            let r = call(from) { f in call(to) { t in Glibc.rename(f, t) } }
            try #require(r == 0, "rename: errno \(errno)")
        }

        /// Removes the directory and everything in it.
        func removeAll() { try? ScratchDirectory.removeTree(path) }

        /// Calls `body` with the bytes as a C string.
        static func call<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
            let c = bytes.map { CChar(bitPattern: $0) } + [0]
            return c.withUnsafeBufferPointer { body($0.baseAddress!) }
        }
    }

    /// Consumes a stream in the background; waits look at what arrived, up to a deadline.
    final class Recorder: Sendable {
        private let state = Mutex<(events: [WatchEvent], finished: Bool)>(([], false))

        init(_ stream: AsyncStream<WatchEvent>) {
            Task {
                for await event in stream { self.state.withLock { $0.events.append(event) } }
                self.state.withLock { $0.finished = true }
            }
        }

        /// Everything received so far.
        var snapshot: [WatchEvent] { state.withLock { $0.events } }

        /// True once `condition` holds for what arrived, false if `timeout` passes first.
        func wait(timeout: Duration = .seconds(15), until condition: ([WatchEvent]) -> Bool) async -> Bool {
            let deadline = ContinuousClock.now + timeout
            while true {
                if state.withLock({ condition($0.events) }) { return true }
                if ContinuousClock.now >= deadline { return false }
                try? await Task.sleep(for: .milliseconds(5))
            }
        }

        /// True once the stream ended, false if `timeout` passes first.
        func waitUntilFinished(timeout: Duration) async -> Bool {
            let deadline = ContinuousClock.now + timeout
            while true {
                if state.withLock({ $0.finished }) { return true }
                if ContinuousClock.now >= deadline { return false }
                try? await Task.sleep(for: .milliseconds(2))
            }
        }

        /// True once every path of `paths` was reported closed after a write, among the
        /// events from index `mark` on; false if `timeout` passes first.
        func closes(_ paths: Set<RelativePath>, after mark: Int, timeout: Duration = .seconds(10)) async -> Bool {
            await wait(timeout: timeout) { Self.missing(paths, in: $0, after: mark).isEmpty }
        }

        /// The paths of `paths` not reported closed after a write from index `mark` on, sorted.
        func missingCloses(_ paths: Set<RelativePath>, after mark: Int) -> [String] {
            Self.missing(paths, in: snapshot, after: mark).map(\.escaped).sorted()
        }

        private static func missing(_ paths: Set<RelativePath>, in events: [WatchEvent], after mark: Int) -> Set<RelativePath> {
            var left = paths
            for case .closedAfterWrite(let path) in events[min(mark, events.count)...] { left.remove(path) }
            return left
        }

        /// Writes a fresh file in the root and waits for its close: everything that
        /// happened before has been delivered by then (events arrive in order).
        func barrier(_ scratch: Scratch) async throws {
            let name = "barrier-\(UInt32.random(in: 0...UInt32.max))"
            try scratch.write(name)
            let seen = await wait { $0.contains(.closedAfterWrite(RelativePath(name))) }
            try #require(seen, "barrier \(name) never arrived")
        }
    }

    /// Holds the first caller of `passOnce` until `open`; later callers pass freely.
    final class Gate: Sendable {
        private let semaphore = DispatchSemaphore(value: 0)
        private let state = Mutex<(used: Bool, opened: Bool, holding: Bool)>((false, false, false))

        /// True while a caller is held.
        var isHolding: Bool { state.withLock { $0.holding && !$0.opened } }

        /// Blocks the first caller until the gate opens.
        func passOnce() {
            let first = state.withLock { s -> Bool in
                defer { s.used = true }
                if !s.used && !s.opened { s.holding = true }
                return !s.used && !s.opened
            }
            if first { semaphore.wait() }
        }

        /// Lets the held caller (if any, now or later) go.
        func open() {
            let release = state.withLock { s -> Bool in
                defer { s.opened = true }
                return !s.opened
            }
            if release { semaphore.signal() }
        }
    }
}

extension WatchEvent {
    /// The path a change, close or move-in reports as present.
    fileprivate var reportedPath: RelativePath? {
        switch self {
        case .changed(let path), .closedAfterWrite(let path): return path
        case .moved(_, let to): return to
        case .removed, .rescan: return nil
        }
    }

    /// True when the event concerns `path` or something below it.
    fileprivate func mentions(_ path: RelativePath) -> Bool {
        switch self {
        case .changed(let p), .closedAfterWrite(let p), .removed(let p): return p.isWithin(path)
        case .moved(let from, let to): return from.isWithin(path) || to.isWithin(path)
        case .rescan: return false
        }
    }
}
