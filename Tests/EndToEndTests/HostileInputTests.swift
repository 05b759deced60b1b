import Foundation
import CKeepSyncShims
import Glibc
import KeepSyncCore
import Synchronization
import Testing
import KeepSyncTestSupport

/// Hostile inputs and races against a running agent (issue 5, item 5): awkward names and
/// paths, special files, type flips, a file rewritten in place while it is copied, and
/// two swap attacks (a mirror directory swapped for a link to an outside canary; a
/// source file or directory swapped for a link to a secret).
@Suite(.serialized, .offThePool)
struct HostileInputTests {
    /// Names as bytes: not UTF-8, newline, backslash, leading dash, 255 bytes, names that
    /// look like keepsync's temp files (mirrored like any other), spaces, a lone quote.
    static let names: [[UInt8]] = [
        [0x66, 0xFF, 0xFE, 0x80], bytes("caf") + [0xE9], bytes("new\nline"), bytes("back\\slash"), bytes("-rf"),
        bytes("--help"), bytes("-"), [UInt8](repeating: 0x6E, count: 255), bytes(".keepsync-tmp-0123456789abcdef"),
        bytes(".keepsync-tmp-short"), bytes("two  spaces "), bytes("quote\"d'"), bytes("tab\tname"), [0x01, 0x02, 0x7F],
    ]

