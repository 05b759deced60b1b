import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The remote scripts that keep versions (issue 40), run here under dash and bash: the
/// same answers and trees; `keepStaged` by `perl` and, on a host without it, by the
/// shell alone, to the same names.
extension RemoteScriptShellTests {
    /// A version's words (`RemoteMirror.VersionKeeping.words`) at a fixed time.
    static func keepWords(_ path: String) -> [[UInt8]] {
        RemoteMirror.VersionKeeping(directory: RelativePath(".kv"), now: { 0 }).words(RelativePath(path), seconds: 1_765_000_000)
    }

    @Test("remove, rename and symlink keep what they replace or remove in the versions directory, under dash and bash alike")
    func keepingScriptsAgree() throws {
        guard Self.shells.count == 2 else {
            print("RemoteScriptShellTests: skipped: only \(Self.shells) found (need sh and bash)")
            return
        }
        func prepare(_ dir: [UInt8]) throws {
            try LiveMirrorTests.LiveFS.mkdir(dir + Self.b("/d"), mode: 0o755)
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/d/f 'q'.txt"), Self.b("f"))
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/gone.txt"), Self.b("gone"))
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/target"), Self.b("replaced by a rename"))
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/from"), Self.b("from"))
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/l"), Self.b("a file where a link goes"))
        }
        let removed = try Self.agree("remove-keeping", RemoteScript.removeKeeping, perCall: 5,
                                     items: ["d", "gone.txt", "gone.txt", "missing"].map { [Self.b($0)] + Self.keepWords($0) },
                                     after: nil, prepare: prepare)
        #expect(removed == ["0", "0", "0", "0"], "\(removed)")
        let renamed = try Self.agree("rename-keeping", RemoteScript.renameKeeping, perCall: 6,
                                     items: [[Self.b("from"), Self.b("target")] + Self.keepWords("target")],
                                     after: nil, prepare: prepare)
        #expect(renamed == ["0"], "\(renamed)")
        let linked = try Self.agree("symlink-keeping", RemoteScript.makeSymlinkKeeping, perCall: 8,
                                    items: [[Self.b("l"), Self.b("t"), Self.b("@1500000000.000000007"), Self.b(".tmp1")] + Self.keepWords("l")],
                                    after: RemoteScript.statMade, prepare: prepare)
        #expect(linked.map { String($0.prefix(1)) } == ["S"], "\(linked)")

        // What each kept, read back from one run under sh.
        let dir = try ScratchDirectory.make(prefix: "keepsync-keeping")
        defer { try? ScratchDirectory.removeTree(dir) }
        try prepare(dir)
        _ = try Self.run("sh", in: dir, RemoteScript.removeKeeping, perCall: 5,
                         items: ["d", "gone.txt"].map { [Self.b($0)] + Self.keepWords($0) }, after: nil)
        _ = try Self.run("sh", in: dir, RemoteScript.renameKeeping, perCall: 6,
                         items: [[Self.b("from"), Self.b("target")] + Self.keepWords("target")], after: nil)
        let kept = try LiveMirrorTests.LiveFS.list(dir + Self.b("/.kv")).map { String(decoding: $0, as: UTF8.self) }.sorted()
        #expect(kept == ["d~20251206-054640Z", "gone~20251206-054640Z.txt", "target~20251206-054640Z"], "\(kept)")
        #expect(try LiveMirrorTests.LiveFS.readFile(dir + Self.b("/.kv/d~20251206-054640Z/f 'q'.txt")) == Self.b("f"))
        #expect(try LiveMirrorTests.LiveFS.readFile(dir + Self.b("/target")) == Self.b("from"))
        var st = stat()
        #expect(lstat(String(decoding: dir, as: UTF8.self) + "/.kv", &st) == 0 && st.st_mode & 0o777 == 0o700, "made 0700")
    }

