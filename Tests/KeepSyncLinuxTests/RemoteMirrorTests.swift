import Dispatch
import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// `RemoteSession` and `RemoteMirror` (issue 18) against a real sshd on 127.0.0.1: the
/// remote is this machine, so what arrived is read through the local file system. Each
/// test counts what it exercised (rsync runs, ssh connections and commands) and asserts
/// on it. Skipped, with the reason printed, where OpenSSH or rsync is missing.
@Suite("Remote mirror")
struct RemoteMirrorTests {
    typealias LiveFS = LiveMirrorTests.LiveFS

    /// A loopback sshd, a session, a mirror, and the source and remote directories.
    final class Fixture {
        let sshd: LoopbackSSHD
        let session: RemoteSession
        let mirror: RemoteMirror
        let source: [UInt8]
        let remote: [UInt8]
        let outside: [UInt8]
        let sourceFS: PosixFileSystem

        init(_ test: String, command: Duration = .seconds(20), sshArguments: [String]? = nil,
             warm: Duration = .seconds(30), warmWhileIdle: Duration = .seconds(300)) throws {
            sshd = try LoopbackSSHDTests.startOrSkip(test)
            _ = try LoopbackSSHDTests.rsyncOrSkip(test)
            source = try ScratchDirectory.make(prefix: "keepsync-remote-source")
            remote = try ScratchDirectory.make(prefix: "keepsync-remote-mirror")
            outside = try ScratchDirectory.make(prefix: "keepsync-remote-outside")
            session = try RemoteSession(ssh: (sshArguments ?? sshd.sshArguments).map { Array($0.utf8) },
                                        destination: sshd.destination, host: sshd.host,
                                        timing: .init(connectSeconds: 3, aliveInterval: 1, aliveCount: 3, command: command,
                                                      warm: warm, warmWhileIdle: warmWhileIdle))
            mirror = RemoteMirror(session: session, target: RemoteTarget(user: sshd.user, host: sshd.host, directory: remote),
                                  sourceRoot: source, rsyncIOTimeout: 20)
            sourceFS = try PosixFileSystem(rootPath: source)
        }

        deinit {
            session.close()
            sshd.stop()
            for dir in [source, remote, outside] { try? ScratchDirectory.removeTree(dir) }
        }

        func src(_ path: [UInt8]) -> [UInt8] { source + [0x2F] + path }
        func rem(_ path: [UInt8]) -> [UInt8] { remote + [0x2F] + path }
    }

    static func b(_ text: String) -> [UInt8] { Array(text.utf8) }

    static func mtime(_ st: stat) -> Timespec { Timespec(seconds: Int64(st.st_mtim.tv_sec), nanoseconds: Int64(st.st_mtim.tv_nsec)) }

    // MARK: Cases

    @Test("one rsync run installs a batch: bytes, modes and nanosecond mtimes equal, names with a newline, a non-UTF-8 byte, quotes and `$`")
    func installBatch() async throws {
        try await offThePool {
            let f = try Fixture("installBatch")
            var random = SplitMix64(seed: 1818)
            let names: [[UInt8]] = [Self.b("plain.txt"), Self.b("new\nline"), Self.b("caf") + [0xE9], Self.b(" spaced -name "),
                                    Self.b("sub/deep file"), Self.b("sub/") + [0xFF, 0x0A, 0x5C], Self.b("empty"),
                                    Self.b("-$1 \"q\" '${2}' `x`")]
            try LiveFS.mkdir(f.src(Self.b("sub")), mode: 0o755)
            try LiveFS.mkdir(f.rem(Self.b("sub")), mode: 0o755)
            var contents: [[UInt8]: [UInt8]] = [:]
            for (i, name) in names.enumerated() {
                let content = name == Self.b("empty") ? [] : random.bytes(1 + i * 40_000)
                contents[name] = content
                try LiveFS.writeFile(f.src(name), content)
                try LiveFS.chmod(f.src(name), i % 2 == 0 ? 0o640 : 0o755)
                try LiveFS.setTimes(f.src(name), seconds: 1_600_000_000 + i * 1000, nanoseconds: 123_456_789 - i)
            }
            let paths = names.map { RelativePath(bytes: $0) }
            let results = f.mirror.install(paths, from: f.sourceFS, io: .serial, logger: .silent)
            #expect(results.map(\.path) == paths)
            for (path, result) in results {
                guard case .success(let copied?) = result else {
                    Issue.record("\(path.escaped): \(result)")
                    continue
                }
                let local = try #require(LiveFS.lstat(f.rem(path.bytes)))
                let sourceStat = try #require(LiveFS.lstat(f.src(path.bytes)))
                #expect(try LiveFS.readFile(f.rem(path.bytes)) == contents[path.bytes], "\(path.escaped)")
                #expect(local.st_mode == sourceStat.st_mode, "\(path.escaped): mode")
                #expect(Self.mtime(local) == Self.mtime(sourceStat), "\(path.escaped): mtime")
                #expect(copied.installed.inode == UInt64(local.st_ino) && copied.installed.mtime == Self.mtime(local))
                #expect(copied.source.size == UInt64(sourceStat.st_size))
            }
            let leftovers = try LiveFS.list(f.remote) + LiveFS.list(f.rem(Self.b("sub")))
            #expect(!leftovers.contains { RemoteMirror.isRsyncTemporary($0) }, "rsync temp names left: \(leftovers.map(ByteEscaping.escape))")
            let version = try f.session.rsyncVersion()
            #expect(f.session.rsyncRuns == 1, "one rsync run for the batch")
            #expect(f.session.connectionsOpened == 1 && f.sshd.acceptedLogins == 2, "one connection (and the harness's probe)")
            // version, pre-stat, post-stat; version is cached.
            #expect(f.session.commandsRun == 3, "\(f.session.commandsRun) commands")
            #expect(f.session.shellsStarted == 1, "the three in one remote shell")
            print("RemoteMirrorTests: install: \(paths.count) files in 1 rsync run (\(version.line), --fsync: \(version.hasFsync)), "
                  + "\(f.session.commandsRun) ssh commands over \(f.session.connectionsOpened) connection")
        }
    }

