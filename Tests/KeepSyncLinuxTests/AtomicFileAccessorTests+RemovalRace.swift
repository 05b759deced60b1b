import CKeepSyncShims
import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import KeepSyncTestSupport
import Synchronization
import Testing

/// Confined while removing (issue 36, class 4): `remove` of a mirror tree looks at each
/// entry (lstat) and then opens it; another process that swaps a directory for a link
/// to outside between the two must not lead the removal outside.
extension AtomicFileAccessorTests {
    /// Subdirectories of the tree removed in each round, and entries in each.
    static let raceDirectories = 48
    static let raceEntriesPerDirectory = 3
    /// Everything in the tree: itself, and per directory itself, its entries, `a`'s and `b`'s.
    static let raceTreeEntries = 1 + raceDirectories * (1 + raceEntriesPerDirectory + 2 + 1)

    @Test("a tree under removal whose directories another thread keeps swapping for a link to a full outside directory and back (RENAME_EXCHANGE), hundreds of removals: nothing outside changes")
    func removalRacingSwapsChangesNothingOutside() async throws {
        try await offThePool {
            let s = try Sandbox()
            defer { s.cleanup() }
            try Self.fillOutside(s.canaryPath)
            let outside = Self.snapshot(s.canaryPath)
            try #require(outside.count == 1 + 24 + 3 * (1 + 8 + 1 + 4), "the outside directory is full: \(outside.count) entries")

            let clock = ContinuousClock(), start = clock.now
            var rounds = 0, removals = 0, swapsDuring = 0, refusedAtOpen = 0, refusedLater = 0, unfinished = 0
            var otherErrors: [String] = [], escaped = false
            // A thousand removals, or as many as 45 s allow (a few hundred beside other tests).
            while removals < 1000 && clock.now - start < .seconds(45) {
                rounds += 1
                try Self.buildRaceTree(s.inMirror(Self.p("victim")))
                let swapper = RemovalSwapper(mirror: s.mirrorPath, tree: Self.b("victim"), linkTo: s.canaryPath)
                try #require(eventuallyBlocking(timeout: .seconds(10), every: .milliseconds(1)) { swapper.swaps > 0 },
                             "the swapping thread never swapped: \(swapper.failure ?? "no error")")
                // A refusal stops a removal where it met a swapped directory; the next one goes
                // on from there (as the engine's retry would), still under the swaps.
                var removed = false
                for _ in 0..<4 * Self.raceDirectories where !removed {
                    removals += 1
                    swapper.removing(true)
                    defer { swapper.removing(false) }
                    do {
                        try s.mirror.remove(Self.p("victim"))
                        removed = true
                    } catch let refusal as KeepSyncError {
                        switch refusal.errno {
                        case ENOTDIR?, ELOOP?:
                            // It met a link where it had seen a directory: at the open, or at the
                            // rmdir after emptying it. The directory being swapped now is the one
                            // it stopped at; still full, it was never opened: the open refused.
                            if let target = swapper.target, Self.stillFull(target, s) { refusedAtOpen += 1 } else { refusedLater += 1 }
                        case EISDIR?:
                            // It saw the link, and its unlink met the directory.
                            refusedLater += 1
                        default: otherErrors.append("\(refusal)")
                        }
                    }
                }
                let (during, failure) = swapper.stop()
                swapsDuring += during
                if let failure { Issue.record("round \(rounds): the swapping thread failed: \(failure)") }
                if !removed { unfinished += 1 }
                let now = Self.snapshot(s.canaryPath)
                guard now == outside else {
                    escaped = true
                    let changed = Set(outside.keys).union(now.keys).filter { outside[$0] != now[$0] }
                    Issue.record("round \(rounds): a removal changed the outside directory: \(changed.count) entries, e.g. \(changed.sorted { $0.lexicographicallyPrecedes($1) }.prefix(5).map { ByteEscaping.escape($0) })")
                    break
                }
                // Directories stranded at the swapper's names, and a tree the swaps kept from
                // going: removed without a race.
                for name in ContractPOSIX.names(s.mirrorPath) ?? [] {
                    #expect(throws: Never.self) { try s.mirror.remove(RelativePath(bytes: name)) }
                }
                try #require(ContractPOSIX.names(s.mirrorPath) == [], "the mirror is empty again after round \(rounds)")
            }
            let seconds = Double((clock.now - start) / .milliseconds(1)) / 1000
            print("AtomicFileAccessorTests: \(rounds) trees of \(Self.raceTreeEntries) entries (\(unfinished) not gone under the swaps) in \(seconds) s, \(removals) removals, "
                  + "with \(swapsDuring) swaps for a link to outside while they ran: \(refusedAtOpen) refused a link at the open after "
                  + "the look saw a directory, \(refusedLater) met the other kind at the rmdir or unlink; outside \(escaped ? "changed" : "unchanged") (\(outside.count) entries)")
            guard !escaped else { return }
            #expect(otherErrors.isEmpty, "removals failed otherwise: \(otherErrors.prefix(3))")
            #expect(removals >= 200, "only \(removals) removals in 45 s")
            #expect(swapsDuring > removals, "the swaps reached the removals: \(swapsDuring) during \(removals) removals")
            // Swaps landed between a removal's look and its act (at the open itself only a few
            // per run here; without O_NOFOLLOW there, one of the first hundred or so escapes).
            #expect(refusedAtOpen + refusedLater > 0, "no swap ever landed between a removal's look and its act (\(removals) removals)")
        }
    }

    /// `victim`: `raceDirectories` directories, each with 2 files and `a/` (a file and
    /// `b/` with one more): many directories, each a window between a look and an open.
    static func buildRaceTree(_ root: [UInt8]) throws {
        try ContractPOSIX.makeDirectory(root, mode: 0o755)
        for d in 0..<raceDirectories {
            let dir = root + b("/d\(d < 10 ? "0" : "")\(d)")
            try ContractPOSIX.makeDirectory(dir, mode: 0o755)
            for f in 0..<2 { try ContractPOSIX.writeFile(dir + b("/f\(f)"), b("\(d).\(f)"), mode: 0o644, mtime: nil) }
            try ContractPOSIX.makeDirectory(dir + b("/a"), mode: 0o755)
            try ContractPOSIX.makeDirectory(dir + b("/a/b"), mode: 0o700)
            try ContractPOSIX.writeFile(dir + b("/a/g"), b("g"), mode: 0o600, mtime: nil)
            try ContractPOSIX.writeFile(dir + b("/a/b/h"), b("h"), mode: 0o644, mtime: nil)
        }
    }

    /// Whether the tree directory `name` (in the tree, or stranded at the swapper's name
    /// in the mirror root) still holds all its entries.
    static func stillFull(_ name: [UInt8], _ s: Sandbox) -> Bool {
        let places = [s.mirrorPath + b("/victim/") + name, s.mirrorPath + [0x2F] + RemovalSwapper.linkName(name)]
        // Each look may find the link at both places (swapped between them): look again.
        for _ in 0..<1000 {
            for path in places { if let names = ContractPOSIX.names(path) { return names.count == raceEntriesPerDirectory } }
        }
        return false
    }

    /// The outside directory: 24 files of several modes and sizes, and 3 directories, each
    /// with 8 files and a subdirectory of 4; fixed mtimes (directories' set last).
    static func fillOutside(_ outside: [UInt8]) throws {
        for i in 0..<24 {
            try ContractPOSIX.writeFile(outside + b("/file\(i)"), [UInt8](repeating: UInt8(i), count: 100 * i),
                                        mode: [0o644, 0o600, 0o755][i % 3], mtime: t2)
        }
        for d in 0..<3 {
            let dir = outside + b("/dir\(d)")
            try ContractPOSIX.makeDirectory(dir, mode: 0o755)
            for i in 0..<8 { try ContractPOSIX.writeFile(dir + b("/inner\(i)"), b("outside \(d).\(i)"), mode: 0o644, mtime: t2) }
            try ContractPOSIX.makeDirectory(dir + b("/deeper"), mode: 0o750)
            for i in 0..<4 { try ContractPOSIX.writeFile(dir + b("/deeper/leaf\(i)"), b("leaf \(i)"), mode: 0o640, mtime: t2) }
            try ContractPOSIX.setTimes(dir + b("/deeper"), t2)
            try ContractPOSIX.setTimes(dir, t2)
        }
        try ContractPOSIX.setTimes(outside, t2)
    }

    /// Every entry at or below `root` (relative path, "" for itself): its lstat and its
    /// bytes (files) or names (directories). Links are not followed.
    static func snapshot(_ root: [UInt8], _ relative: [UInt8] = []) -> [[UInt8]: OutsideEntry] {
        let path = relative.isEmpty ? root : root + [0x2F] + relative
        guard let info = ContractPOSIX.lstat(path) else { return [:] }
        guard info.isDirectory else { return [relative: OutsideEntry(info: info, bytes: ContractPOSIX.readFile(path))] }
        let names = ContractPOSIX.names(path) ?? []
        var all = [relative: OutsideEntry(info: info, bytes: Array(names.joined(separator: [0])))]
        for name in names { all.merge(snapshot(root, relative.isEmpty ? name : relative + [0x2F] + name)) { a, _ in a } }
        return all
    }

    /// One entry of `snapshot`.
    struct OutsideEntry: Equatable {
        var info: ContractPOSIX.Info
        var bytes: [UInt8]?
    }
}