    @Test func awkwardNamesAndAFourThousandBytePathCreatedLiveAreMirroredExactly() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        for (i, name) in Self.names.enumerated() {
            try FS.writeFile(sandbox.source / name, FS.pattern(count: 100 + i, seed: UInt64(i + 1)))
        }
        try FS.mkdir(sandbox.source / (bytes("dir-") + [0xFF]))
        try FS.writeFile(sandbox.source / (bytes("dir-") + [0xFF]) / bytes("-inner\n"), "inner\n")
        // 4,000 bytes below the root: 19 directories of 200 bytes and a 200-byte file name.
        var deep: [UInt8] = []
        for level in 0..<19 {
            let component = [UInt8](repeating: UInt8(ascii: "a") + UInt8(level), count: 200)
            deep = deep.isEmpty ? component : deep / component
            try FS.mkdir(sandbox.source / deep)
        }
        let deepFile = deep / [UInt8](repeating: 0x7A, count: 200)
        try #require(deepFile.count >= 4000)
        try FS.writeFile(sandbox.source / deepFile, "at the bottom of a 4,000-byte path\n")
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "awkward names")
        #expect(try FS.readFile(sandbox.mirror / deepFile) == bytes("at the bottom of a 4,000-byte path\n"))

        // Renaming the deep chain's top moves everything, copying nothing.
        let top = [UInt8](repeating: UInt8(ascii: "a"), count: 200)
        let deepInode = FS.lstat(sandbox.mirror / deepFile)?.inode
        try FS.rename(sandbox.source / top, sandbox.source / bytes("moved-\n-top"))
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "renamed deep chain")
        let moved = bytes("moved-\n-top") + deepFile.dropFirst(top.count)
        #expect(FS.lstat(sandbox.mirror / moved)?.inode == deepInode, "the deep file was copied, not renamed")
        #expect(Self.statusErrors(sandbox).isEmpty, "\(RunCommandTests.statusText(sandbox))")
        try await RunCommandTests.stop(agent, sandbox)
        let check = try sandbox.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(check)")
    }

    @Test func aFifoWithNoWriterASocketASymlinkLoopAndALinkToEtcNeitherHangNorLeakAndAreMirroredAsLinksOrSkipped() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        try FS.mkfifo(sandbox.source / "pipe-without-writer")
        try Self.makeSocket(sandbox.source / "sock")
        try FS.symlink(target: bytes("loop-b"), at: sandbox.source / "loop-a")
        try FS.symlink(target: bytes("loop-a"), at: sandbox.source / "loop-b")
        try FS.symlink(target: bytes("self"), at: sandbox.source / "self")
        try FS.symlink(target: bytes("/etc"), at: sandbox.source / "etc-link")
        try FS.symlink(target: bytes("/etc/passwd"), at: sandbox.source / "passwd-link")
        // After them, a plain file: mirrored promptly only if nothing above hung the agent.
        try FS.writeFile(sandbox.source / "after.txt", "after the special files\n")
        let copied = await eventually(timeout: .seconds(10)) { FS.exists(sandbox.mirror / "after.txt") }
        #expect(copied, "the agent hung on a special file\n\(agent.stderrText)")
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "special files",
                                                        ignoring: [bytes("pipe-without-writer"), bytes("sock")])
        #expect(!FS.exists(sandbox.mirror / "pipe-without-writer") && !FS.exists(sandbox.mirror / "sock"))
        #expect(FS.lstat(sandbox.mirror / "etc-link")?.kind == .symlink, "the link to /etc was followed")
        #expect(try FS.readlink(sandbox.mirror / "loop-a") == bytes("loop-b"))
        #expect(FS.lstat(sandbox.mirror / "passwd-link")?.kind == .symlink)
        let warnings = agent.stderrLines.filter { $0.contains("warning") && ($0.contains("pipe-without-writer") || $0.contains("sock")) }
        #expect(warnings.count == 2, "one warning per special file: \(warnings)")
        // Nothing of /etc was copied into the mirror.
        #expect(!FS.exists(sandbox.mirror / "etc-link/passwd") || FS.lstat(sandbox.mirror / "etc-link")?.kind == .symlink)
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func aPathFlippingBetweenFileDirectoryAndSymlinkWhileTheAgentRunsConverges() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        var rng = SplitMix64(seed: CrashTests.seed ^ 0xF11F)
        let x = sandbox.source / "x"
        for flip in 0..<60 {
            if let info = FS.lstat(x) {
                if info.kind == .directory { try ScratchDirectory.removeTree(x) } else { try FS.unlink(x) }
            }
            switch flip % 4 {
            case 0: try FS.writeFile(x, "file version \(flip)\n")
            case 1:
                try FS.mkdir(x)
                try FS.writeFile(x / "child", "child \(flip)\n")
                try FS.mkdir(x / "sub")
            case 2: try FS.symlink(target: bytes("target-\(flip)"), at: x)
            default: try FS.symlink(target: bytes("dir"), at: x)
            }
            if rng.next() % 3 == 0 {
                try await Task.sleep(for: .milliseconds(Int64(rng.next() % 15)))  // random instants, not a wait
            }
        }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after 60 type flips")
        #expect(Self.statusErrors(sandbox).isEmpty, "\(RunCommandTests.statusText(sandbox))")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func aFileRewrittenInPlaceWhileItIsCopiedNeverShowsAMixOfVersionsInTheMirror() async throws {
        let sandbox = try Sandbox()
        let file = sandbox.source / "in-place.bin"
        let blocks = 128, blockSize = 64 << 10   // 8 MiB
        try Self.writeVersion(file, version: 0, order: Array(0..<blocks), blockSize: blockSize, truncate: true)
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "version 0")

        // A writer rewrites the file in place (no truncate, no rename), one pwrite per block,
        // seldom quiet for --settle: copies are made between its writes (and by --max-delay).
        // Every tenth version stops halfway for longer than --settle, as a writer descheduled
        // mid-version on a loaded machine does: the source itself then holds part of the new
        // version over the one before. The mirror may hold any state the source had, these
        // included (SPEC, Atomic); never a copy torn by a write made while it was read. Each
        // version goes in in a shuffled order of its own, so that such a copy (read front to
        // back) is nearly always a state the source never had.
        let stop = Mutex(false), begun = Mutex<UInt64>(0), failure = Mutex<String?>(nil)
        let writer = Thread {
            var rng = SplitMix64(seed: 0x1A9)
            var version: UInt64 = 1
            while !stop.withLock({ $0 }) {
                begun.withLock { $0 = version }
                let order = Self.writeOrder(version, blocks: blocks)
                let parts = version % 10 == 5 ? [Array(order[..<(blocks / 2)]), Array(order[(blocks / 2)...])] : [order]
                do {
                    for (i, part) in parts.enumerated() {
                        if i > 0 { usleep(150_000) }
                        try Self.writeVersion(file, version: version, order: part, blockSize: blockSize, truncate: false)
                    }
                } catch {
                    failure.withLock { $0 = "version \(version): \(error)" }
                    return
                }
                version += 1
                usleep(UInt32(rng.next() % 30_000))
            }
        }
        writer.start()
        var samples = 0, torn: [String] = [], seen: Set<UInt64> = [], partial = 0
        let until = ContinuousClock.now + .seconds(4)
        while ContinuousClock.now < until {
            if let content = try? FS.readFile(sandbox.mirror / "in-place.bin") {
                samples += 1
                // Read after the file: every version the copy can hold had begun by then.
                switch Self.sourceState(content, blocks: blocks, blockSize: blockSize, begun: begun.withLock { $0 }) {
                case .success(let state):
                    seen.insert(state.version)
                    if state.blocksWritten < blocks { partial += 1 }
                case .failure(let why): torn.append(why.text)
                }
            }
        }
        stop.withLock { $0 = true }
        while !writer.isFinished { usleep(1000) }
        #expect(failure.withLock { $0 } == nil, "the writer failed: \(failure.withLock { $0 } ?? "")")
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after the writer stopped")
        #expect(torn.isEmpty, "\(torn.count) of \(samples) mirror reads held a state the source never had: \(torn.prefix(5))")
        #expect(seen.count >= 2, "only versions \(seen) reached the mirror while \(begun.withLock { $0 }) were written")
        #expect(partial > 0, "no mirror read held a version written in part: the writer's pauses were never copied")
        print("HostileInputTests: in-place rewrites: \(begun.withLock { $0 }) versions written, \(seen.count) reached the mirror, \(samples) reads, \(partial) of a version written in part (the source's own state), \(torn.count) torn")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func theInPlaceRewriteOracleAcceptsExactlyTheStatesTheWriterPassesThrough() throws {
        let blocks = 16, blockSize = 16
        func content(_ version: (Int) -> UInt64, header: (Int) -> Int = { $0 }) -> [UInt8] {
            (0..<blocks).flatMap { i in
                withUnsafeBytes(of: version(i).littleEndian, Array.init) + withUnsafeBytes(of: UInt64(header(i)).littleEndian, Array.init)
            }
        }
        func state(_ bytes: [UInt8], begun: UInt64 = 5) -> SourceState? {
            try? Self.sourceState(bytes, blocks: blocks, blockSize: blockSize, begun: begun).get()
        }
        let order = Self.writeOrder(5, blocks: blocks)
        for k in 0...blocks {
            let done = Set(order.prefix(k))
            let got = state(content { done.contains($0) ? 5 : 4 })
            #expect(got?.version == (k == 0 ? 4 : 5) && got?.blocksWritten == (k == 0 ? blocks : k), "\(k) blocks written: \(String(describing: got))")
        }
        // Copies torn by the writer: read in block order while version 5 went in in its own
        // order (the first half read before it); three versions; a version not yet begun.
        let firstHalfOld = content { $0 < blocks / 2 ? 4 : 5 }
        try #require(Set(order.prefix(blocks / 2)) != Set(blocks / 2..<blocks), "the seed's order writes the second half first")
        #expect(state(firstHalfOld) == nil)
        #expect(state(content { [order[0]: 5, order[1]: 3][$0] ?? 4 }) == nil)
        #expect(state(content { _ in 6 }) == nil)
        #expect(state(content({ _ in 5 }, header: { $0 == 3 ? 4 : $0 })) == nil)
    }

    @Test func aMirrorDirectorySwappedForALinkToAnOutsideCanaryWhileTheSourceChangesLeavesTheCanaryEmpty() async throws {
        let sandbox = try Sandbox()
        try FS.mkdir(sandbox.source / "sub")
        for i in 0..<20 { try FS.writeFile(sandbox.source / "sub/f\(i)", "file \(i)\n") }
        let canary = sandbox.root / "canary"
        try FS.mkdir(canary)
        let agent = try await RunCommandTests.start(sandbox, ["--max-delete", "100"])
        defer { agent.killNow() }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "initial sync")

        let mirrorSub = sandbox.mirror / "sub"
        let swapper = MirrorSwapper(mirrorSub, linkTo: canary, seed: 0)
        for round in 0..<200 {
            try FS.writeFile(sandbox.source / "sub/new-\(round)", "new \(round)\n")
            try FS.writeFile(sandbox.source / "sub/f\(round % 20)", "rewritten in round \(round)\n")
            if round % 10 == 0 { try FS.mkdirs(sandbox.source / "sub/d\(round)/deeper") }
            usleep(2000)
        }
        let (swaps, _) = swapper.stop()

        let planted = try FS.list(canary)
        #expect(planted.isEmpty, "keepsync wrote through the link: \(planted.map { ByteEscaping.escape($0) })")
        agent.send(SIGUSR1)
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after the attack and a resync")
        #expect(try FS.list(canary).isEmpty)
        print("HostileInputTests: mirror directory swapped for a link \(swaps) times; canary empty")
        try await RunCommandTests.stop(agent, sandbox)
    }

    /// The race of issue 13: another process keeps swapping the mirror's `sub` for a link
    /// and back while the source changes under it. A running agent leaves no temp file
    /// anywhere (a copy whose directory moved unlinks its temp file through that directory),
    /// and a SIGUSR1 afterwards converges within 15 s under the default brake.
    @Test(arguments: [1, 2, 3, 4, 5, 6] as [UInt64])
    func aMirrorDirectorySwappedForALinkAndBackLeavesNoTempFileAndAResyncConverges(seed: UInt64) async throws {
        let sandbox = try Sandbox()
        try FS.mkdir(sandbox.source / "sub")
        for i in 0..<20 { try FS.writeFile(sandbox.source / "sub/f\(i)", "file \(i)\n") }
        for i in 0..<40 { try FS.writeFile(sandbox.source / "top\(i)", "top \(i)\n") }
        let canary = sandbox.root / "canary"
        try FS.mkdir(canary)
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "initial sync")

        let mirrorSub = sandbox.mirror / "sub"
        let swapper = MirrorSwapper(mirrorSub, linkTo: canary, seed: seed)
        for round in 0..<200 {
            try FS.writeFile(sandbox.source / "sub/new-\(round)", "new \(round)\n")
            try FS.writeFile(sandbox.source / "sub/f\(round % 20)", "rewritten in round \(round)\n")
            usleep(1500)
        }
        let (swaps, stranded) = swapper.stop()
        #expect(swaps > 10, "the race ran: \(swaps) swaps")

        // Quiet: once nothing is pending, no copy is in flight and none may have left a temp
        // file (status.json is written at most once a second: its pending count may lag).
        var temps: [String] = []
        let quiet = try await eventually(timeout: .seconds(10)) {
            temps = []
            try CrashTests.walk(sandbox.mirror) { path, name, info in
                if TemporaryName.matches(name) { temps.append(ByteEscaping.escape(path)) }
            }
            return temps.isEmpty && (RunCommandTests.status(sandbox)?["pending"] as? NSNumber)?.intValue == 0
        }
        #expect(quiet, "seed \(seed): a running agent left \(temps.count) temp files: \(temps.prefix(5)); \(RunCommandTests.statusText(sandbox))")
        let passes = agent.stderrLines.filter { $0.contains("full resync") }
        #expect(passes.isEmpty, "no full pass may have swept them: \(passes)")
        #expect(try FS.list(canary).isEmpty, "keepsync wrote through the link")

        agent.send(SIGUSR1)
        let converged = await eventually(timeout: .seconds(15)) {
            RunCommandTests.mirrorDifferences(sandbox).isEmpty
        }
        #expect(converged, "seed \(seed): no convergence 15 s after SIGUSR1 (\(stranded) times sub was made again while aside):\n\(RunCommandTests.mirrorDifferences(sandbox).prefix(10).joined(separator: "\n"))\n\(RunCommandTests.statusText(sandbox))")
        print("HostileInputTests: seed \(seed): \(swaps) swaps, sub made again \(stranded) times while aside, \(temps.count) temp files left")
        try await RunCommandTests.stop(agent, sandbox)
    }

    @Test func aSourceFileOrDirectorySwappedForALinkToASecretNeverPutsTheSecretsBytesInTheMirror() async throws {
        let sandbox = try Sandbox()
        let marker = bytes("TOP-SECRET-\(UInt64.random(in: 0...UInt64.max))")
        let secrets = sandbox.root / "secrets"
        try FS.mkdir(secrets)
        try FS.writeFile(secrets / "secret", marker + bytes("\n"))
        try FS.writeFile(secrets / "doc.txt", marker + bytes(" as doc.txt\n"))
        try FS.mkdir(sandbox.source / "inner")
        try FS.writeFile(sandbox.source / "inner/doc.txt", "public inner\n")
        try FS.writeFile(sandbox.source / "doc.txt", "public 0\n")
        let agent = try await RunCommandTests.start(sandbox)
        defer { agent.killNow() }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "initial sync")

        let stop = Mutex(false)
        let source = sandbox.source
        let swapper = Thread {
            var rng = SplitMix64(seed: 0x5EC)
            var n = 0
            while !stop.withLock({ $0 }) {
                n += 1
                let temp = source / "incoming.tmp"
                if rng.next() % 2 == 0 {
                    try? FS.writeFile(temp, "public \(n)\n")
                } else {
                    try? FS.symlink(target: secrets / "secret", at: temp)
                }
                try? FS.rename(temp, source / "doc.txt")
                // The directory too: swapped for a link to the secrets directory and back.
                if rng.next() % 4 == 0, (try? FS.rename(source / "inner", source / "inner.real")) != nil {
                    try? FS.symlink(target: secrets, at: source / "inner")
                    usleep(UInt32(rng.next() % 2000))
                    try? FS.unlink(source / "inner")
                    try? FS.rename(source / "inner.real", source / "inner")
                }
                usleep(UInt32(rng.next() % 3000))
            }
        }
        swapper.start()
        var leaks: [String] = [], scans = 0
        let until = ContinuousClock.now + .seconds(3)
        while ContinuousClock.now < until {
            scans += 1
            leaks += Self.filesContaining(marker, under: sandbox.mirror)
        }
        stop.withLock { $0 = true }
        while !swapper.isFinished { usleep(1000) }
        try await RunCommandTests.expectMirrorConverges(sandbox, agent, "after the swaps stopped")
        leaks += Self.filesContaining(marker, under: sandbox.mirror)
        #expect(leaks.isEmpty, "the secret's bytes appeared in the mirror at \(Set(leaks)) (\(scans) scans)")
        try await RunCommandTests.stop(agent, sandbox)
    }
}