    @Test("rsync's partial exit (23) records only what arrived; a vanished source is nil; a missing remote parent fails its path")
    func partialTransfer() async throws {
        try await offThePool {
            let f = try Fixture("partialTransfer")
            for name in ["good", "blocked", "again"] { try LiveFS.writeFile(f.src(Self.b(name)), Self.b("new " + name)) }
            try LiveFS.mkdir(f.src(Self.b("nodir")), mode: 0o755)
            try LiveFS.writeFile(f.src(Self.b("nodir/f")), Self.b("x"))
            // A non-empty directory where "blocked" goes: rsync cannot replace it (exit 23).
            try LiveFS.makeDirectories(f.remote, "blocked/inside")
            // "again" is on the remote already with the source's size and mtime but other bytes.
            try LiveFS.writeFile(f.rem(Self.b("again")), Self.b("old again"))
            let st = try #require(LiveFS.lstat(f.src(Self.b("again"))))
            try LiveFS.setTimes(f.rem(Self.b("again")), seconds: st.st_mtim.tv_sec, nanoseconds: st.st_mtim.tv_nsec)
            let paths = ["good", "blocked", "vanished", "again", "nodir/f"].map(RelativePath.init)
            let results = f.mirror.install(paths, from: f.sourceFS, io: .serial, logger: .silent)
            func succeeded(_ i: Int) -> Bool { if case .success(let r?) = results[i].result { r.path == paths[i] } else { false } }
            #expect(succeeded(0), "\(results[0].result)")
            #expect(!succeeded(1), "a path rsync could not write is never recorded: \(results[1].result)")
            if case .success(nil) = results[2].result {} else { Issue.record("vanished: \(results[2].result)") }
            #expect(succeeded(3) && (try? LiveFS.readFile(f.rem(Self.b("again")))) == Self.b("new again"),
                    "same size and mtime on the remote are sent anyway (--ignore-times)")
            if case .failure(let error as KeepSyncError) = results[4].result { #expect(error.code == .notFound) } else {
                Issue.record("missing remote parent: \(results[4].result)")
            }
            #expect(LiveFS.lstat(f.rem(Self.b("nodir"))) == nil, "no implied directory made")
            #expect(f.session.rsyncRuns == 1)
            let argv = f.mirror.rsyncArguments(fsync: true).map { ByteEscaping.escapeControls($0) }
            print("RemoteMirrorTests: partial: \(paths.count) paths, 1 rsync run, 2 installed, 1 vanished, 2 failed; rsync argv: \(argv)")
        }
    }

    @Test("a warm rsync takes the next small install (the file whole, nothing sent ahead); a list past its pipe, its ssh killed while it waits, and close each end it")
    func warmRsync() async throws {
        try await offThePool {
            let f = try Fixture("warmRsync")
            f.mirror.keepRsyncWarm()
            var random = SplitMix64(seed: 2412)
            var contents: [[UInt8]: [UInt8]] = [:]
            func install(_ names: [[UInt8]]) throws {
                for name in names {
                    contents[name] = random.bytes(4096)
                    try LiveFS.writeFile(f.src(name), contents[name]!)
                }
                let results = f.mirror.install(names.map { RelativePath(bytes: $0) }, from: f.sourceFS, io: .serial, logger: .silent)
                for (path, result) in results {
                    guard case .success(_?) = result else {
                        Issue.record("\(path.escaped): \(result)")
                        continue
                    }
                    #expect(try LiveFS.readFile(f.rem(path.bytes)) == contents[path.bytes], "\(path.escaped)")
                }
            }
            try install([Self.b("first")])
            #expect(f.session.rsyncRuns == 1 && f.session.warmRsyncRuns == 0)
            let warm = try #require(f.session.warmRsyncPid, "an rsync waits after a run that ended well")
            #expect(kill(warm, 0) == 0)
            // It sent nothing while it waited.
            #expect(try LiveFS.list(f.remote) == [Self.b("first")])

            let warmBefore = f.session.warmRsyncRuns
            try install([Self.b("second")])
            #expect(f.session.rsyncRuns == 2 && f.session.warmRsyncRuns == warmBefore + 1, "the warm rsync took it: \(f.session.rsyncRuns) runs, \(f.session.warmRsyncRuns) warm")
            #expect(kill(warm, 0) != 0, "and was reaped")

            // A list longer than its pipe goes to a fresh rsync; the warm one is ended.
            let waiting = try #require(f.session.warmRsyncPid)
            let long = (0..<300).map { Self.b("long-" + String(repeating: "n", count: 240) + "-\($0)") }
            try install(long)
            #expect(f.session.rsyncRuns == 3 && f.session.warmRsyncRuns == warmBefore + 1)
            #expect(kill(waiting, 0) != 0)

            // Its ssh killed while it waits for its list, past its handshake, and reaped by
            // rsync at once (a dropped connection), all within the grace a new one has to
            // start its ssh: the run goes to a fresh rsync and succeeds.
            let waitingNow = try #require(f.session.warmRsyncPid)
            let children = { (try? LiveFS.readFile(Self.b("/proc/\(waitingNow)/task/\(waitingNow)/children"))) ?? [] }
            let ssh = try #require(children().split(separator: 0x20).compactMap { pid_t(String(decoding: $0, as: UTF8.self)) }.first,
                                   "the warm rsync's ssh")
            #expect(eventuallyBlocking(timeout: .seconds(10)) { Self.pollsItsStdin(waitingNow) }, "the warm rsync waits for its list")
            #expect(kill(ssh, SIGKILL) == 0)
            #expect(eventuallyBlocking(timeout: .seconds(10)) { children().isEmpty }, "rsync reaped its ssh")
            #expect(kill(waitingNow, 0) == 0, "and still waits")
            try install([Self.b("third")])
            #expect(f.session.rsyncRuns == 4 && f.session.warmRsyncRuns == warmBefore + 1, "\(f.session.rsyncRuns) runs, \(f.session.warmRsyncRuns) warm")

            let last = try #require(f.session.warmRsyncPid)
            f.session.close()
            #expect(f.session.warmRsyncPid == nil && kill(last, 0) != 0, "close ends and reaps the warm rsync")
            #expect(try LiveFS.list(f.remote).count == 303)
            print("RemoteMirrorTests: warm rsync: \(f.session.rsyncRuns) runs, \(f.session.warmRsyncRuns) through a warm rsync; one whose ssh was killed left its run to a fresh rsync")
        }
    }

    /// Whether `pid` sleeps in poll(2) on its stdin alone (rsync past its handshake, waiting
    /// for its list): its syscall's first argument, read from its memory.
    static func pollsItsStdin(_ pid: pid_t) -> Bool {
        guard let line = try? LiveFS.readFile(b("/proc/\(pid)/syscall")) else { return false }
        let words = line.split(separator: 0x20).map { String(decoding: $0, as: UTF8.self) }
        // poll is 7 on x86_64; ppoll, 73 on aarch64 and 271 on x86_64, takes the same array.
        guard words.count > 2, ["7", "73", "271"].contains(words[0]), words[2] == "0x1",
              let address = UInt64(words[1].dropFirst(2), radix: 16) else { return false }
        let fd = open("/proc/\(pid)/mem", O_RDONLY)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var watched: Int32 = -1
        return pread(fd, &watched, 4, off_t(Int64(bitPattern: address))) == 4 && watched == 0
    }

    @Test("a warm rsync is renewed while runs are recent and sends nothing meanwhile, ends when idle and with closeMaster; commands at once take turns in one remote shell beside it")
    func warmRsyncLifecycle() async throws {
        try await offThePool {
            let f = try Fixture("warmRsyncLifecycle", warm: .seconds(1), warmWhileIdle: .seconds(4))
            f.mirror.keepRsyncWarm()
            func install(_ name: String) throws {
                try LiveFS.writeFile(f.src(Self.b(name)), Self.b("content of \(name)\n"))
                let results = f.mirror.install([RelativePath(name)], from: f.sourceFS, io: .serial, logger: .silent)
                guard case .success(_?) = results[0].result else { throw KeepSyncError(.io, "\(name): \(results[0].result)") }
            }
            try install("a")
            let first = try #require(f.session.warmRsyncPid)
            // Renewed after its second: a new one, the old one reaped, the remote untouched.
            #expect(eventuallyBlocking(timeout: .seconds(10)) { f.session.warmRsyncsSpawned >= 3 }, "renewed twice")
            #expect(kill(first, 0) != 0)
            #expect(try LiveFS.list(f.remote) == [Self.b("a")], "nothing sent while warm rsyncs waited")
            // Four seconds after the last run, no more.
            #expect(eventuallyBlocking(timeout: .seconds(15)) { f.session.warmRsyncsEndedIdle == 1 }, "ended when idle")
            #expect(f.session.warmRsyncPid == nil)
            let spawned = f.session.warmRsyncsSpawned
            #expect(eventuallyBlocking(timeout: .seconds(3)) { f.session.warmRsyncsSpawned > spawned } == false, "and not renewed")

            try install("b")
            let beforeClose = try #require(f.session.warmRsyncPid)
            f.session.closeMaster()
            #expect(f.session.warmRsyncPid == nil && kill(beforeClose, 0) != 0, "closeMaster ends it")
            try install("c")
            #expect(f.session.connectionsOpened == 2, "the next call opened a new master")

            // Four remote commands at once take turns in the one remote shell: no session
            // more, the warm rsync keeps waiting.
            let waiting = try #require(f.session.warmRsyncPid)
            let session = f.session, shells = f.session.shellsStarted
            let t0 = ContinuousClock.now
            DispatchQueue.concurrentPerform(iterations: 4) { _ in _ = try? session.run(Self.b("sleep 0.25")) }
            let took = ContinuousClock.now - t0
            #expect(took >= .seconds(1), "in turns: \(took)")
            // (Renewed meanwhile, it is another one: the renewal comes every second here.)
            #expect(f.session.shellsStarted == shells, "\(f.session.shellsStarted) shells, \(shells) before")
            #expect(f.session.warmRsyncPid != nil, "one still waits (\(waiting) before)")
            #expect(f.session.rsyncRuns == 3, "\(f.session.rsyncRuns) runs")
            print("RemoteMirrorTests: warm rsync lifecycle: \(f.session.warmRsyncsSpawned) spawned for 3 runs, renewed, ended idle, by closeMaster; 4 commands at once in one shell (\(took))")
        }
    }

    @Test("a rename of a 100 MiB file is a remote rename: the same inode, no rsync run, one ssh command")
    func renameLargeFile() async throws {
        try await offThePool {
            let f = try Fixture("renameLargeFile")
            try LiveFS.mkdir(f.rem(Self.b("dir")), mode: 0o755)
            try LiveFS.writeLargeFile(f.rem(Self.b("big")), size: 100 << 20, seed: 18)
            let before = try #require(LiveFS.lstat(f.rem(Self.b("big"))))
            let clock = ContinuousClock(), start = clock.now
            try f.mirror.rename(RelativePath("big"), to: RelativePath("dir/big renamed\n"))
            let took = clock.now - start
            let after = try #require(LiveFS.lstat(f.rem(Self.b("dir/big renamed\n"))))
            #expect(after.st_ino == before.st_ino && after.st_size == 100 << 20)
            #expect(LiveFS.lstat(f.rem(Self.b("big"))) == nil)
            // A rename whose old path is gone says so (the engine then falls back to a transfer).
            #expect(throws: KeepSyncError.self) { try f.mirror.rename(RelativePath("big"), to: RelativePath("again")) }
            #expect(f.session.rsyncRuns == 0, "no content sent")
            #expect(f.session.commandsRun == 2 && f.session.connectionsOpened == 1)
            print("RemoteMirrorTests: rename: 100 MiB renamed in \(took) by 1 ssh command, inode \(after.st_ino) kept, 0 rsync runs")
        }
    }

    @Test("remove takes a directory tree (a read-only one too), several paths in one command")
    func removeTree() async throws {
        try await offThePool {
            let f = try Fixture("removeTree")
            try LiveFS.makeDirectories(f.remote, "tree/a/b")
            try LiveFS.makeDirectories(f.remote, "other")
            for name in ["tree/x", "tree/a/y", "tree/a/b/z", "other/w", "lone"] { try LiveFS.writeFile(f.rem(Self.b(name)), Self.b(name)) }
            try LiveFS.symlink(f.outside, at: f.rem(Self.b("tree/a/link-out")))
            try LiveFS.writeFile(f.outside + Self.b("/keep"), Self.b("outside"))
            try LiveFS.chmod(f.rem(Self.b("tree/a/b")), 0o555)
            try f.mirror.remove(RelativePath("tree"))
            #expect(LiveFS.lstat(f.rem(Self.b("tree"))) == nil)
            #expect((try? LiveFS.readFile(f.outside + Self.b("/keep"))) == Self.b("outside"), "a link inside is removed, not followed")
            let results = try f.mirror.removeAll([RelativePath("other"), RelativePath("lone"), RelativePath("absent")])
            #expect(results.allSatisfy { if case .success = $0 { true } else { false } }, "\(results)")
            #expect(try LiveFS.list(f.remote).isEmpty)
            #expect(f.session.commandsRun == 2 && f.session.rsyncRuns == 0 && f.session.connectionsOpened == 1)
            print("RemoteMirrorTests: remove: a tree of 3 directories and 4 entries, then 3 paths, in \(f.session.commandsRun) ssh commands")
        }
    }

    @Test("the remote listing and stat match what PosixFileSystem sees of the same directory")
    func listingMatchesPosix() async throws {
        try await offThePool {
            let f = try Fixture("listingMatchesPosix")
            try LiveFS.makeDirectories(f.remote, "d/e")
            try LiveFS.writeFile(f.rem(Self.b("f")), Self.b("hello"))
            try LiveFS.setTimes(f.rem(Self.b("f")), seconds: 1_234_567_890, nanoseconds: 987_654_321)
            try LiveFS.writeFile(f.rem(Self.b("d/") + [0x0A, 0xFE]), Self.b("odd"))
            try LiveFS.chmod(f.rem(Self.b("d/") + [0x0A, 0xFE]), 0o4751)
            try LiveFS.symlink(Self.b("../f"), at: f.rem(Self.b("d/link")))
            try LiveFS.link(f.rem(Self.b("f")), f.rem(Self.b("d/e/hard")))
            #expect(mkfifo(f.remote.map { CChar(bitPattern: $0) } + Array("/fifo".utf8CString), 0o600) == 0)
            let posix = try PosixFileSystem(rootPath: f.remote)
            func key(_ s: FileStat) -> [String] {
                ["\(s.kind)", "\(s.mode)", "\(s.size)", "\(s.mtime)", "\(s.ctime)", "\(s.device)", "\(s.inode)", "\(s.links)"]
            }
            var compared = 0
            for dir in [RelativePath.root, RelativePath("d"), RelativePath("d/e")] {
                let remote = try f.mirror.list(dir).sorted { $0.name.lexicographicallyPrecedes($1.name) }
                let local = try posix.list(dir).sorted { $0.name.lexicographicallyPrecedes($1.name) }
                #expect(remote.map(\.name) == local.map(\.name), "\(dir.escaped)")
                for (r, l) in zip(remote, local) {
                    #expect(key(r.stat) == key(l.stat), "\(dir.appending(r.name).escaped)")
                    compared += 1
                }
            }
            let tree = try f.mirror.listTree()
            #expect(tree.count == compared, "one listing of the whole tree")
            for entry in tree {
                let remoteStat = try #require(try f.mirror.stat(entry.path))
                let localStat = try #require(try posix.stat(entry.path))
                #expect(key(remoteStat) == key(localStat), "\(entry.path.escaped)")
            }
            #expect(try f.mirror.readLink(RelativePath("d/link")) == Self.b("../f"))
            #expect(try f.mirror.stat(RelativePath("nothing/here")) == nil)
            let file = try f.mirror.open(RelativePath("f"))
            #expect(try file.read(upTo: 100) == Self.b("hello"))
            #expect(f.session.rsyncRuns == 0 && f.session.connectionsOpened == 1)
            print("RemoteMirrorTests: listing: \(compared) entries equal in kind, mode, size, mtime, ctime, device, inode and links; "
                  + "\(f.session.commandsRun) ssh commands")
        }
    }

    @Test("a remote directory swapped for a symlink to outside: every call refuses, nothing is written outside")
    func symlinkSwapIsRefused() async throws {
        try await offThePool {
            let f = try Fixture("symlinkSwapIsRefused")
            try LiveFS.writeFile(f.src(Self.b("f")), Self.b("payload"))
            try LiveFS.mkdir(f.src(Self.b("sub")), mode: 0o755)
            try LiveFS.writeFile(f.src(Self.b("sub/f")), Self.b("payload"))
            try LiveFS.writeFile(f.rem(Self.b("a")), Self.b("a"))
            try LiveFS.writeFile(f.outside + Self.b("/victim"), Self.b("untouched"))
            try LiveFS.symlink(f.outside, at: f.rem(Self.b("sub")))

            func refused(_ what: String, _ body: () throws -> Void) {
                do {
                    try body()
                    Issue.record("\(what) was not refused")
                } catch let error as KeepSyncError {
                    #expect(error.code == .unsafePath, "\(what): \(error)")
                } catch { Issue.record("\(what): \(error)") }
            }
            let installed = f.mirror.install([RelativePath("sub/f"), RelativePath("f")], from: f.sourceFS, io: .serial, logger: .silent)
            if case .failure(let error as KeepSyncError) = installed[0].result { #expect(error.code == .unsafePath) } else {
                Issue.record("install through the link: \(installed[0].result)")
            }
            if case .success(let copied?) = installed[1].result { #expect(copied.installed.size == 7) } else {
                Issue.record("the other file of the batch: \(installed[1].result)")
            }
            refused("mkdir") { _ = try f.mirror.makeDirectory(RelativePath("sub/d"), mode: 0o755) }
            refused("symlink") { _ = try f.mirror.makeSymlink(RelativePath("sub/l"), target: Self.b("x"), mtime: Timespec(seconds: 1, nanoseconds: 0)) }
            refused("rename") { try f.mirror.rename(RelativePath("a"), to: RelativePath("sub/a")) }
            refused("rename out") { try f.mirror.rename(RelativePath("sub/victim"), to: RelativePath("stolen")) }
            refused("remove") { try f.mirror.remove(RelativePath("sub/victim")) }
            refused("chmod") { try f.mirror.setAttributes(RelativePath("sub/victim"), mode: 0o777, mtime: nil) }
            refused("chmod the link") { try f.mirror.setAttributes(RelativePath("sub"), mode: 0o777, mtime: nil) }
            refused("list") { _ = try f.mirror.list(RelativePath("sub")) }
            refused("stat") { _ = try f.mirror.stat(RelativePath("sub/victim")) }
            refused("leftover") { _ = try f.mirror.removeLeftoverTemporary(RelativePath("sub/.victim.AbC123")) }
            #expect(try LiveFS.list(f.outside) == [Self.b("victim")])
            #expect(try LiveFS.readFile(f.outside + Self.b("/victim")) == Self.b("untouched"))
            let victim = try #require(LiveFS.lstat(f.outside + Self.b("/victim")))
            #expect(victim.st_mode & 0o777 == 0o644)
            #expect(f.session.rsyncRuns == 1, "the batch's other file went; the refused one never reached rsync")
            print("RemoteMirrorTests: confinement: 11 calls through a swapped link refused, the outside directory untouched, "
                  + "\(f.session.rsyncRuns) rsync run for the safe path, \(f.session.commandsRun) ssh commands")
        }
    }

    @Test("directories and links in batches: one ssh command each, in order, a result per entry (a taken name fails alone)")
    func batchedEntries() async throws {
        try await offThePool {
            let f = try Fixture("batchedEntries")
            try LiveFS.writeFile(f.rem(Self.b("taken")), Self.b("a file"))
            // Names a script would break if it parsed them (the stats of the made ones come
            // from one find over references to them).
            let names = [Self.b("a"), Self.b("a/b 'q' $1"), Self.b("taken"), Self.b("a/b 'q' $1/c\n"),
                         Self.b("a/${q1}`x`$(y) \"z"), Self.b("a/${q1}")]
            let before = f.session.commandsRun
            let dirs = f.mirror.makeDirectories(names.map { (RelativePath(bytes: $0), 0o750) })
            #expect(f.session.commandsRun == before + 1)
            #expect(dirs.map { (try? $0.get())?.kind } == [.directory, .directory, nil, .directory, .directory, .directory])
            #expect(LiveFS.lstat(f.rem(Self.b("a/b 'q' $1/c\n"))) != nil)
            for (name, made) in zip(names, dirs) {
                guard let made = try? made.get() else { continue }
                #expect(made.inode == UInt64(try #require(LiveFS.lstat(f.rem(name))).st_ino), "\(ByteEscaping.escape(name))")
            }
            let stamp = Timespec(seconds: 1_500_000_000, nanoseconds: 7)
            let links = f.mirror.makeSymlinks([(RelativePath("a/l1"), Self.b("../t a\n"), stamp),
                                               (RelativePath("missing/l2"), Self.b("x"), stamp),
                                               (RelativePath(bytes: Self.b("a/b 'q' $1/l3")), Self.b("$2"), stamp)])
            #expect(f.session.commandsRun == before + 2)
            #expect(links.map { (try? $0.get())?.kind } == [.symlink, nil, .symlink])
            #expect(try LiveFS.readlink(f.rem(Self.b("a/l1"))) == Self.b("../t a\n"))
            #expect(try LiveFS.readlink(f.rem(Self.b("a/b 'q' $1/l3"))) == Self.b("$2"))
            #expect(Self.mtime(try #require(LiveFS.lstat(f.rem(Self.b("a/l1"))))) == stamp)
            // Where something is, the link replaces it (made aside, then renamed over it).
            let later = Timespec(seconds: 1_600_000_000, nanoseconds: 9)
            let over = f.mirror.makeSymlinks([(RelativePath("taken"), Self.b("new"), later),
                                              (RelativePath("a/l1"), Self.b("again"), later)])
            #expect(over.map { (try? $0.get())?.kind } == [.symlink, .symlink])
            #expect(try LiveFS.readlink(f.rem(Self.b("taken"))) == Self.b("new"))
            #expect(try LiveFS.readlink(f.rem(Self.b("a/l1"))) == Self.b("again"))
            #expect(Self.mtime(try #require(LiveFS.lstat(f.rem(Self.b("taken"))))) == later)
        }
    }

    @Test("directories of one mode are made by one mkdir; when it fails, each answers alone: made, or its own error")
    func directoryRunFallsBackPerItem() async throws {
        try await offThePool {
            let f = try Fixture("directoryRunFallsBackPerItem")
            // One run (same mode, parents there): the middle name is too long for the file
            // system, so the run's mkdir fails after making the others.
            let long = Self.b(String(repeating: "x", count: 300))
            let names = [Self.b("r1"), Self.b("r1/ok1"), long, Self.b("ok2"), Self.b("r1/ok3")]
            let made = f.mirror.makeDirectories(names.map { (RelativePath(bytes: $0), 0o750) })
            #expect(made.map { (try? $0.get())?.kind } == [.directory, .directory, nil, .directory, .directory])
            guard case .failure(let failure) = made[2] else { Issue.record("a 300-byte name was made"); return }
            #expect("\(failure)".contains("too long"), "\(failure)")
            for (name, result) in zip(names, made) {
                guard let stat = try? result.get() else { continue }
                let st = try #require(LiveFS.lstat(f.rem(name)))
                #expect(stat.inode == UInt64(st.st_ino) && st.st_mode & 0o7777 == 0o750)
            }
        }
    }

    @Test("attributes that cannot be set answer the remote's own words; the others in the batch are set")
    func attributesRefusedAnswerTheirError() async throws {
        try await offThePool {
            let f = try Fixture("attributesRefusedAnswerTheirError")
            try LiveFS.mkdir(f.rem(Self.b("locked")), mode: 0o755)
            try LiveFS.mkdir(f.rem(Self.b("open")), mode: 0o755)
            let chattr = { (flag: String) throws -> Int32 in
                try Sys.runCaptured([Self.b("chattr"), Self.b(flag), f.rem(Self.b("locked"))], input: [], timeout: .seconds(10)).status
            }
            guard try chattr("+i") == 0 else {
                print("RemoteMirrorTests: skipped attributesRefusedAnswerTheirError: chattr +i is not supported here")
                return
            }
            defer { _ = try? chattr("-i") }
            let stamp = Timespec(seconds: 1_500_000_000, nanoseconds: 3)
            let set = f.mirror.setAttributesAll([(RelativePath("locked"), 0o700, stamp), (RelativePath("open"), 0o700, stamp)])
            guard case .failure(let failure) = set[0] else { Issue.record("an immutable directory's attributes were set"); return }
            #expect("\(failure)".contains("not permitted"), "\(failure)")
            #expect((try? set[1].get()) != nil)
            let st = try #require(LiveFS.lstat(f.rem(Self.b("open"))))
            #expect(st.st_mode & 0o7777 == 0o700 && Self.mtime(st) == stamp)
        }
    }

    @Test("a batch longer than one shell's command line: several shells, every item whole and answered in order")
    func batchOverSeveralShells() async throws {
        try await offThePool {
            let f = try Fixture("batchOverSeveralShells")
            // 400 directories of 200-byte names (80 KiB of paths), every tenth one failing.
            let names = (0..<400).map { i in RelativePath(bytes: Self.b(String(1000 + i) + " " + String(repeating: "n", count: 195))) }
            for i in stride(from: 0, to: 400, by: 10) { try LiveFS.writeFile(f.rem(names[i].bytes), Self.b("in the way")) }
            let before = f.session.commandsRun
            let made = f.mirror.makeDirectories(names.map { ($0, 0o750) })
            #expect(f.session.commandsRun == before + 1)
            #expect(made.enumerated().filter { i, r in (try? r.get()) == nil ? i % 10 != 0 : i % 10 == 0 }.isEmpty)
            for (i, r) in made.enumerated() where i % 10 != 0 {
                let st = try #require(LiveFS.lstat(f.rem(names[i].bytes)))
                #expect(try r.get().inode == UInt64(st.st_ino) && st.st_mode & 0o7777 == 0o750)
            }
            let stamp = Timespec(seconds: 1_500_000_000, nanoseconds: 7)
            let set = f.mirror.setAttributesAll(names.enumerated().filter { $0.offset % 10 != 0 }.map { ($0.element, 0o705, stamp) })
            #expect(set.allSatisfy { (try? $0.get()) != nil })
            #expect(try names.enumerated().filter { $0.offset % 10 != 0 }.allSatisfy {
                let st = try #require(LiveFS.lstat(f.rem($0.element.bytes)))
                return st.st_mode & 0o7777 == 0o705 && Self.mtime(st) == stamp
            })
        }
    }

    @Test("entry calls: mkdir, symlink, setAttributes, probe, barrier, leftovers (keepsync's and rsync's)")
    func entryCalls() async throws {
        try await offThePool {
            let f = try Fixture("entryCalls")
            let dir = try f.mirror.makeDirectory(RelativePath("d"), mode: 0o700)
            #expect(dir.kind == .directory && dir.mode == 0o700)
            let stamp = Timespec(seconds: 1_500_000_000, nanoseconds: 5)
            let link = try f.mirror.makeSymlink(RelativePath("d/l"), target: Self.b("../t a\n"), mtime: stamp)
            #expect(link.kind == .symlink && link.mtime == stamp)
            #expect(try LiveFS.readlink(f.rem(Self.b("d/l"))) == Self.b("../t a\n"))
            _ = try f.mirror.makeSymlink(RelativePath("d/l"), target: Self.b("replaced"), mtime: stamp)
            #expect(try LiveFS.readlink(f.rem(Self.b("d/l"))) == Self.b("replaced"))
            try f.mirror.setAttributes(RelativePath("d"), mode: 0o751, mtime: Timespec(seconds: 1_400_000_000, nanoseconds: 999_999_999))
            let st = try #require(LiveFS.lstat(f.rem(Self.b("d"))))
            #expect(st.st_mode & 0o7777 == 0o751 && Self.mtime(st) == Timespec(seconds: 1_400_000_000, nanoseconds: 999_999_999))
            try f.mirror.setAttributes(.root, mode: nil, mtime: stamp)
            #expect(Self.mtime(try #require(LiveFS.lstat(f.remote))) == stamp)
            #expect(throws: KeepSyncError.self) { _ = try f.mirror.makeDirectory(RelativePath("d"), mode: 0o755) }
            try f.mirror.probe()
            try f.mirror.barrier()
            try LiveFS.writeFile(f.rem(Self.b("d/.file.Ab12Yz")), Self.b("rsync leftover"))
            let keepsyncTemp = TemporaryName.random()
            try LiveFS.writeFile(f.rem(Self.b("d/") + keepsyncTemp), Self.b("keepsync leftover"))
            #expect(try f.mirror.removeLeftoverTemporary(RelativePath("d/.file.Ab12Yz")))
            #expect(try f.mirror.removeLeftoverTemporary(RelativePath(bytes: Self.b("d/") + keepsyncTemp)))
            #expect(try !f.mirror.removeLeftoverTemporary(RelativePath("d/not-a-temp")))
            #expect(try LiveFS.list(f.rem(Self.b("d"))) == [Self.b("l")])
            #expect(try LiveFS.list(f.remote).sorted { $0.lexicographicallyPrecedes($1) } == [Self.b("d")], "the probe left nothing")
            #expect(f.session.rsyncRuns == 0 && f.session.connectionsOpened == 1 && f.session.commandsRun == 10, "\(f.session.commandsRun) commands")
            let clock = ContinuousClock(), start = clock.now
            for _ in 0..<10 { _ = try f.mirror.stat(RelativePath("d")) }
            let warm = (clock.now - start) / 10
            f.session.close()
            #expect(throws: KeepSyncError.self) { _ = try f.mirror.stat(RelativePath("d")) }
            #expect(f.session.commandsRun == 20 && f.session.connectionsOpened == 1)
            print("RemoteMirrorTests: entries: \(f.session.commandsRun) ssh commands over 1 connection, a stat over the open master takes \(warm)")
        }
    }

    @Test("a paused sshd fails a call as unreachable within the session's timeout; resumed, the next call reconnects")
    func pausedRemoteIsUnreachableThenReconnects() async throws {
        try await offThePool {
            let f = try Fixture("pausedRemoteIsUnreachableThenReconnects", command: .seconds(3))
            try LiveFS.writeFile(f.rem(Self.b("x")), Self.b("x"))
            #expect(try f.mirror.stat(RelativePath("x"))?.size == 1)
            let logins = f.sshd.acceptedLogins
            try f.sshd.pause()
            let clock = ContinuousClock(), start = clock.now
            var failure: KeepSyncError?
            do { _ = try f.mirror.stat(RelativePath("x")) } catch let error as KeepSyncError { failure = error }
            let took = clock.now - start
            #expect(failure?.code == .unreachable, "\(String(describing: failure))")
            #expect(took < .seconds(10), "noticed in \(took)")
            // While paused, a new connection fails by ConnectTimeout, also as unreachable.
            var second: KeepSyncError?
            do { try f.mirror.probe() } catch let error as KeepSyncError { second = error }
            #expect(second?.code == .unreachable, "\(String(describing: second))")
            f.sshd.resume()
            #expect(try f.mirror.stat(RelativePath("x"))?.size == 1, "works again after resume")
            #expect(f.session.connectionsOpened == 3, "the first, the failed reopen, the reconnect")
            #expect(f.sshd.acceptedLogins == logins + 1, "one new login after resume")
            #expect(f.session.shellsStarted == f.session.connectionsOpened, "one remote shell per connection (the failed one too)")
            print("RemoteMirrorTests: paused: a call over the stalled master failed as unreachable in \(took), a new connection "
                  + "failed too (\(second.map { $0.message } ?? "")); after resume 1 new login, \(f.session.connectionsOpened) connections opened")
        }
    }

    /// A session to `sshd` offering no key it takes.
    static func sessionWithARefusedKey(_ sshd: LoopbackSSHD) throws -> RemoteSession {
        var words = sshd.sshArguments
        let key = try #require(words.firstIndex(of: sshd.userKey))
        words[key] = "/dev/null"
        return try RemoteSession(ssh: words.map { Array($0.utf8) }, destination: sshd.destination, host: sshd.host)
    }

    @Test("a key the server does not take is an authentication failure")
    func authenticationFailure() async throws {
        try await offThePool {
            let sshd = try LoopbackSSHDTests.startOrSkip("authenticationFailure")
            defer { sshd.stop() }
            let session = try Self.sessionWithARefusedKey(sshd)
            defer { session.close() }
            var failure: RemoteFailure?
            do { _ = try session.run(Self.b("true")) } catch { failure = error as? RemoteFailure }
            #expect(failure?.kind == .authentication, "\(String(describing: failure))")
            #expect(session.connectionsOpened == 1 && session.commandsRun == 0)
            print("RemoteMirrorTests: authentication: \(failure.map(\.description) ?? "none")")
        }
    }

    @Test("a stopped sshd: every call throws KeepSyncError .unreachable naming the host; an install fails each path so")
    func stoppedRemoteIsUnreachable() async throws {
        try await offThePool {
            let f = try Fixture("stoppedRemoteIsUnreachable")
            for name in ["a", "b"] { try LiveFS.writeFile(f.src(Self.b(name)), Self.b(name)) }
            try LiveFS.writeFile(f.rem(Self.b("x")), Self.b("x"))
            #expect(try f.mirror.stat(RelativePath("x"))?.size == 1, "reachable first: the master is up")
            f.sshd.stop()
            var failed: [String] = []
            func unreachable(_ what: String, _ body: () throws -> Void) {
                do {
                    try body()
                    Issue.record("\(what) did not fail")
                } catch let error as KeepSyncError {
                    #expect(error.code == .unreachable && error.message.hasPrefix("\(f.sshd.host) unreachable: "), "\(what): \(error)")
                    failed.append(what)
                } catch { Issue.record("\(what): not a KeepSyncError: \(type(of: error)): \(error)") }
            }
            let x = RelativePath("x"), stamp = Timespec(seconds: 1, nanoseconds: 0)
            unreachable("stat") { _ = try f.mirror.stat(x) }
            unreachable("statAll") { _ = try f.mirror.statAll([x, RelativePath("y")]) }
            unreachable("list") { _ = try f.mirror.list(.root) }
            unreachable("listTree") { _ = try f.mirror.listTree() }
            unreachable("readLink") { _ = try f.mirror.readLink(x) }
            unreachable("open") { _ = try f.mirror.open(x) }
            unreachable("mkdir") { _ = try f.mirror.makeDirectory(RelativePath("d"), mode: 0o755) }
            unreachable("symlink") { _ = try f.mirror.makeSymlink(RelativePath("l"), target: Self.b("x"), mtime: stamp) }
            unreachable("remove") { try f.mirror.remove(x) }
            unreachable("rename") { try f.mirror.rename(x, to: RelativePath("z")) }
            unreachable("setAttributes") { try f.mirror.setAttributes(x, mode: 0o600, mtime: stamp) }
            unreachable("barrier") { try f.mirror.barrier() }
            unreachable("probe") { try f.mirror.probe() }
            unreachable("removeLeftoverTemporary") { _ = try f.mirror.removeLeftoverTemporary(RelativePath(".x.AbC123")) }
            unreachable("beginPass") { try f.mirror.beginPass() }
            let paths = [RelativePath("a"), RelativePath("b")]
            for (path, result) in f.mirror.install(paths, from: f.sourceFS, io: .serial, logger: .silent) {
                unreachable("install \(path.escaped)") {
                    _ = try result.get()
                    #expect(Bool(false), "installed")
                }
                if case .failure(let error as KeepSyncError) = result { #expect(error.path == path) }
            }
            #expect(failed.count == 17, "\(failed)")
            #expect(f.session.rsyncRuns == 0, "the pre-stat failed first")
            print("RemoteMirrorTests: stopped sshd: \(failed.count) calls failed as unreachable (\(failed.joined(separator: ", "))) "
                  + "after \(f.session.connectionsOpened) connections")
        }
    }

    @Test("a key the server does not take: the mirror's calls fail as unreachable, saying authentication failed")
    func authenticationFailureThroughTheMirror() async throws {
        try await offThePool {
            let sshd = try LoopbackSSHDTests.startOrSkip("authenticationFailureThroughTheMirror")
            defer { sshd.stop() }
            let session = try Self.sessionWithARefusedKey(sshd)
            defer { session.close() }
            let mirror = RemoteMirror(session: session, target: RemoteTarget(user: sshd.user, host: sshd.host, directory: Self.b("/tmp")),
                                      sourceRoot: Self.b("/tmp"))
            var errors: [KeepSyncError] = []
            for call in [{ _ = try mirror.stat(.root) }, { try mirror.barrier() }, { try mirror.beginPass() }] as [() throws -> Void] {
                do { try call() } catch let error as KeepSyncError { errors.append(error) } catch { Issue.record("\(error)") }
            }
            #expect(errors.count == 3)
            for error in errors {
                #expect(error.code == .unreachable && error.message.contains("authentication"), "\(error)")
            }
            #expect(ExitCode(failure: errors[0]) == .failure)
            #expect(session.connectionsOpened == 3 && session.commandsRun == 0, "each call tried to log in, none ran")
            print("RemoteMirrorTests: authentication through the mirror: \(errors.count) calls failed: \(errors[0])")
        }
    }

    @Test("rsync's version line parses; --fsync from 3.2.4 on; shell quoting of DIR")
    func parsing() {
        #expect(RemoteRsyncVersion(line: "rsync  version 3.2.3  protocol version 31").hasFsync == false)
        #expect(RemoteRsyncVersion(line: "rsync  version v3.2.4  protocol version 31").hasFsync == true)
        #expect(RemoteRsyncVersion(line: "rsync  version 3.5.0  protocol version 32").version == (3, 5, 0))
        #expect(RemoteScript.quoted(Self.b("it's")) == Self.b("'it'\\''s'"))
        #expect(RemoteMirror.isRsyncTemporary(Self.b(".name.AbC123")) && !RemoteMirror.isRsyncTemporary(Self.b(".name.AbC12")))
        #expect(ReplyReader.timespec("1796427311.0381641300") == Timespec(seconds: 1_796_427_311, nanoseconds: 38_164_130))
    }
}