    @Test("keepStaged moves rsync's backups to the versions' names (-2 past a name taken), by perl and by the shell alone alike")
    func keepStagedWithAndWithoutPerl() throws {
        guard ChildSpawning.locate("perl") != nil else {
            print("RemoteScriptShellTests: keepStagedWithAndWithoutPerl skipped: perl is not installed")
            try Test.cancel("perl is not installed")
        }
        // A PATH with what the scripts use but perl.
        let bin = try ScratchDirectory.make(prefix: "keepsync-noperl")
        defer { try? ScratchDirectory.removeTree(bin) }
        for tool in ["sh", "xargs", "mv", "ln", "mkdir", "rm", "find", "touch", "cat"] {
            let at = try #require(ChildSpawning.locate(tool), "\(tool) is not installed")
            #expect(symlink(at, String(decoding: bin, as: UTF8.self) + "/" + tool) == 0)
        }
        var results: [(tokens: [String], tree: [String])] = []
        for path in ["", "PATH=\(String(decoding: bin, as: UTF8.self)); export PATH; "] {
            let dir = try ScratchDirectory.make(prefix: "keepsync-staged")
            defer { try? ScratchDirectory.removeTree(dir) }
            try LiveMirrorTests.LiveFS.makeDirectories(dir, ".kv/.in/docs")
            try LiveMirrorTests.LiveFS.makeDirectories(dir, ".kv/docs")
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/.kv/.in/docs/r.odt"), Self.b("old r"))
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/.kv/docs/r~20251206-054640Z.odt"), Self.b("taken"))
            try LiveMirrorTests.LiveFS.makeDirectories(dir, ".kv/.in/new\ndir")
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/.kv/.in/new\ndir/$x 'y'"), Self.b("deep"))
            let items = ["docs/r.odt", "new\ndir/$x 'y'", "not/staged"].map { p in
                [Self.b(".kv/.in/" + p)] + Array(Self.keepWords(p).prefix(3))
            }
            let script = Self.b(path) + RemoteScript.batch(dir, RemoteScript.keepStaged, perCall: 4, items: items.count, looping: false)
            let output = try Sys.runCaptured([Self.b("/bin/sh"), Self.b("-c"), script], input: RemoteScript.input(items.flatMap { $0 }),
                                             timeout: .seconds(30))
            #expect(output.status == 0, "\(String(decoding: output.stderr, as: UTF8.self))")
            let tokens = RemoteMirror.replies(output.stdout, items: items, withRecords: false).map(\.token)
            let tree = try TreeText.of(dir + Self.b("/.kv"))
            results.append((tokens, tree))
        }
        #expect(results[0].tokens == ["0", "0", "-"], "\(results[0].tokens)")
        #expect(results[0].tree.contains("docs/r~20251206-054640Z-2.odt = old r"), "\(results[0].tree)")
        #expect(results[0].tree.contains("new\\x0adir/$x 'y'~20251206-054640Z = deep"), "\(results[0].tree)")
        #expect(results[1].tokens == results[0].tokens && results[1].tree == results[0].tree,
                "without perl: \(results[1]) with: \(results[0])")
    }

    /// A tree as `path = content` lines (files) and `path/` (directories), sorted.
    enum TreeText {
        static func of(_ root: [UInt8], _ relative: [UInt8] = []) throws -> [String] {
            var out: [String] = []
            let here = relative.isEmpty ? root : root + [0x2F] + relative
            for name in try LiveMirrorTests.LiveFS.list(here) {
                let child = relative.isEmpty ? name : relative + [0x2F] + name
                var st = stat()
                _ = lstat(String(decoding: root + [0x2F] + child, as: UTF8.self), &st)
                if st.st_mode & S_IFMT == S_IFDIR {
                    out.append(ByteEscaping.escape(child) + "/")
                    out += try of(root, child)
                } else {
                    out.append(ByteEscaping.escape(child) + " = " + String(decoding: try LiveMirrorTests.LiveFS.readFile(root + [0x2F] + child), as: UTF8.self))
                }
            }
            return out.sorted()
        }
    }
}