/// Another process at work in a mirror tree being removed: on a thread of its own, it
/// takes the tree's directories in the order a listing gives them (the order a removal
/// meets them), and swaps each, with `renameat2(RENAME_EXCHANGE)` through descriptors
/// (never following a link), with a link to `linkTo` in the mirror root and back, over
/// and over, until the directory is gone; then the next.
final class RemovalSwapper: Sendable {
    private let stopping = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)
    private let underWay = Atomic<Bool>(false)
    private let swapCount = Atomic<Int>(0)
    private let duringCount = Atomic<Int>(0)
    /// The directory being swapped, and why the thread gave up, if it did.
    private let state = Mutex<(target: [UInt8]?, failure: String?)>((nil, nil))

    /// The name in the mirror root that the directory `name` is swapped with.
    static func linkName(_ name: [UInt8]) -> [UInt8] { Array("swap-".utf8) + name }

    init(mirror: [UInt8], tree treeName: [UInt8], linkTo target: [UInt8]) {
        let thread = Thread { [self] in
            defer { finished.store(true, ordering: .releasing) }
            func fail(_ what: String) {
                let message = "\(what): errno \(errno)"
                state.withLock { $0.failure = message }
            }
            let root = ContractPOSIX.withC(mirror) { open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard root >= 0 else { return fail("open the mirror") }
            defer { close(root) }
            let tree = ContractPOSIX.withC(treeName) { openat(root, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard tree >= 0 else { return fail("open the tree") }
            defer { close(tree) }
            for name in Self.listingOrder(tree) {
                if stopping.load(ordering: .relaxed) { return }
                let link = Self.linkName(name)
                guard ContractPOSIX.withC(target, { t in ContractPOSIX.withC(link) { symlinkat(t, root, $0) } }) == 0 else {
                    return fail("symlink \(ByteEscaping.escape(link))")
                }
                state.withLock { $0.target = name }
                let gone: Bool = ContractPOSIX.withC(name) { n in
                    ContractPOSIX.withC(link) { l in
                        while !stopping.load(ordering: .relaxed) {
                            // Gone: removed (or, while it was the link, unlinked: the directory stays at `link`).
                            guard ks_renameat2(tree, n, root, l, ks_rename_exchange()) == 0 else { return errno == ENOENT }
                            swapCount.add(1, ordering: .relaxed)
                            if underWay.load(ordering: .relaxed) { duringCount.add(1, ordering: .relaxed) }
                        }
                        return true
                    }
                }
                guard gone else { return fail("renameat2 \(ByteEscaping.escape(name))") }
            }
        }
        thread.start()
    }

    /// Successful swaps so far.
    var swaps: Int { swapCount.load(ordering: .relaxed) }
    /// The directory being swapped now.
    var target: [UInt8]? { state.withLock { $0.target } }
    /// Why the thread gave up, if it did.
    var failure: String? { state.withLock { $0.failure } }

    /// Marks the time a removal is under way: swaps then count as made during one.
    func removing(_ value: Bool) { underWay.store(value, ordering: .relaxed) }

    /// Stops the thread and waits for it: the swaps made while a removal was under way,
    /// and why it gave up, if it did.
    func stop() -> (during: Int, failure: String?) {
        stopping.store(true, ordering: .relaxed)
        let ended = eventuallyBlocking(timeout: .seconds(30), every: .milliseconds(1)) { finished.load(ordering: .acquiring) }
        return (duringCount.load(ordering: .relaxed), ended ? failure : "did not stop within 30 s")
    }

    /// The directory's names in the order readdir gives them (the order `remove` meets
    /// them), directories only.
    private static func listingOrder(_ directory: Int32) -> [[UInt8]] {
        let copy = dup(directory)
        guard copy >= 0, let dir = fdopendir(copy) else { return [] }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name: [UInt8] = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name != [0x2E] && name != [0x2E, 0x2E] && entry.pointee.d_type == UInt8(DT_DIR) { names.append(name) }
        }
        return names
    }
}
