import Glibc
import KeepSyncCore
import KeepSyncLinux
import Testing
import KeepSyncTestSupport

@Suite("AtomicFileAccessor")
struct AtomicFileAccessorTests {
    static func p(_ text: String) -> RelativePath { RelativePath(text) }
    static func b(_ text: String) -> [UInt8] { Array(text.utf8) }
    static let t1 = Timespec(seconds: 1_600_000_000, nanoseconds: 123_456_789)
    static let t2 = Timespec(seconds: 1_000_000_000, nanoseconds: 999)

    /// A temp directory holding `source/`, `mirror/` and an outside `canary/` directory.
    final class Sandbox {
        let base: [UInt8]
        let sourcePath: [UInt8]
        let mirrorPath: [UInt8]
        let canaryPath: [UInt8]
        let source: PosixFileSystem
        let mirror: AtomicFileAccessor

        init() throws {
            base = try ScratchDirectory.make(prefix: "keepsync-accessor")
            sourcePath = base + Array("/source".utf8)
            mirrorPath = base + Array("/mirror".utf8)
            canaryPath = base + Array("/canary".utf8)
            for dir in [sourcePath, mirrorPath, canaryPath] { try ContractPOSIX.makeDirectory(dir, mode: 0o755) }
            source = try PosixFileSystem(rootPath: sourcePath)
            mirror = try AtomicFileAccessor(rootPath: mirrorPath)
        }

        func inSource(_ path: RelativePath) -> [UInt8] { ContractPOSIX.join(sourcePath, path) }
        func inMirror(_ path: RelativePath) -> [UInt8] { ContractPOSIX.join(mirrorPath, path) }
        func inCanary(_ name: String) -> [UInt8] { canaryPath + [0x2F] + Array(name.utf8) }

        func cleanup() { try? ScratchDirectory.removeTree(base) }

        /// Everything observable about the canary: names, and each entry's metadata and bytes.
        struct CanaryState: Equatable {
            var directory: ContractPOSIX.Info?
            var entries: [[UInt8]: ContractPOSIX.Info]
            var contents: [[UInt8]: [UInt8]]
        }

        func canary() -> CanaryState {
            var entries: [[UInt8]: ContractPOSIX.Info] = [:]
            var contents: [[UInt8]: [UInt8]] = [:]
            for name in ContractPOSIX.names(canaryPath) ?? [] {
                let path = canaryPath + [0x2F] + name
                entries[name] = ContractPOSIX.lstat(path)
                contents[name] = ContractPOSIX.readFile(path)
            }
            return CanaryState(directory: ContractPOSIX.lstat(canaryPath), entries: entries, contents: contents)
        }

        /// Every `.keepsync-tmp-*` name anywhere below a directory (not following links).
        func temporaryNames(below dir: [UInt8]) -> [[UInt8]] {
            var found: [[UInt8]] = []
            for name in ContractPOSIX.names(dir) ?? [] {
                let path = dir + [0x2F] + name
                if TemporaryName.matches(name) || name.starts(with: TemporaryName.prefix) { found.append(path) }
                if let info = ContractPOSIX.lstat(path), info.isDirectory { found += temporaryNames(below: path) }
            }
            return found
        }
    }

    // MARK: Confinement

    enum Escape: String, Sendable, CaseIterable {
        case installNew, installOverCanaryFile, makeDirectory, makeSymlink, remove, setAttributes
        case renameOut, renameIn, deeperInstall, setAttributesOfTheLink
    }

