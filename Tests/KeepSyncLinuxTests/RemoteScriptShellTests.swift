import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The remote batch scripts run by whatever `sh` the remote host has: dash on Debian,
/// bash on many others. Each script runs here, locally, once under each shell found,
/// over the same items in a fresh directory: the answers and the tree made must agree.
@Suite("Remote scripts under dash and bash")
struct RemoteScriptShellTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    /// The shells to compare (`sh` is the reference).
    static let shells: [String] = ["sh", "bash"].filter { shell in
        (try? Sys.runCaptured([b(shell), b("-c"), b("true")], input: [], timeout: .seconds(10)).status) == 0
    }

    /// Runs `body` over `items` in `directory` with `shell` as the inner shell (`perCall`
    /// nil: a body that loops over its arguments itself); the answer tokens, each `S`
    /// answer's record name, and the tree after, as text.
    static func run(_ shell: String, in directory: [UInt8], _ body: String, perCall: Int?, items: [[[UInt8]]],
                    after: String?) throws -> (tokens: [String], tree: [String]) {
        var script = RemoteScript.batch(directory, body, perCall: perCall, items: items.count, after: after)
        let inner = b(" sh -c '"), replacement = b(" \(shell) -c '")
        if let at = script.firstRange(of: inner) { script.replaceSubrange(at, with: replacement) }
        let output = try Sys.runCaptured([b("sh"), b("-c"), script], input: RemoteScript.input(items.flatMap { $0 }),
                                         timeout: .seconds(30))
        #expect(output.status == 0, "\(shell): \(String(decoding: output.stderr, as: UTF8.self))")
        let replies = RemoteMirror.replies(output.stdout, items: items, withRecords: after != nil)
        let tokens = replies.map { reply in
            reply.token + (reply.token == "E" ? "" : (reply.record.map { " " + ByteEscaping.escape($0.name) } ?? ""))
        }
        var tree: [String] = []
        func walk(_ relative: [UInt8]) throws {
            let path = relative.isEmpty ? directory : directory + [0x2F] + relative
            for name in try LiveMirrorTests.LiveFS.list(path).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                let child = relative.isEmpty ? name : relative + [0x2F] + name
                let st = try #require(LiveMirrorTests.LiveFS.lstat(directory + [0x2F] + child))
                let kind = st.st_mode & S_IFMT
                // A time the script set (before 2023), else the moment the entry was made.
                let mtime = st.st_mtim.tv_sec < 1_700_000_000 ? "\(st.st_mtim.tv_sec)" : "now"
                tree.append("\(ByteEscaping.escape(child)) \(String(st.st_mode & 0o7777, radix: 8)) "
                            + (kind == S_IFLNK ? "-> \(ByteEscaping.escape(try LiveMirrorTests.LiveFS.readlink(directory + [0x2F] + child))) \(mtime)"
                               : kind == S_IFDIR ? "dir \(mtime)" : "file"))
                if kind == S_IFDIR { try walk(child) }
            }
        }
        try walk([])
        return (tokens, tree)
    }

    /// `body` under every shell, each in a directory prepared by `prepare`; all agree.
    static func agree(_ name: String, _ body: String, perCall: Int?, items: [[[UInt8]]], after: String?,
                      prepare: ([UInt8]) throws -> Void) throws -> [String] {
        var results: [(shell: String, tokens: [String], tree: [String])] = []
        for shell in shells {
            let directory = try ScratchDirectory.make(prefix: "keepsync-\(name)-\(shell)")
            defer { try? ScratchDirectory.removeTree(directory) }
            try prepare(directory)
            let r = try run(shell, in: directory, body, perCall: perCall, items: items, after: after)
            results.append((shell, r.tokens, r.tree))
        }
        for r in results.dropFirst() {
            #expect(r.tokens == results[0].tokens, "\(name): \(r.shell) answers \(r.tokens), sh \(results[0].tokens)")
            #expect(r.tree == results[0].tree, "\(name): \(r.shell) made \(r.tree), sh \(results[0].tree)")
        }
        return results.first?.tokens ?? []
    }

    @Test("mkdir runs, links and attributes: the same answers and the same tree under dash and bash")
    func batchScriptsAgree() throws {
        guard Self.shells.count == 2 else {
            print("RemoteScriptShellTests: skipped: only \(Self.shells) found (need sh and bash)")
            return
        }
        let names = ["a", "a/b 'q' $1", "taken", "a/b 'q' $1/c\n", "a/${w1}`x`$(y) \"z", "a/${q1}", "m2", "m2/n",
                     String(repeating: "x", count: 300), "missing/d"]
        let modes = ["750", "750", "750", "750", "750", "750", "700", "700", "750", "750"]
        let dirs = try Self.agree("mkdir", RemoteScript.makeDirectory, perCall: 2,
                                  items: zip(names, modes).map { [Self.b($0), Self.b($1)] },
                                  after: RemoteScript.flushDirectories) { dir in
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/taken"), Self.b("a file"))
        }
        #expect(dirs.map { String($0.prefix(1)) } == ["S", "S", "E", "S", "S", "S", "S", "S", "E", "P"], "\(dirs)")

        let links = try Self.agree("symlink", RemoteScript.makeSymlink, perCall: 4,
                                   items: [["l1", "../t a\n", "@1500000000.000000007", ".tmp1"],
                                           ["taken", "new", "@1600000000.000000009", ".tmp2"],
                                           ["missing/l", "x", "@1500000000.000000007", "missing/.tmp3"]].map { $0.map(Self.b) },
                                   after: RemoteScript.statMade) { dir in
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/taken"), Self.b("a file"))
        }
        #expect(links.map { String($0.prefix(1)) } == ["S", "S", "P"], "\(links)")

        let attributes = try Self.agree("attributes", RemoteScript.setAttributes, perCall: 3,
                                        items: [["d", "705", "@1500000000.000000005"], ["gone", "-", "@1500000000.000000005"],
                                                ["d", "-", "@1400000000.000000001"]].map { $0.map(Self.b) },
                                        after: nil) { dir in
            try LiveMirrorTests.LiveFS.mkdir(dir + Self.b("/d"), mode: 0o755)
        }
        #expect(attributes == ["0", "N", "0"], "\(attributes)")
    }
}
