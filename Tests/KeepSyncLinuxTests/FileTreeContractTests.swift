import Glibc
import KeepSyncCore
import KeepSyncLinux
import KeepSyncTestSupport
import Testing

// MARK: - Glibc helpers on byte paths (shared with AtomicFileAccessorTests)

/// Builds and inspects real trees with plain Glibc calls on byte paths, bypassing the code
/// under test.
enum ContractPOSIX {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func withC<R>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
        (path + [0]).withUnsafeBufferPointer { buf in
            buf.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
        }
    }

    static func check(_ result: Int32, _ call: String, _ path: [UInt8]) throws {
        if result != 0 {
            throw Failure(description: "\(call) \(ByteEscaping.escape(path)): \(String(cString: strerror(errno)))")
        }
    }

    static func join(_ base: [UInt8], _ path: RelativePath) -> [UInt8] {
        path.isRoot ? base : base + [0x2F] + path.bytes
    }

    /// Creates or truncates a file with exactly `mode` and, when given, `mtime`.
    static func writeFile(_ path: [UInt8], _ content: [UInt8], mode: UInt32, mtime: Timespec?) throws {
        let fd = withC(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw Failure(description: "open \(ByteEscaping.escape(path)): \(errno)") }
        defer { close(fd) }
        var offset = 0
        while offset < content.count {
            let n = content[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw Failure(description: "write: \(errno)") }
            offset += n
        }
        try check(fchmod(fd, mode_t(mode)), "fchmod", path)
        if let mtime { try setTimes(path, mtime) }
    }

    /// Appends bytes in place (size, mtime and ctime change; the inode stays).
    static func append(_ path: [UInt8], _ bytes: [UInt8]) throws {
        let fd = withC(path) { open($0, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { throw Failure(description: "open for append: \(errno)") }
        defer { close(fd) }
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n == bytes.count else { throw Failure(description: "append: \(errno)") }
    }

    /// The file's bytes; nil when it cannot be opened.
    static func readFile(_ path: [UInt8]) -> [UInt8]? {
        let fd = withC(path) { open($0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { return out }
            out += chunk[..<n]
        }
    }

    static func makeDirectory(_ path: [UInt8], mode: UInt32) throws {
        try check(withC(path) { mkdir($0, 0o700) }, "mkdir", path)
        try check(withC(path) { chmod($0, mode_t(mode)) }, "chmod", path)
    }

    static func makeLink(_ path: [UInt8], to target: [UInt8]) throws {
        try check(withC(target) { t in withC(path) { symlink(t, $0) } }, "symlink", path)
    }

    static func makeFIFO(_ path: [UInt8]) throws {
        try check(withC(path) { mkfifo($0, 0o644) }, "mkfifo", path)
    }

    static func rename(_ from: [UInt8], _ to: [UInt8]) throws {
        try check(withC(from) { f in withC(to) { Glibc.rename(f, $0) } }, "rename", from)
    }

    /// Sets atime and mtime of the object itself (never through a link).
    static func setTimes(_ path: [UInt8], _ t: Timespec) throws {
        var times = [timespec(tv_sec: Int(t.seconds), tv_nsec: Int(t.nanoseconds)),
                     timespec(tv_sec: Int(t.seconds), tv_nsec: Int(t.nanoseconds))]
        try check(withC(path) { utimensat(AT_FDCWD, $0, &times, AT_SYMLINK_NOFOLLOW) }, "utimensat", path)
    }

    /// What `lstat` reports, in the terms the tests compare.
    struct Info: Equatable, Sendable {
        var isDirectory: Bool
        var isLink: Bool
        var mode: UInt32
        var size: Int
        var inode: UInt64
        var mtime: Timespec
    }

    static func lstat(_ path: [UInt8]) -> Info? {
        var st = stat()
        guard withC(path, { Glibc.lstat($0, &st) }) == 0 else { return nil }
        let type = st.st_mode & S_IFMT
        return Info(isDirectory: type == S_IFDIR, isLink: type == S_IFLNK, mode: UInt32(st.st_mode & 0o7777),
                    size: Int(st.st_size), inode: UInt64(st.st_ino),
                    mtime: Timespec(seconds: Int64(st.st_mtim.tv_sec), nanoseconds: Int64(st.st_mtim.tv_nsec)))
    }

    static func readLink(_ path: [UInt8]) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: 4097)
        let n = withC(path) { p in buf.withUnsafeMutableBufferPointer { b in
            b.withMemoryRebound(to: CChar.self) { readlink(p, $0.baseAddress!, $0.count) }
        } }
        return n < 0 ? nil : Array(buf[..<n])
    }

    /// Names in a directory (without `.` and `..`), sorted; nil when it cannot be opened.
    static func names(_ path: [UInt8]) -> [[UInt8]]? {
        let fd = withC(path) { open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        return names(fd: fd)
    }

    /// Reads the names of an open directory and closes it.
    static func names(fd: Int32) -> [[UInt8]] {
        guard let dir = fdopendir(fd) else { close(fd); return [] }
        defer { closedir(dir) }
        var out: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name: [UInt8] = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name != [0x2E] && name != [0x2E, 0x2E] { out.append(name) }
        }
        return out.sorted { $0.lexicographicallyPrecedes($1) }
    }

}