    @Test("a mirror directory swapped for a link to an outside directory is never written through",
          arguments: Escape.allCases)
    func confinement(escape: Escape) throws {
        let s = try Sandbox()
        defer { s.cleanup() }
        try ContractPOSIX.writeFile(s.inCanary("keep"), Self.b("canary"), mode: 0o644, mtime: Self.t2)
        try ContractPOSIX.makeDirectory(s.inCanary("inner"), mode: 0o755)
        try ContractPOSIX.setTimes(s.inCanary("inner"), Self.t2)
        try ContractPOSIX.setTimes(s.canaryPath, Self.t2)
        try ContractPOSIX.writeFile(s.inSource(Self.p("f")), Self.b("payload"), mode: 0o644, mtime: Self.t1)
        try ContractPOSIX.writeFile(s.inMirror(Self.p("local")), Self.b("local"), mode: 0o644, mtime: Self.t1)
        // The mirror had a real directory `sub`; another process swaps it for a link.
        _ = try s.mirror.makeDirectory(Self.p("sub"), mode: 0o755)
        try? ScratchDirectory.removeTree(s.inMirror(Self.p("sub")))
        try ContractPOSIX.makeLink(s.inMirror(Self.p("sub")), to: s.canaryPath)
        let before = s.canary()

        let file = try s.source.open(Self.p("f"))
        defer { file.close() }
        var thrown: KeepSyncError?
        do {
            switch escape {
            case .installNew: _ = try s.mirror.install(Self.p("sub/new"), from: file)
            case .installOverCanaryFile: _ = try s.mirror.install(Self.p("sub/keep"), from: file)
            case .deeperInstall: _ = try s.mirror.install(Self.p("sub/inner/new"), from: file)
            case .makeDirectory: _ = try s.mirror.makeDirectory(Self.p("sub/newdir"), mode: 0o755)
            case .makeSymlink: _ = try s.mirror.makeSymlink(Self.p("sub/newlink"), target: Self.b("x"), mtime: Self.t1)
            case .remove: try s.mirror.remove(Self.p("sub/keep"))
            case .setAttributes: try s.mirror.setAttributes(Self.p("sub/keep"), mode: 0o600, mtime: Self.t1)
            case .renameOut: try s.mirror.rename(Self.p("sub/keep"), to: Self.p("stolen"))
            case .renameIn: try s.mirror.rename(Self.p("local"), to: Self.p("sub/local"))
            case .setAttributesOfTheLink: try s.mirror.setAttributes(Self.p("sub"), mode: 0o700, mtime: Self.t1)
            }
        } catch let e as KeepSyncError {
            thrown = e
        }
        #expect(s.canary() == before, "the canary is unchanged")
        #expect(s.temporaryNames(below: s.canaryPath) == [])
        #expect(s.temporaryNames(below: s.mirrorPath) == [])
        if escape != .setAttributesOfTheLink {
            // Acting on the link itself may succeed (it lives in the mirror); anything below it must fail.
            let e = try #require(thrown, "\(escape) below a link must fail")
            // A link as the last directory component gives ENOTDIR under O_DIRECTORY|O_NOFOLLOW
            // (.notFound); deeper it gives ELOOP (.unsafePath). Either way nothing is written.
            #expect([.unsafePath, .notFound].contains(e.code), "\(e)")
            if escape == .deeperInstall { #expect(e.code == .unsafePath, "\(e)") }
        }
        // Reads do not look through the link either.
        #expect(try s.mirror.stat(Self.p("sub/keep")) == nil)
        #expect(throws: KeepSyncError.self) { _ = try s.mirror.list(Self.p("sub")) }
        #expect(throws: KeepSyncError.self) { _ = try s.mirror.open(Self.p("sub/keep")) }
        #expect(ContractPOSIX.readFile(s.inMirror(Self.p("local"))) == Self.b("local"))
    }

    @Test("a directory swapped for a link while a file is being copied into it does not redirect the file")
    func swapDuringInstall() throws {
        let s = try Sandbox()
        defer { s.cleanup() }
        try ContractPOSIX.writeFile(s.inSource(Self.p("f")), Self.b("payload"), mode: 0o644, mtime: Self.t1)
        _ = try s.mirror.makeDirectory(Self.p("sub"), mode: 0o755)
        let before = s.canary()
        let sub = s.inMirror(Self.p("sub")), moved = s.inMirror(Self.p("sub.orig")), canary = s.canaryPath
        let hooked = HookedSourceFile(try s.source.open(Self.p("f"))) {
            try ContractPOSIX.rename(sub, moved)
            try ContractPOSIX.makeLink(sub, to: canary)
        }
        defer { hooked.close() }
        _ = try? s.mirror.install(Self.p("sub/f"), from: hooked)
        #expect(s.canary() == before, "nothing landed in the canary")
        #expect(s.temporaryNames(below: s.mirrorPath) == [])
        let landed = ContractPOSIX.readFile(moved + Array("/f".utf8))
        #expect(landed == nil || landed == Self.b("payload"), "if written, then into the original directory")
    }

    @Test("remove of a tree holding a link to an outside directory removes the link only")
    func removeDoesNotFollowLinks() throws {
        let s = try Sandbox()
        defer { s.cleanup() }
        try ContractPOSIX.writeFile(s.inCanary("keep"), Self.b("canary"), mode: 0o644, mtime: Self.t2)
        try ContractPOSIX.makeDirectory(s.inMirror(Self.p("d")), mode: 0o755)
        try ContractPOSIX.makeLink(s.inMirror(Self.p("d/out")), to: s.canaryPath)
        try ContractPOSIX.makeDirectory(s.inMirror(Self.p("d/sub")), mode: 0o755)
        try ContractPOSIX.makeLink(s.inMirror(Self.p("d/sub/out2")), to: s.inCanary("keep"))
        let before = s.canary()
        try s.mirror.remove(Self.p("d"))
        #expect(ContractPOSIX.lstat(s.inMirror(Self.p("d"))) == nil)
        #expect(s.canary() == before)
    }

    // MARK: Temp files

    enum FailedInstall: String, Sendable, CaseIterable {
        case ontoDirectory, sourceChangedAfterOpen, sourceChangedDuringRead, readError
    }

    @Test("no .keepsync-tmp-* file is left after a failed install", arguments: FailedInstall.allCases)
    func noTemporaryLeftAfterFailure(failure: FailedInstall) throws {
        let s = try Sandbox()
        defer { s.cleanup() }
        let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0) }
        try ContractPOSIX.writeFile(s.inSource(Self.p("f")), data, mode: 0o644, mtime: Self.t1)
        _ = try s.mirror.makeDirectory(Self.p("d"), mode: 0o755)
        _ = try s.mirror.makeDirectory(Self.p("d/target"), mode: 0o755)
        let sourceFile = s.inSource(Self.p("f"))
        let opened = try s.source.open(Self.p("f"))
        let file: any SourceFile
        var target = Self.p("d/f")
        let expected: KeepSyncError.Code
        switch failure {
        case .ontoDirectory:
            file = opened
            target = Self.p("d/target")
            expected = .conflict
        case .sourceChangedAfterOpen:
            file = opened
            try ContractPOSIX.append(sourceFile, [1])
            expected = .sourceChanged
        case .sourceChangedDuringRead:
            file = HookedSourceFile(opened) { try ContractPOSIX.append(sourceFile, [1]) }
            expected = .sourceChanged
        case .readError:
            file = HookedSourceFile(opened, failReads: true)
            expected = .io
        }
        defer { file.close() }
        var thrown: KeepSyncError?
        do { _ = try s.mirror.install(target, from: file) } catch let e as KeepSyncError { thrown = e }
        #expect(thrown?.code == expected, "\(String(describing: thrown))")
        #expect(s.temporaryNames(below: s.mirrorPath) == [])
        #expect(ContractPOSIX.names(s.inMirror(Self.p("d"))) == [Self.b("target")])
    }

    @Test("a successful install and makeSymlink leave only the final name")
    func onlyFinalNames() throws {
        let s = try Sandbox()
        defer { s.cleanup() }
        try ContractPOSIX.writeFile(s.inSource(Self.p("f")), Self.b("x"), mode: 0o600, mtime: Self.t1)
        let file = try s.source.open(Self.p("f"))
        defer { file.close() }
        _ = try s.mirror.install(Self.p("f"), from: file)
        _ = try s.mirror.makeSymlink(Self.p("l"), target: Self.b("f"), mtime: Self.t1)
        _ = try s.mirror.makeSymlink(Self.p("l"), target: Self.b("g"), mtime: Self.t2)
        #expect(ContractPOSIX.names(s.mirrorPath) == [Self.b("f"), Self.b("l")])
        #expect(ContractPOSIX.readLink(s.inMirror(Self.p("l"))) == Self.b("g"))
        #expect(ContractPOSIX.lstat(s.inMirror(Self.p("l")))?.mtime == Self.t2)
    }

    // MARK: Long paths

    @Test("a 4,000-byte relative path works for every operation")
    func longPath() throws {
        let s = try Sandbox()
        defer { s.cleanup() }
        // 19 directories of 199 bytes and a 200-byte file name: 19 * 200 + 200 = 4,000 bytes.
        var dir = RelativePath.root
        for i in 0..<19 {
            let letter = UInt8(ascii: "a") + UInt8(i)
            dir = dir.appending([UInt8](repeating: letter, count: 199))
            _ = try s.mirror.makeDirectory(dir, mode: 0o755)
        }
        let file = dir.appending([UInt8](repeating: UInt8(ascii: "z"), count: 200))
        #expect(file.bytes.count == 4_000)
        try ContractPOSIX.writeFile(s.inSource(Self.p("f")), Self.b("deep content"), mode: 0o640, mtime: Self.t1)
        let source = try s.source.open(Self.p("f"))
        defer { source.close() }
        let installed = try s.mirror.install(file, from: source)
        let st = try #require(try s.mirror.stat(file))
        #expect(st.inode == installed.inode)
        #expect(st.mode == 0o640 && st.mtime == Self.t1)
        #expect(try s.mirror.list(dir).map(\.name) == [file.name])
        let reader = try s.mirror.open(file)
        defer { reader.close() }
        #expect(try readAll(reader) == Self.b("deep content"))
        try s.mirror.setAttributes(file, mode: 0o600, mtime: Self.t2)
        #expect(try s.mirror.stat(file)?.mode == 0o600)
        #expect(try s.mirror.stat(file)?.mtime == Self.t2)
        let link = dir.appending([UInt8](repeating: UInt8(ascii: "y"), count: 200))
        _ = try s.mirror.makeSymlink(link, target: Self.b("target"), mtime: Self.t1)
        #expect(try s.mirror.readLink(link) == Self.b("target"))
        let renamed = dir.appending([UInt8](repeating: UInt8(ascii: "x"), count: 200))
        try s.mirror.rename(file, to: renamed)
        #expect(try s.mirror.stat(renamed)?.inode == installed.inode)
        try s.mirror.remove(RelativePath(bytes: [UInt8](repeating: UInt8(ascii: "a"), count: 199)))
        #expect(try s.mirror.list(.root) == [])
    }
}