// MARK: - Helpers

extension HostileInputTests {
    static func statusErrors(_ sandbox: Sandbox) -> [[String: Any]] {
        RunCommandTests.status(sandbox)?["errors"] as? [[String: Any]] ?? []
    }

    /// A listening-less unix socket bound at `path` (the inode stays after close).
    static func makeSocket(_ path: [UInt8]) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw FSError(call: "socket", path: path, code: errno) }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        try #require(path.count < capacity, "socket path too long for sun_path")
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (i, b) in path.enumerated() { buffer[i] = b }
            buffer[path.count] = 0
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { throw FSError(call: "bind", path: path, code: errno) }
    }

    /// Writes `version` over the file, one pwrite per block in `order`: each block holds
    /// the version and its index in its first 16 bytes, the same pattern after them.
    static func writeVersion(_ file: [UInt8], version: UInt64, order: [Int], blockSize: Int, truncate: Bool) throws {
        let fd = FS.withCPath(file) { open($0, O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0o644) }
        guard fd >= 0 else { throw FSError(call: "open", path: file, code: errno) }
        defer { close(fd) }
        var block = FS.pattern(count: blockSize, seed: 77)
        for index in order {
            withUnsafeBytes(of: version.littleEndian) { v in block.withUnsafeMutableBytes { $0.copyMemory(from: v) } }
            withUnsafeBytes(of: UInt64(index).littleEndian) { i in
                block.withUnsafeMutableBytes { UnsafeMutableRawBufferPointer(rebasing: $0[8..<16]).copyMemory(from: i) }
            }
            let n = block.withUnsafeBytes { pwrite(fd, $0.baseAddress, blockSize, off_t(index * blockSize)) }
            guard n == blockSize else { throw FSError(call: "pwrite", path: file, code: errno) }
        }
    }

    /// The order in which `version` (from 1) writes its blocks: a shuffle seeded by the version.
    static func writeOrder(_ version: UInt64, blocks: Int) -> [Int] {
        var order = Array(0..<blocks), rng = SplitMix64(seed: version)
        for i in stride(from: blocks - 1, to: 0, by: -1) { order.swapAt(i, Int(rng.next() % UInt64(i + 1))) }
        return order
    }

    /// A state the rewritten file passes through: `version`'s first `blocksWritten` blocks
    /// (in `writeOrder`) written over the version before it.
    struct SourceState {
        var version: UInt64
        var blocksWritten: Int
    }

    /// The state of the source `content` is a copy of, or why the source never had it:
    /// a version whose writer had begun (at most `begun`), written in full or in part
    /// over the one before it, its blocks in its `writeOrder`.
    static func sourceState(_ content: [UInt8], blocks: Int, blockSize: Int, begun: UInt64) -> Result<SourceState, MixError> {
        guard content.count == blocks * blockSize else { return .failure(MixError(text: "\(content.count) bytes")) }
        func field(_ offset: Int) -> UInt64 {
            (0..<8).reduce(UInt64(0)) { $0 | UInt64(content[offset + $1]) << (8 * $1) }
        }
        let versions = (0..<blocks).map { field($0 * blockSize) }
        if let index = (0..<blocks).first(where: { field($0 * blockSize + 8) != UInt64($0) }) {
            return .failure(MixError(text: "block \(index) holds the header of block \(field(index * blockSize + 8))"))
        }
        let top = versions.max()!
        guard top <= begun else { return .failure(MixError(text: "version \(top), but only \(begun) were begun")) }
        let written = Set(versions.indices.filter { versions[$0] == top })
        if written.count == blocks { return .success(SourceState(version: top, blocksWritten: blocks)) }
        if let index = versions.indices.first(where: { versions[$0] != top && versions[$0] != top - 1 }) {
            return .failure(MixError(text: "block \(index) holds version \(versions[index]), others versions \(top) and \(top - 1)"))
        }
        let order = writeOrder(top, blocks: blocks)
        guard written == Set(order.prefix(written.count)) else {
            let stray = order.prefix(written.count).first { !written.contains($0) }!
            return .failure(MixError(text: "\(written.count) blocks hold version \(top), but not its first \(written.count) written: block \(stray) holds version \(top - 1)"))
        }
        return .success(SourceState(version: top, blocksWritten: written.count))
    }

    struct MixError: Error, CustomStringConvertible {
        var text: String
        var description: String { text }
    }

    /// Regular files below `root` whose bytes contain `marker`.
    /// A file's bytes, opened without crossing a symlink anywhere on its path: the mirror
    /// legitimately holds links to the secrets, and a directory the walk listed may have
    /// become one by the time its file is read.
    static func readBeneath(_ root: [UInt8], _ path: [UInt8]) -> [UInt8]? {
        let dir = FS.withCPath(root) { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard dir >= 0 else { return nil }
        defer { close(dir) }
        let fd = FS.withCPath(path) { ks_openat2(dir, $0, UInt64(O_RDONLY | O_CLOEXEC), 0, ks_resolve_beneath() | ks_resolve_no_symlinks()) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var result: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return n == 0 ? result : nil }
            result += buffer[0..<n]
        }
    }

    static func filesContaining(_ marker: [UInt8], under root: [UInt8]) -> [String] {
        var hits: [String] = []
        try? CrashTests.walk(root) { path, _, info in
            guard info.kind == .regular, let content = readBeneath(root, path) else { return }
            if content.count >= marker.count, (0...(content.count - marker.count)).contains(where: { content[$0..<($0 + marker.count)].elementsEqual(marker) }) {
                hits.append(ByteEscaping.escape(path))
            }
        }
        return hits
    }
}