/// A source file that runs a hook before its first read (to change the source, or the
/// mirror, while a copy is in progress), or fails every read.
final class HookedSourceFile: SourceFile {
    let inner: any SourceFile
    private var hook: (() throws -> Void)?
    private let failReads: Bool

    init(_ inner: any SourceFile, failReads: Bool = false, beforeFirstRead hook: (() throws -> Void)? = nil) {
        self.inner = inner
        self.hook = hook
        self.failReads = failReads
    }

    var stat: FileStat { inner.stat }

    func read(upTo count: Int) throws -> [UInt8] {
        if let h = hook {
            hook = nil
            try h()
        }
        if failReads { throw KeepSyncError(.io, "read: Input/output error") }
        return try inner.read(upTo: count)
    }

    func currentStat() throws -> FileStat { try inner.currentStat() }
    func close() { inner.close() }
}

/// Reads a whole source file.
func readAll(_ file: any SourceFile) throws -> [UInt8] {
    var out: [UInt8] = []
    while true {
        let chunk = try file.read(upTo: 7_919)
        if chunk.isEmpty { return out }
        out += chunk
    }
}

// MARK: - The contract

@Suite("FileTree contract: InMemoryTree and PosixFileSystem/AtomicFileAccessor")
struct FileTreeContractTests {
    enum Kind: String, Sendable, CaseIterable, CustomTestStringConvertible {
        case memory, posix
        var testDescription: String { rawValue }
    }

    /// Direct access to one side, bypassing the implementation under test.
    protocol RawTree {
        func writeFile(_ path: RelativePath, _ content: [UInt8], mode: UInt32, mtime: Timespec) throws
        func makeDirectory(_ path: RelativePath, mode: UInt32) throws
        func makeLink(_ path: RelativePath, to target: [UInt8]) throws
        func makeFIFO(_ path: RelativePath) throws
        /// Grows a file in place.
        func append(_ path: RelativePath, _ bytes: [UInt8]) throws
        /// Names in a directory, sorted; [] when missing.
        func names(_ directory: RelativePath) -> [[UInt8]]
        /// A file's bytes; nil when missing.
        func content(_ path: RelativePath) -> [UInt8]?
    }

    struct MemoryRaw: RawTree {
        let tree: InMemoryTree
        func writeFile(_ path: RelativePath, _ content: [UInt8], mode: UInt32, mtime: Timespec) throws {
            tree.writeFile(path, content, mode: mode, mtime: mtime)
        }
        func makeDirectory(_ path: RelativePath, mode: UInt32) throws { tree.makeDirectory(path, mode: mode, mtime: nil) }
        func makeLink(_ path: RelativePath, to target: [UInt8]) throws { tree.makeLink(path, to: target) }
        func makeFIFO(_ path: RelativePath) throws { tree.makeSpecial(path) }
        func append(_ path: RelativePath, _ bytes: [UInt8]) throws {
            let node = try #require(tree.node(path))
            tree.writeFile(path, node.content + bytes, mode: node.mode)
        }
        func names(_ directory: RelativePath) -> [[UInt8]] {
            tree.nodes.keys.filter { !$0.isRoot && $0.parent == directory }.map(\.name)
                .sorted { $0.lexicographicallyPrecedes($1) }
        }
        func content(_ path: RelativePath) -> [UInt8]? {
            guard let n = tree.node(path), n.kind == .regular else { return nil }
            return n.content
        }
    }

