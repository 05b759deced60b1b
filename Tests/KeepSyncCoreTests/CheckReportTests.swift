import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

private func p(_ text: String) -> RelativePath { RelativePath(text) }
private func b(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite("CheckReport")
struct CheckReportTests {
    static let stamp = Timespec(seconds: 1_650_000_000, nanoseconds: 42)

    /// Gives every directory the same mtime, so that only deliberate differences show.
    static func pinDirectories(_ tree: InMemoryTree) {
        for (path, node) in tree.nodes where node.kind == .directory {
            tree.modify(path) { $0.mtime = stamp }
        }
    }

    /// Scans like `check` (removed subtrees collected) and returns the printed lines.
    static func lines(_ source: InMemoryTree, _ mirror: InMemoryTree, options: SyncOptions = SyncOptions(),
                      records: RecordSet = RecordSet()) throws -> [String] {
        let scan = try TreeScanner(source: source, mirror: mirror, records: records, options: options)
            .scan(.root, collectRemovedPaths: true)
        return CheckReport.lines(of: scan) { (try? mirror.stat($0)) ?? nil }.map(\.text)
    }

    /// The same regular file (content, mode, mtime) in both trees.
    static func same(_ path: String, _ content: String, in trees: InMemoryTree...) {
        for t in trees { t.writeFile(p(path), b(content), mode: 0o644, mtime: stamp) }
    }

    @Test("identical trees have no differences")
    func identical() throws {
        let s = InMemoryTree(), m = InMemoryTree(device: 2)
        for t in [s, m] {
            t.makeDirectory(p("d"), mode: 0o750, mtime: nil)
            t.makeLink(p("d/link"), to: b("../x"))
        }
        Self.same("x", "same", in: s, m)
        Self.same("d/y", "same too", in: s, m)
        for t in [s, m] { t.modify(p("d/link")) { $0.mtime = Self.stamp } }
        Self.pinDirectories(s)
        Self.pinDirectories(m)
        #expect(try Self.lines(s, m) == [])
    }

    /// A source and mirror with one of each kind of difference.
    static func mixed() -> (InMemoryTree, InMemoryTree) {
        let s = InMemoryTree(), m = InMemoryTree(device: 2)
        same("same.txt", "same", in: s, m)
        // Only in the source: a file, odd names, a directory with entries, a link.
        same("new.txt", "new", in: s)
        s.writeFile(RelativePath(bytes: b("caf") + [0xE9]), [1], mode: 0o644, mtime: stamp)
        s.writeFile(p("back\\slash"), [2], mode: 0o644, mtime: stamp)
        s.writeFile(p("new\nline"), [3], mode: 0o644, mtime: stamp)
        s.makeDirectory(p("newdir"), mode: 0o755, mtime: nil)
        same("newdir/a", "a", in: s)
        s.makeDirectory(p("newdir/sub"), mode: 0o755, mtime: nil)
        same("newdir/sub/b", "b", in: s)
        s.makeLink(p("newlink"), to: b("same.txt"))
        // In both, different: size, mode, kind (file vs directory with an entry), link target.
        s.writeFile(p("changed.txt"), b("longer now"), mode: 0o644, mtime: stamp)
        m.writeFile(p("changed.txt"), b("short"), mode: 0o644, mtime: stamp)
        s.writeFile(p("mode.txt"), b("m"), mode: 0o600, mtime: stamp)
        m.writeFile(p("mode.txt"), b("m"), mode: 0o644, mtime: stamp)
        same("kind", "file in the source", in: s)
        m.makeDirectory(p("kind"), mode: 0o755, mtime: nil)
        same("kind/inner", "in the mirror", in: m)
        s.makeLink(p("link"), to: b("new target"))
        m.makeLink(p("link"), to: b("old target"))
        // A directory whose only difference is its mtime, and one whose only difference is its mode.
        for t in [s, m] {
            t.makeDirectory(p("mtimedir"), mode: 0o755, mtime: nil)
            t.makeDirectory(p("modedir"), mode: t === s ? 0o700 : 0o755, mtime: nil)
        }
        same("mtimedir/f", "f", in: s, m)
        // Only in the mirror: a file and a directory tree.
        same("extra.txt", "extra", in: m)
        m.makeDirectory(p("extradir"), mode: 0o755, mtime: nil)
        same("extradir/x", "x", in: m)
        m.makeDirectory(p("extradir/y"), mode: 0o755, mtime: nil)
        same("extradir/y/z", "z", in: m)
        pinDirectories(s)
        pinDirectories(m)
        m.modify(p("mtimedir")) { $0.mtime = Timespec(seconds: 1, nanoseconds: 1) }
        return (s, m)
    }

    @Test("one line per difference, +, - and ~, with removed subtrees and escaped names, sorted by path")
    func mixedDifferences() throws {
        let (s, m) = Self.mixed()
        #expect(try Self.lines(s, m) == [
            "+ back\\x5cslash",
            "+ caf\\xe9",
            "~ changed.txt",
            "- extra.txt",
            "- extradir",
            "- extradir/x",
            "- extradir/y",
            "- extradir/y/z",
            "~ kind",
            "- kind/inner",
            "~ link",
            "~ mode.txt",
            "~ modedir",
            "~ mtimedir",
            "+ new\\x0aline",
            "+ new.txt",
            "+ newdir",
            "+ newdir/a",
            "+ newdir/sub",
            "+ newdir/sub/b",
            "+ newlink",
        ])
    }

    @Test("under --no-delete extra entries are not listed")
    func noDelete() throws {
        let (s, m) = Self.mixed()
        let lines = try Self.lines(s, m, options: SyncOptions(deleteEnabled: false))
        #expect(!lines.contains { $0.hasPrefix("-") })
        #expect(lines.contains("~ kind"))
        #expect(lines.count == 21 - 6)
    }

    @Test("extra entries with records are listed as -")
    func extraWithRecords() throws {
        let s = InMemoryTree(), m = InMemoryTree(device: 2)
        Self.same("gone", "was synced", in: m)
        Self.pinDirectories(s)
        Self.pinDirectories(m)
        let n = m.node(p("gone"))!
        let record = FileRecord(path: p("gone"), kind: .regular, device: 1, inode: 5, size: UInt64(n.content.count),
                                mtime: n.mtime, mode: n.mode, mirrorInode: n.inode)
        #expect(try Self.lines(s, m, records: RecordSet(records: [record.path: record])) == ["- gone"])
    }

    @Test("a root whose mtime differs is named .")
    func rootMtime() throws {
        let s = InMemoryTree(), m = InMemoryTree(device: 2)
        Self.same("f", "f", in: s, m)
        Self.pinDirectories(s)
        Self.pinDirectories(m)
        m.modify(.root) { $0.mtime = Timespec(seconds: 3, nanoseconds: 0) }
        #expect(try Self.lines(s, m) == ["~ ."])
    }

    @Test("--content finds same-size, same-mtime files with different bytes")
    func contentDifference() throws {
        let s = InMemoryTree(), m = InMemoryTree(device: 2)
        s.writeFile(p("f"), b("AAAA"), mode: 0o644, mtime: Self.stamp)
        m.writeFile(p("f"), b("AAAB"), mode: 0o644, mtime: Self.stamp)
        Self.pinDirectories(s)
        Self.pinDirectories(m)
        #expect(try Self.lines(s, m) == [])
        #expect(try Self.lines(s, m, options: SyncOptions(compareContent: true)) == ["~ f"])
    }

    @Test("excluded paths, special files and keepsync's temp files are not compared")
    func notCompared() throws {
        let s = InMemoryTree(), m = InMemoryTree(device: 2)
        s.makeSpecial(p("fifo"))
        s.writeFile(p("a.o"), b("object"), mode: 0o644, mtime: Self.stamp)
        m.writeFile(p("b.o"), b("extra object"), mode: 0o644, mtime: Self.stamp)
        m.writeFile(p(".keepsync-tmp-00112233445566ff"), b("partial"), mode: 0o600, mtime: Self.stamp)
        Self.pinDirectories(s)
        Self.pinDirectories(m)
        let options = SyncOptions(excludes: try ExcludeMatcher(patterns: [b("*.o")]))
        #expect(try Self.lines(s, m, options: options) == [])
    }

    @Test("a directory that differs in mtime and misses an entry gives both lines")
    func directoryAndEntry() throws {
        let s = InMemoryTree(), m = InMemoryTree(device: 2)
        for t in [s, m] { t.makeDirectory(p("d"), mode: 0o755, mtime: nil) }
        Self.same("d/x", "x", in: s)
        Self.pinDirectories(s)
        Self.pinDirectories(m)
        s.modify(p("d")) { $0.mtime = Timespec(seconds: 2_000_000_000, nanoseconds: 0) }
        #expect(try Self.lines(s, m) == ["~ d", "+ d/x"])
    }

    @Test("lines are sorted by path bytes with / before any other byte")
    func sortOrder() {
        var scan = SyncScan(scope: .root)
        let reg = FileStat(kind: .regular, mode: 0o644, size: 1, mtime: Self.stamp)
        for name in ["b", "a.b", "a/b", "a", "a-b", "A"] {
            let path = p(name)
            scan.steps.append(.path(PathState(path: path, source: reg, record: nil, mirror: nil), [.copyFile(path)],
                                    removedEntries: 0))
        }
        let lines = CheckReport.lines(of: scan) { _ in nil }.map(\.text)
        #expect(lines == ["+ A", "+ a", "+ a/b", "+ a-b", "+ a.b", "+ b"])
    }

    @Test("record-only steps and skipped specials give no lines")
    func recordOnlyStepsAreSilent() {
        var scan = SyncScan(scope: .root)
        let reg = FileStat(kind: .regular, mode: 0o644, size: 1, mtime: Self.stamp)
        let record = FileRecord(path: p("r"), source: reg, mirrorInode: 3)
        scan.steps.append(.path(PathState(path: p("r"), source: reg, record: nil, mirror: reg), [.updateRecord(record)],
                                removedEntries: 0))
        scan.steps.append(.path(PathState(path: p("gone"), source: nil, record: record, mirror: nil),
                                [.dropRecord(p("gone"))], removedEntries: 0))
        scan.steps.append(.path(PathState(path: p("fifo"), source: FileStat(kind: .special, mode: 0, size: 0, mtime: Self.stamp),
                                          record: nil, mirror: nil), [.skipSpecial(p("fifo"))], removedEntries: 0))
        scan.steps.append(.removeTemporary(p(".keepsync-tmp-0000000000000000")))
        #expect(CheckReport.lines(of: scan) { _ in nil } == [])
    }

    @Test("the summary line", arguments: [(0, "0 differences"), (1, "1 difference"), (2, "2 differences"),
                                          (11, "11 differences"), (21, "21 differences")])
    func summary(count: Int, text: String) {
        #expect(CheckReport.summary(count) == text)
    }
}
