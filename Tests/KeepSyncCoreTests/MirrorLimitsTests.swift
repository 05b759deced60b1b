import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// Issue 16: comparing within what the mirror's file system holds (`MirrorLimits`), in
/// the planner, the scanner and the vanished-mirror rule.
@Suite("MirrorLimits")
struct MirrorLimitsTests {
    /// What the probe finds on exFAT through exfat-fuse.
    static var exfat: MirrorLimits {
        var l = MirrorLimits(fileSystem: "fuseblk")
        l.symlinks = false
        l.permissions = false
        l.mtimeGranularity = 1_000_000_000
        l.foldsCase = true
        l.foldsUnicodeCase = true
        l.refusedBytes = Array(0x01...0x1F) + Array(":*?\"<>|\\".utf8).sorted()
        l.refusesInvalidUTF8 = true
        l.syncfsReaches = false
        l.stableInodes = false
        return l
    }

    static func t(_ seconds: Int64, _ ns: Int64) -> Timespec { Timespec(seconds: seconds, nanoseconds: ns) }

    @Test("mtimes are equal within the granularity and exactly without one")
    func mtimes() {
        let l = Self.exfat
        #expect(l.mtimesEqual(Self.t(10, 900_000_000), Self.t(10, 0)))
        #expect(l.mtimesEqual(Self.t(10, 0), Self.t(10, 999_999_999)))
        #expect(!l.mtimesEqual(Self.t(10, 0), Self.t(11, 0)))
        #expect(!l.mtimesEqual(Self.t(9, 999_999_999), Self.t(11, 0)))
        var ntfs = MirrorLimits()
        ntfs.mtimeGranularity = 100
        #expect(ntfs.mtimesEqual(Self.t(5, 123_456_789), Self.t(5, 123_456_700)))
        #expect(!ntfs.mtimesEqual(Self.t(5, 123_456_789), Self.t(5, 123_456_600)))
        #expect(MirrorLimits.none.mtimesEqual(Self.t(5, 1), Self.t(5, 1)))
        #expect(!MirrorLimits.none.mtimesEqual(Self.t(5, 1), Self.t(5, 2)))
    }

    @Test("modes are compared only where kept; mirror inodes are kept only where stable")
    func modesAndInodes() {
        #expect(Self.exfat.modesEqual(source: 0o100644, mirror: 0o100777))
        #expect(!MirrorLimits.none.modesEqual(source: 0o644, mirror: 0o777))
        #expect(MirrorLimits.none.modesEqual(source: 0o100644, mirror: 0o644))
        #expect(Self.exfat.recordedInode(77) == 0)
        #expect(MirrorLimits.none.recordedInode(77) == 77)
    }