    struct PosixRaw: RawTree {
        let root: [UInt8]
        func at(_ path: RelativePath) -> [UInt8] { ContractPOSIX.join(root, path) }
        func writeFile(_ path: RelativePath, _ content: [UInt8], mode: UInt32, mtime: Timespec) throws {
            try ContractPOSIX.writeFile(at(path), content, mode: mode, mtime: mtime)
        }
        func makeDirectory(_ path: RelativePath, mode: UInt32) throws { try ContractPOSIX.makeDirectory(at(path), mode: mode) }
        func makeLink(_ path: RelativePath, to target: [UInt8]) throws { try ContractPOSIX.makeLink(at(path), to: target) }
        func makeFIFO(_ path: RelativePath) throws { try ContractPOSIX.makeFIFO(at(path)) }
        func append(_ path: RelativePath, _ bytes: [UInt8]) throws { try ContractPOSIX.append(at(path), bytes) }
        func names(_ directory: RelativePath) -> [[UInt8]] { ContractPOSIX.names(at(directory)) ?? [] }
        func content(_ path: RelativePath) -> [UInt8]? { ContractPOSIX.readFile(at(path)) }
    }

    /// A source and a mirror of one kind; `cleanup()` removes what it created.
    final class Fixture {
        let kind: Kind
        let source: any FileSystemProviding
        let mirror: any FileAccessorProviding
        let sourceRaw: any RawTree
        let mirrorRaw: any RawTree
        let base: [UInt8]?

        init(_ kind: Kind) throws {
            self.kind = kind
            switch kind {
            case .memory:
                let s = InMemoryTree(device: 1), m = InMemoryTree(device: 2)
                source = s
                mirror = m
                sourceRaw = MemoryRaw(tree: s)
                mirrorRaw = MemoryRaw(tree: m)
                base = nil
            case .posix:
                let dir = try ScratchDirectory.make(prefix: "keepsync-contract")
                base = dir
                let s = dir + Array("/source".utf8), m = dir + Array("/mirror".utf8)
                try ContractPOSIX.makeDirectory(s, mode: 0o755)
                try ContractPOSIX.makeDirectory(m, mode: 0o755)
                source = try PosixFileSystem(rootPath: s)
                mirror = try AtomicFileAccessor(rootPath: m)
                sourceRaw = PosixRaw(root: s)
                mirrorRaw = PosixRaw(root: m)
            }
        }

        func cleanup() {
            if let base { try? ScratchDirectory.removeTree(base) }
        }
    }