/// Another process at work in the mirror: on a thread of its own it renames a mirror
/// directory aside, puts a symlink to `linkTo` in its place, then puts the directory
/// back (removing whatever keepsync made there meanwhile, so nothing real stays aside),
/// at random short intervals, until `stop`.
final class MirrorSwapper {
    private final class State: Sendable {
        let counts = Mutex<(stop: Bool, swaps: Int, stranded: Int)>((false, 0, 0))
        func withLock<R>(_ body: (inout (stop: Bool, swaps: Int, stranded: Int)) -> R) -> R { counts.withLock { body(&$0) } }
    }
    private let state = State()
    private let thread: Thread

    init(_ directory: [UInt8], linkTo target: [UInt8], seed: UInt64) {
        let state = self.state
        thread = Thread {
            var rng = SplitMix64(seed: 0xA77 &+ seed)
            var n = 0
            while !state.withLock({ $0.stop }) {
                n += 1
                let aside = directory + Array("-aside-\(n)".utf8)
                guard (try? FS.rename(directory, aside)) != nil else { usleep(200); continue }
                if (try? FS.symlink(target: target, at: directory)) != nil {
                    state.withLock { $0.swaps += 1 }
                    usleep(UInt32(rng.next() % 3000))
                    try? FS.unlink(directory)
                }
                var tries = 0
                while (try? FS.rename(aside, directory)) == nil, FS.exists(aside) {
                    tries += 1
                    if FS.lstat(directory)?.kind == .symlink { try? FS.unlink(directory) } else { try? ScratchDirectory.removeTree(directory) }
                }
                if tries > 0 { state.withLock { $0.stranded += 1 } }
                usleep(UInt32(rng.next() % 2000))
            }
            if FS.lstat(directory)?.kind == .symlink { try? FS.unlink(directory) }
        }
        thread.start()
    }

    /// Stops the thread and waits for it; returns how many swaps it made, and how often
    /// keepsync had made the directory again while the real one was aside.
    func stop() -> (swaps: Int, stranded: Int) {
        state.withLock { $0.stop = true }
        while !thread.isFinished { usleep(1000) }
        return state.withLock { ($0.swaps, $0.stranded) }
    }
}