    @Test("names the file system refuses are named with why; others pass")
    func refusals() {
        let l = Self.exfat
        #expect(l.refusal(of: Array("a:b".utf8))?.contains(":") == true)
        #expect(l.refusal(of: [0x61, 0x01]) != nil)
        #expect(l.refusal(of: [0x63, 0x61, 0x66, 0xE9])?.contains("UTF-8") == true)
        #expect(l.refusal(of: Array("café".utf8)) == nil)
        #expect(l.refusal(of: Array("nul.txt".utf8)) == nil)
        var windows = MirrorLimits()
        windows.refusesTrailingDotOrSpace = true
        windows.refusesDeviceNames = true
        #expect(windows.refusal(of: Array("name.".utf8)) != nil)
        #expect(windows.refusal(of: Array("name ".utf8)) != nil)
        for name in ["CON", "nul.txt", "Com1", "lpt9.tar.gz"] { #expect(windows.refusal(of: Array(name.utf8)) != nil, "\(name)") }
        for name in ["CONSOLE", "com0", "lpt10", "null.txt", "a.con"] { #expect(windows.refusal(of: Array(name.utf8)) == nil, "\(name)") }
        #expect(MirrorLimits.none.refusal(of: Array("a:b.".utf8) + [0xFF]) == nil)
    }

    @Test("case keys fold ASCII, and Unicode where the file system does")
    func caseKeys() {
        var l = Self.exfat
        #expect(l.caseKey(Array("Photo.JPG".utf8)) == l.caseKey(Array("photo.jpg".utf8)))
        #expect(l.caseKey(Array("É".utf8)) == l.caseKey(Array("é".utf8)))
        l.foldsUnicodeCase = false
        #expect(l.caseKey(Array("É".utf8)) != l.caseKey(Array("é".utf8)))
        #expect(MirrorLimits.none.caseKey(Array("A".utf8)) != MirrorLimits.none.caseKey(Array("a".utf8)))
    }

    @Test("the limits survive their encoding, for any combination")
    func encoding() {
        var rng = SplitMix64(seed: 16)
        for _ in 0..<200 {
            var l = MirrorLimits(fileSystem: String(repeating: "x", count: Int(rng.next() % 40)))
            l.symlinks = rng.next() % 2 == 0
            l.permissions = rng.next() % 2 == 0
            l.foldsCase = rng.next() % 2 == 0
            l.foldsUnicodeCase = rng.next() % 2 == 0
            l.refusesInvalidUTF8 = rng.next() % 2 == 0
            l.refusesTrailingDotOrSpace = rng.next() % 2 == 0
            l.refusesDeviceNames = rng.next() % 2 == 0
            l.syncfsReaches = rng.next() % 2 == 0
            l.stableInodes = rng.next() % 2 == 0
            l.mtimeGranularity = Int64(rng.next() % 3_000_000_000)
            l.refusedBytes = (0..<Int(rng.next() % 10)).map { _ in UInt8(rng.next() % 256) }
            #expect(MirrorLimits(encoded: l.encoded) == l)
        }
        var fat = Self.exfat
        fat.maxFileSize = 4_294_967_295
        #expect(MirrorLimits(encoded: fat.encoded) == fat)
        #expect(MirrorLimits(encoded: [2] + Self.exfat.encoded.dropFirst()) == nil, "another version is not read")
        #expect(MirrorLimits(encoded: Array(Self.exfat.encoded.dropLast())) == nil, "a short encoding is not read")
    }

    @Test("the summary says what the mirror cannot hold, in the SPEC's words")
    func summary() {
        #expect(Self.exfat.summary.hasPrefix("no symlinks, no permission bits, mtimes to 1 s, names without case"))
        #expect(MirrorLimits.none.summary.isEmpty)
        #expect(MirrorLimits.none.holdsEverything)
        #expect(!Self.exfat.holdsEverything)
    }

    // MARK: Planner

    @Test("on exFAT an unchanged file plans nothing: mtime floored to the second, no mode bits, no stable inode")
    func plannerKeepsAnUnchangedFile() {
        let planner = Planner(limits: Self.exfat)
        let path = RelativePath("f")
        let source = FileStat(kind: .regular, mode: 0o640, size: 42, mtime: Self.t(1_700_000_000, 700_000_000), device: 1, inode: 10)
        var mirror = source
        mirror.mtime = Self.t(1_700_000_000, 0)
        mirror.mode = 0o777
        mirror.device = 7
        mirror.inode = 3
        let record = FileRecord(path: path, source: source, mirrorInode: 0)
        #expect(planner.plan(PathState(path: path, source: source, record: record, mirror: mirror)) == [])
        #expect(planner.plan(PathState(path: path, source: source, record: nil, mirror: mirror)) == [.updateRecord(record)])
        // Without the limits the same mirror file is copied again.
        #expect(Planner().plan(PathState(path: path, source: source, record: record, mirror: mirror)) == [.copyFile(path)])
        // A second later is a change.
        mirror.mtime = Self.t(1_699_999_999, 0)
        #expect(planner.plan(PathState(path: path, source: source, record: record, mirror: mirror)) == [.copyFile(path)])
    }

    @Test("a symlink, or a name the mirror refuses, is skipped with why; what stood there goes")
    func plannerSkips() {
        let planner = Planner(limits: Self.exfat)
        let link = FileStat(kind: .symlink, mode: 0o777, size: 3, mtime: Self.t(1, 0), device: 1, inode: 11)
        let linkPath = RelativePath("link")
        let actions = planner.plan(PathState(path: linkPath, source: link, sourceLink: Array("abc".utf8), record: nil, mirror: nil))
        #expect(actions == [.skipUnholdable(linkPath, reason: "the mirror's file system holds no symlinks")])
        let file = FileStat(kind: .regular, mode: 0o644, size: 1, mtime: Self.t(1, 0), device: 1, inode: 12)
        let old = FileStat(kind: .regular, mode: 0o777, size: 9, mtime: Self.t(0, 0), device: 7, inode: 4)
        #expect(planner.plan(PathState(path: linkPath, source: link, record: nil, mirror: old)).first == .remove(linkPath))
        let colon = RelativePath("a:b")
        guard case .skipUnholdable(colon, let reason)? = planner.plan(PathState(path: colon, source: file, record: nil, mirror: nil)).first
        else { Issue.record("a:b not skipped"); return }
        #expect(reason.contains(":"))
    }

    // MARK: Scanner

    /// A scanner over two in-memory trees with `limits` recorded.
    static func scan(_ source: InMemoryTree, _ mirror: InMemoryTree, limits: MirrorLimits) throws -> SyncScan {
        var records = RecordSet()
        records.mirror = MirrorRoot(identity: FileIdentity(device: 2, inode: 1), fileSystem: [], limits: limits)
        return try TreeScanner(source: source, mirror: mirror, records: records, options: SyncOptions()).scan()
    }

    @Test("two source names that differ only in case: the one sorted first is mirrored, the other skipped")
    func caseCollision() throws {
        let source = InMemoryTree(device: 1), mirror = InMemoryTree(device: 2)
        source.writeFile(RelativePath("Readme.md"), Array("one".utf8))
        source.writeFile(RelativePath("README.md"), Array("two".utf8))
        let scan = try Self.scan(source, mirror, limits: Self.exfat)
        #expect(scan.unholdable.map(\.path) == [RelativePath("Readme.md")])
        let copies = scan.steps.compactMap { step -> RelativePath? in
            if case .path(let state, let actions, _) = step, actions.contains(.copyFile(state.path)) { return state.path }
            return nil
        }
        #expect(copies == [RelativePath("README.md")])
        // A case-sensitive mirror holds both.
        #expect(try Self.scan(source, mirror, limits: .none).unholdable.isEmpty)
    }

    @Test("a case-only rename in the source is a rename in the mirror: nothing removed, nothing copied")
    func caseOnlyRename() throws {
        let source = InMemoryTree(device: 1), mirror = InMemoryTree(device: 2)
        let mtime = Self.t(1_700_000_000, 0)
        source.writeFile(RelativePath("photo.jpg"), Array("pixels".utf8), mtime: mtime)
        mirror.writeFile(RelativePath("Photo.JPG"), Array("pixels".utf8), mtime: mtime)
        let scan = try Self.scan(source, mirror, limits: Self.exfat)
        var actions: [SyncAction] = []
        for case .path(_, let a, _) in scan.steps { actions += a }
        #expect(actions.first == .renameFrom(RelativePath("Photo.JPG"), to: RelativePath("photo.jpg")))
        #expect(!actions.contains { $0.isDeletion }, "\(actions)")
        #expect(!actions.contains(.copyFile(RelativePath("photo.jpg"))))
        #expect(scan.deletions == 0)
        // Where names have case, the old name goes and the new one is copied.
        var plain: [SyncAction] = []
        for case .path(_, let a, _) in try Self.scan(source, mirror, limits: .none).steps { plain += a }
        #expect(plain.contains(.remove(RelativePath("Photo.JPG"))) && plain.contains(.copyFile(RelativePath("photo.jpg"))))
    }

    @Test("a file the mirror refuses as too large (EFBIG) is skipped, not failed, and the size is learned")
    func tooLarge() throws {
        let source = InMemoryTree(device: 1), mirror = InMemoryTree(device: 2)
        source.writeFile(RelativePath("small"), [UInt8](repeating: 1, count: 10))
        source.writeFile(RelativePath("big"), [UInt8](repeating: 2, count: 100))
        source.writeFile(RelativePath("bigger"), [UInt8](repeating: 3, count: 200))
        mirror.failure.withLock {
            $0 = { op, path in
                op == .install && path != RelativePath("small") ? KeepSyncError(.tooLarge, "write: File too large", path: path) : nil
            }
        }
        var records = RecordSet()
        records.mirror = MirrorRoot(identity: FileIdentity(device: 2, inode: 1), fileSystem: [], limits: .none)
        let store = InMemoryStore(records)
        var engine = SyncEngine(source: source, mirror: LocalMirror(mirror), store: store, records: records, options: SyncOptions())
        let first = try engine.fullPass().summary
        #expect(first.errors.isEmpty, "\(first.errors)")
        #expect(first.copiedFiles == 1)
        #expect(first.skippedUnholdable == 2)
        #expect(Set(engine.skipped.keys) == [RelativePath("big"), RelativePath("bigger")])
        #expect(engine.limits.maxFileSize == 99, "the smaller refused size, less one")
        engine.recordWriter.flush()
        // After a restart the learned size stands: nothing that large is tried again.
        let installs = mirror.count(.install)
        engine = SyncEngine(source: source, mirror: LocalMirror(mirror), store: store, records: try store.load(), options: SyncOptions())
        let second = try engine.fullPass().summary
        #expect(second.errors.isEmpty && second.copiedFiles == 0 && second.skippedUnholdable == 2)
        #expect(mirror.count(.install) == installs, "a file over the learned size was tried again")
    }

    // MARK: The vanished-or-replaced mirror

    @Test("records and no mirror root, or another one: refused; no records, or the same root remounted: fine")
    func vanishedMirror() {
        let disk = MirrorRoot(identity: FileIdentity(device: 1792, inode: 0), fileSystem: Array("/dev/sdb1 fuseblk".utf8),
                              limits: Self.exfat)
        let below = MirrorRoot(identity: FileIdentity(device: 64768, inode: 1234), fileSystem: Array("/dev/vda ext4".utf8),
                               limits: .none)
        func problem(_ recorded: MirrorRoot?, _ entries: Int, _ current: MirrorRoot?, rootInode: UInt64? = nil) -> String? {
            MirrorSafety.problem(name: "/media/usb", recorded: recorded, recordedEntries: entries, rootRecordInode: rootInode,
                                 current: current)
        }
        #expect(problem(disk, 10, nil)?.hasPrefix("mirror unavailable: /media/usb is missing") == true)
        #expect(problem(disk, 10, below)?.contains("--accept-new-mirror") == true)
        #expect(problem(disk, 0, nil) == nil, "a first run creates the mirror")
        var remounted = disk
        remounted.identity = FileIdentity(device: 1793, inode: 0)
        #expect(problem(disk, 10, remounted) == nil, "FUSE numbers change at a remount: the file system is compared")
        remounted.fileSystem = Array("/dev/sdc1 fuseblk".utf8)
        #expect(problem(disk, 10, remounted) == nil, "plugged in again at another device node")
        var moved = below
        moved.identity.inode = 99
        #expect(problem(below, 10, moved) != nil, "a local root with another inode is another directory")
        #expect(problem(nil, 10, below, rootInode: 99) != nil, "records from before mirror roots were kept: the root's record")
        #expect(problem(nil, 10, below, rootInode: 1234) == nil)
    }
}