    static func p(_ text: String) -> RelativePath { RelativePath(text) }
    static func b(_ text: String) -> [UInt8] { Array(text.utf8) }
    static let t1 = Timespec(seconds: 1_600_000_000, nanoseconds: 123_456_789)
    static let t2 = Timespec(seconds: 1_300_000_000, nanoseconds: 1)
    static let cafe: [UInt8] = [0x63, 0x61, 0x66, 0xE9]
    static let data: [UInt8] = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }

    /// Expects `body` to throw a KeepSyncError with `code`.
    static func expectError(_ code: KeepSyncError.Code, _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
                            _ body: () throws -> Void) {
        do {
            try body()
            Issue.record("\(what): expected \(code), nothing was thrown", sourceLocation: sourceLocation)
        } catch let e as KeepSyncError {
            #expect(e.code == code, "\(what): \(e)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("\(what): not a KeepSyncError: \(error)", sourceLocation: sourceLocation)
        }
    }

    static func noTemporaryNames(_ names: [[UInt8]]) -> Bool { !names.contains { TemporaryName.matches($0) } }

    // MARK: Read side

    @Test("stat of a missing path is nil", arguments: Kind.allCases)
    func statMissing(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.mirrorRaw.writeFile(Self.p("file"), [1], mode: 0o644, mtime: Self.t1)
        #expect(try f.mirror.stat(Self.p("missing")) == nil)
        #expect(try f.mirror.stat(Self.p("missing/deeper")) == nil)
        #expect(try f.mirror.stat(Self.p("file/below")) == nil)
        #expect(try f.source.stat(Self.p("missing")) == nil)
        #expect(try f.mirror.stat(.root)?.kind == .directory)
        #expect(try f.mirror.stat(Self.p("file"))?.kind == .regular)
    }

    @Test("list returns names as bytes, non-UTF-8 and newline included, with their kinds", arguments: Kind.allCases)
    func listNames(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.mirrorRaw.writeFile(Self.p("plain"), Self.b("x"), mode: 0o644, mtime: Self.t1)
        try f.mirrorRaw.writeFile(RelativePath(bytes: Self.cafe), Self.b("y"), mode: 0o644, mtime: Self.t1)
        try f.mirrorRaw.writeFile(Self.p("new\nline"), Self.b("z"), mode: 0o644, mtime: Self.t1)
        try f.mirrorRaw.makeDirectory(Self.p("dir"), mode: 0o755)
        try f.mirrorRaw.makeLink(Self.p("link"), to: Self.b("plain"))
        try f.mirrorRaw.makeFIFO(Self.p("fifo"))
        let entries = try f.mirror.list(.root)
        let byName = Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0.stat.kind) })
        #expect(byName == [Self.b("plain"): .regular, Self.cafe: .regular, Self.b("new\nline"): .regular,
                           Self.b("dir"): .directory, Self.b("link"): .symlink, Self.b("fifo"): .special])
        #expect(try f.mirror.list(Self.p("dir")) == [])
        let cafeStat = try #require(try f.mirror.stat(RelativePath(bytes: Self.cafe)))
        #expect(cafeStat.size == 1)
        #expect(entries.first { $0.name == Self.cafe }?.stat == cafeStat)
    }

    @Test("list returns every entry of a directory larger than one read (3,000 long names)", arguments: Kind.allCases)
    func listLargeDirectory(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        // About 600 KiB of directory records: getdents64 fills its 32 KiB buffer many times.
        let names = (0..<3000).map { i in Self.b("entry-\(i)-" + String(repeating: "n", count: 180)) }
        for name in names { try f.mirrorRaw.writeFile(RelativePath(bytes: name), [], mode: 0o644, mtime: Self.t1) }
        let listed = try f.mirror.list(.root)
        #expect(listed.count == names.count)
        #expect(Set(listed.map(\.name)) == Set(names))
        // A second listing of the same tree starts again from the first entry.
        #expect(try f.mirror.list(.root).count == names.count)
    }

    @Test("list of a missing directory, or of a file, throws .notFound", arguments: Kind.allCases)
    func listMissing(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.mirrorRaw.writeFile(Self.p("file"), [1], mode: 0o644, mtime: Self.t1)
        Self.expectError(.notFound, "list missing") { _ = try f.mirror.list(Self.p("missing")) }
        Self.expectError(.notFound, "list missing/deeper") { _ = try f.mirror.list(Self.p("missing/deeper")) }
        Self.expectError(.notFound, "list file") { _ = try f.mirror.list(Self.p("file")) }
        Self.expectError(.notFound, "source list missing") { _ = try f.source.list(Self.p("missing")) }
    }

    @Test("open reads a regular file with its stat; readLink returns target bytes", arguments: Kind.allCases)
    func openAndReadLink(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.writeFile(Self.p("f"), Self.data, mode: 0o640, mtime: Self.t1)
        let target: [UInt8] = [0x2E, 0x2E, 0x2F, 0xE9, 0x0A]
        try f.sourceRaw.makeLink(Self.p("l"), to: target)
        let file = try f.source.open(Self.p("f"))
        defer { file.close() }
        #expect(file.stat.kind == .regular)
        #expect(file.stat.size == UInt64(Self.data.count))
        #expect(file.stat.mode == 0o640)
        #expect(file.stat.mtime == Self.t1)
        #expect(file.stat == (try f.source.stat(Self.p("f"))))
        #expect(try readAll(file) == Self.data)
        #expect(try file.currentStat().sameVersion(as: file.stat))
        #expect(try f.source.readLink(Self.p("l")) == target)
        Self.expectError(.notFound, "open missing") { _ = try f.source.open(Self.p("missing")) }
    }

    @Test("open of a symlink, a FIFO without a writer, or a directory fails without hanging",
          .timeLimit(.minutes(1)), arguments: Kind.allCases)
    func openNonRegular(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.writeFile(Self.p("target"), [1], mode: 0o644, mtime: Self.t1)
        try f.sourceRaw.makeLink(Self.p("link"), to: Self.b("target"))
        try f.sourceRaw.makeFIFO(Self.p("fifo"))
        try f.sourceRaw.makeDirectory(Self.p("dir"), mode: 0o755)
        for name in ["link", "fifo", "dir"] {
            #expect(throws: KeepSyncError.self, "open \(name)") { _ = try f.source.open(Self.p(name)) }
        }
    }

    @Test("a path through a symlink to a directory inside the tree is never followed: open, stat and list refuse it",
          arguments: Kind.allCases)
    func symlinkedDirectoryInsideTheTree(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.makeDirectory(Self.p("dir"), mode: 0o755)
        try f.sourceRaw.writeFile(Self.p("dir/inner"), Self.b("inner bytes"), mode: 0o644, mtime: Self.t1)
        try f.sourceRaw.makeLink(Self.p("alias"), to: Self.b("dir"))
        #expect(throws: KeepSyncError.self, "open through the link") { _ = try f.source.open(Self.p("alias/inner")) }
        #expect(((try? f.source.stat(Self.p("alias/inner"))) ?? nil) == nil, "stat through the link")
        #expect(((try? f.source.list(Self.p("alias"))) ?? []).isEmpty, "list through the link")
    }

    // MARK: install

    @Test("install creates a file with the source's content, mode and mtime and returns its new inode",
          arguments: Kind.allCases)
    func installCreates(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.writeFile(Self.p("f"), Self.data, mode: 0o640, mtime: Self.t1)
        try f.mirrorRaw.makeDirectory(Self.p("d"), mode: 0o755)
        let file = try f.source.open(Self.p("f"))
        defer { file.close() }
        let st = try f.mirror.install(Self.p("d/f"), from: file)
        #expect(st.kind == .regular)
        #expect(st.size == UInt64(Self.data.count))
        #expect(st.mode == 0o640)
        #expect(st.mtime == Self.t1)
        let now = try #require(try f.mirror.stat(Self.p("d/f")))
        #expect(now.inode == st.inode)
        #expect(now.mode == 0o640 && now.mtime == Self.t1 && now.size == st.size)
        #expect(f.mirrorRaw.content(Self.p("d/f")) == Self.data)
        #expect(f.mirrorRaw.names(Self.p("d")) == [Self.b("f")], "no temp file left")

        // An empty file at the root, odd name.
        try f.sourceRaw.writeFile(Self.p("e"), [], mode: 0o600, mtime: Self.t2)
        let empty = try f.source.open(Self.p("e"))
        defer { empty.close() }
        let name = RelativePath(bytes: Self.cafe + [0x0A])
        let est = try f.mirror.install(name, from: empty)
        #expect(est.size == 0 && est.mode == 0o600 && est.mtime == Self.t2)
        #expect(f.mirrorRaw.content(name) == [])
    }

    @Test("install over an existing file or link replaces it with a new inode", arguments: Kind.allCases)
    func installReplaces(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.writeFile(Self.p("f"), Self.b("new content"), mode: 0o644, mtime: Self.t1)
        try f.mirrorRaw.writeFile(Self.p("f"), Self.b("old"), mode: 0o600, mtime: Self.t2)
        try f.mirrorRaw.makeLink(Self.p("l"), to: Self.b("f"))
        for name in ["f", "l"] {
            let old = try #require(try f.mirror.stat(Self.p(name)))
            let file = try f.source.open(Self.p("f"))
            defer { file.close() }
            let st = try f.mirror.install(Self.p(name), from: file)
            #expect(st.inode != old.inode, "\(name)")
            #expect(try f.mirror.stat(Self.p(name))?.kind == .regular, "\(name)")
            #expect(try f.mirror.stat(Self.p(name))?.inode == st.inode, "\(name)")
            #expect(f.mirrorRaw.content(Self.p(name)) == Self.b("new content"), "\(name)")
        }
        #expect(f.mirrorRaw.names(.root) == [Self.b("f"), Self.b("l")])
    }

    @Test("install onto a directory fails with .conflict and changes nothing", arguments: Kind.allCases)
    func installOntoDirectory(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.writeFile(Self.p("f"), Self.b("content"), mode: 0o644, mtime: Self.t1)
        try f.mirrorRaw.makeDirectory(Self.p("d"), mode: 0o755)
        try f.mirrorRaw.writeFile(Self.p("d/keep"), Self.b("keep"), mode: 0o644, mtime: Self.t1)
        let file = try f.source.open(Self.p("f"))
        defer { file.close() }
        Self.expectError(.conflict, "install onto directory") { _ = try f.mirror.install(Self.p("d"), from: file) }
        #expect(try f.mirror.stat(Self.p("d"))?.kind == .directory)
        #expect(f.mirrorRaw.content(Self.p("d/keep")) == Self.b("keep"))
        #expect(f.mirrorRaw.names(.root) == [Self.b("d")], "no temp file left")
    }

    @Test("install into a missing directory fails with .notFound", arguments: Kind.allCases)
    func installMissingParent(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.writeFile(Self.p("f"), Self.b("content"), mode: 0o644, mtime: Self.t1)
        let file = try f.source.open(Self.p("f"))
        defer { file.close() }
        Self.expectError(.notFound, "install below missing") { _ = try f.mirror.install(Self.p("nope/f"), from: file) }
        #expect(f.mirrorRaw.names(.root) == [])
    }

    @Test("install of a source that changed during the copy throws .sourceChanged and leaves nothing",
          arguments: Kind.allCases)
    func installSourceChanged(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.sourceRaw.writeFile(Self.p("f"), Self.data, mode: 0o644, mtime: Self.t1)
        try f.sourceRaw.writeFile(Self.p("g"), Self.data, mode: 0o644, mtime: Self.t1)
        try f.mirrorRaw.writeFile(Self.p("g"), Self.b("previous version"), mode: 0o644, mtime: Self.t2)

        // Changed after open, before the copy (the file's own fast copy path).
        let file = try f.source.open(Self.p("f"))
        defer { file.close() }
        try f.sourceRaw.append(Self.p("f"), Self.b("more"))
        Self.expectError(.sourceChanged, "changed after open") { _ = try f.mirror.install(Self.p("f"), from: file) }
        #expect(try f.mirror.stat(Self.p("f")) == nil)

        // Changed while being read; the previous mirror version stays in place.
        let raw = f.sourceRaw
        let hooked = HookedSourceFile(try f.source.open(Self.p("g"))) { try raw.append(Self.p("g"), Self.b("more")) }
        defer { hooked.close() }
        Self.expectError(.sourceChanged, "changed during read") { _ = try f.mirror.install(Self.p("g"), from: hooked) }
        #expect(f.mirrorRaw.content(Self.p("g")) == Self.b("previous version"))
        #expect(f.mirrorRaw.names(.root) == [Self.b("g")], "no temp file left")
    }

    // MARK: Directories, links, remove, rename, attributes

    @Test("makeDirectory creates a directory and refuses an existing path or a missing parent", arguments: Kind.allCases)
    func makeDirectory(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        let st = try f.mirror.makeDirectory(Self.p("d"), mode: 0o755)
        #expect(st.kind == .directory)
        #expect(try f.mirror.stat(Self.p("d"))?.inode == st.inode)
        let inner = try f.mirror.makeDirectory(RelativePath(bytes: Self.b("d/") + Self.cafe), mode: 0o700)
        #expect(inner.kind == .directory)
        #expect(f.mirrorRaw.names(Self.p("d")) == [Self.cafe])
        Self.expectError(.conflict, "mkdir existing") { _ = try f.mirror.makeDirectory(Self.p("d"), mode: 0o755) }
        try f.mirrorRaw.writeFile(Self.p("file"), [1], mode: 0o644, mtime: Self.t1)
        Self.expectError(.conflict, "mkdir over file") { _ = try f.mirror.makeDirectory(Self.p("file"), mode: 0o755) }
        Self.expectError(.notFound, "mkdir below missing") { _ = try f.mirror.makeDirectory(Self.p("x/y"), mode: 0o755) }
    }

    @Test("makeSymlink creates a link, and replaces an existing link or file atomically", arguments: Kind.allCases)
    func makeSymlink(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        let target: [UInt8] = [0x2E, 0x2E, 0x2F] + Self.cafe
        let st = try f.mirror.makeSymlink(Self.p("l"), target: target, mtime: Self.t1)
        #expect(st.kind == .symlink)
        #expect(st.mtime == Self.t1)
        #expect(try f.mirror.readLink(Self.p("l")) == target)
        #expect(try f.mirror.stat(Self.p("l"))?.inode == st.inode)

        let again = try f.mirror.makeSymlink(Self.p("l"), target: Self.b("other"), mtime: Self.t2)
        #expect(again.inode != st.inode)
        #expect(try f.mirror.readLink(Self.p("l")) == Self.b("other"))
        #expect(try f.mirror.stat(Self.p("l"))?.mtime == Self.t2)

        try f.mirrorRaw.writeFile(Self.p("file"), [1], mode: 0o644, mtime: Self.t1)
        let overFile = try f.mirror.makeSymlink(Self.p("file"), target: Self.b("l"), mtime: Self.t1)
        #expect(overFile.kind == .symlink)
        #expect(try f.mirror.readLink(Self.p("file")) == Self.b("l"))

        try f.mirrorRaw.makeDirectory(Self.p("d"), mode: 0o755)
        Self.expectError(.conflict, "link onto directory") { _ = try f.mirror.makeSymlink(Self.p("d"), target: [0x78], mtime: Self.t1) }
        #expect(try f.mirror.stat(Self.p("d"))?.kind == .directory)
        #expect(f.mirrorRaw.names(.root) == [Self.b("d"), Self.b("file"), Self.b("l")], "no temp names left")
    }

    @Test("remove takes a non-empty directory tree, a file or a link (never its target)", arguments: Kind.allCases)
    func remove(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        let r = f.mirrorRaw
        try r.makeDirectory(Self.p("d"), mode: 0o755)
        try r.writeFile(Self.p("d/f"), [1], mode: 0o644, mtime: Self.t1)
        try r.makeDirectory(Self.p("d/sub"), mode: 0o755)
        try r.writeFile(Self.p("d/sub/g"), [2], mode: 0o644, mtime: Self.t1)
        try r.makeLink(Self.p("d/sub/link"), to: Self.b("../f"))
        try r.makeDirectory(Self.p("d/empty"), mode: 0o755)
        try r.makeDirectory(Self.p("d/ro"), mode: 0o755)
        try r.writeFile(Self.p("d/ro/h"), [3], mode: 0o444, mtime: Self.t1)
        try f.mirror.setAttributes(Self.p("d/ro"), mode: 0o555, mtime: nil)
        try r.makeDirectory(Self.p("kept"), mode: 0o755)
        try r.writeFile(Self.p("kept/x"), [4], mode: 0o644, mtime: Self.t1)
        try r.makeLink(Self.p("dirlink"), to: Self.b("kept"))
        try r.writeFile(Self.p("file"), [5], mode: 0o644, mtime: Self.t1)

        try f.mirror.remove(Self.p("d"))
        #expect(try f.mirror.stat(Self.p("d")) == nil)
        try f.mirror.remove(Self.p("dirlink"))
        #expect(try f.mirror.stat(Self.p("dirlink")) == nil)
        #expect(r.content(Self.p("kept/x")) == [4], "a link's target is never removed")
        try f.mirror.remove(Self.p("file"))
        try f.mirror.remove(Self.p("missing"))   // nothing there: no error
        #expect(r.names(.root) == [Self.b("kept")])
    }

    @Test("rename moves a directory with its contents and replaces a file", arguments: Kind.allCases)
    func rename(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        let r = f.mirrorRaw
        try r.makeDirectory(Self.p("d"), mode: 0o751)
        try r.writeFile(Self.p("d/f"), [1], mode: 0o644, mtime: Self.t1)
        try r.makeDirectory(Self.p("d/sub"), mode: 0o755)
        try r.writeFile(Self.p("d/sub/g"), [2], mode: 0o644, mtime: Self.t1)
        try r.makeDirectory(Self.p("other"), mode: 0o755)
        let before = try #require(try f.mirror.stat(Self.p("d")))
        try f.mirror.rename(Self.p("d"), to: Self.p("other/e"))
        #expect(try f.mirror.stat(Self.p("d")) == nil)
        let after = try #require(try f.mirror.stat(Self.p("other/e")))
        #expect(after.inode == before.inode)
        #expect(after.mode == 0o751)
        #expect(r.content(Self.p("other/e/f")) == [1])
        #expect(r.content(Self.p("other/e/sub/g")) == [2])

        try r.writeFile(Self.p("a"), [7], mode: 0o644, mtime: Self.t1)
        try r.writeFile(Self.p("b"), [8], mode: 0o644, mtime: Self.t1)
        try f.mirror.rename(Self.p("a"), to: Self.p("b"))
        #expect(r.content(Self.p("b")) == [7])
        #expect(r.names(.root) == [Self.b("b"), Self.b("other")])

        try r.makeDirectory(Self.p("full"), mode: 0o755)
        try r.writeFile(Self.p("full/x"), [9], mode: 0o644, mtime: Self.t1)
        Self.expectError(.conflict, "rename onto a non-empty directory") { try f.mirror.rename(Self.p("other"), to: Self.p("full")) }
        #expect(r.content(Self.p("full/x")) == [9])
        Self.expectError(.notFound, "rename of a missing path") { try f.mirror.rename(Self.p("missing"), to: Self.p("z")) }
    }

    // Regression (fake): InMemoryTree.rename used to replace an empty directory with a file
    // and a file with a directory, which renameat(2) refuses (EISDIR, ENOTDIR).
    @Test("rename never replaces a directory with a file or a file with a directory", arguments: Kind.allCases)
    func renameAcrossKinds(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        let r = f.mirrorRaw
        try r.writeFile(Self.p("file"), [1], mode: 0o644, mtime: Self.t1)
        try r.makeDirectory(Self.p("emptydir"), mode: 0o755)
        try r.makeDirectory(Self.p("dir"), mode: 0o755)
        try r.writeFile(Self.p("dir/x"), [2], mode: 0o644, mtime: Self.t1)
        #expect(throws: KeepSyncError.self, "file onto an empty directory") {
            try f.mirror.rename(Self.p("file"), to: Self.p("emptydir"))
        }
        #expect(throws: KeepSyncError.self, "directory onto a file") {
            try f.mirror.rename(Self.p("dir"), to: Self.p("file"))
        }
        #expect(try f.mirror.stat(Self.p("emptydir"))?.kind == .directory)
        #expect(r.content(Self.p("file")) == [1])
        #expect(r.content(Self.p("dir/x")) == [2])
    }

    @Test("setAttributes sets mode and mtime (ns) of a file, a directory and the root", arguments: Kind.allCases)
    func setAttributes(kind: Kind) throws {
        let f = try Fixture(kind)
        defer { f.cleanup() }
        try f.mirrorRaw.writeFile(Self.p("f"), [1], mode: 0o644, mtime: Self.t2)
        try f.mirrorRaw.makeDirectory(Self.p("d"), mode: 0o700)
        for path in [Self.p("f"), Self.p("d"), RelativePath.root] {
            let name = path.escaped
            try f.mirror.setAttributes(path, mode: 0o751, mtime: Self.t1)
            var st = try #require(try f.mirror.stat(path))
            #expect(st.mode == 0o751, "\(name)")
            #expect(st.mtime == Self.t1, "\(name)")
            // Mode only leaves the mtime; mtime only leaves the mode.
            try f.mirror.setAttributes(path, mode: 0o705, mtime: nil)
            st = try #require(try f.mirror.stat(path))
            #expect(st.mode == 0o705 && st.mtime == Self.t1, "\(name)")
            try f.mirror.setAttributes(path, mode: nil, mtime: Self.t2)
            st = try #require(try f.mirror.stat(path))
            #expect(st.mode == 0o705 && st.mtime == Self.t2, "\(name)")
        }
        try f.mirror.setAttributes(.root, mode: 0o755, mtime: nil)
        Self.expectError(.notFound, "setAttributes of a missing path") {
            try f.mirror.setAttributes(Self.p("missing"), mode: 0o644, mtime: nil)
        }
    }
}
