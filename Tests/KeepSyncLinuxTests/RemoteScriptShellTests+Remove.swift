import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The remote `remove` script (a removal, and thinning's removal of many versions at
/// once), run here under dash and bash: the same answers and trees, and one `rm` for a
/// whole batch.
extension RemoteScriptShellTests {
    @Test("remove answers each path (gone, a symlink on the way, a parent missing, rm's own error) alike under dash and bash")
    func removeAnswersAgree() throws {
        guard Self.shells.count == 2 else {
            print("RemoteScriptShellTests: skipped: only \(Self.shells) found (need sh and bash)")
            return
        }
        let names = ["gone 'q' $1.txt", "d", "d/f", "missing", "ln/x", "nodir/x", ".", "new\nline"]
        let answers = try Self.agree("remove", RemoteScript.remove, perCall: nil, items: names.map { [Self.b($0)] },
                                     after: nil) { dir in
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/gone 'q' $1.txt"), Self.b("x"))
            try LiveMirrorTests.LiveFS.makeDirectories(dir, "d/sub")
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/d/f"), Self.b("f"))
            try LiveMirrorTests.LiveFS.makeDirectories(dir, "elsewhere/x")
            try LiveMirrorTests.LiveFS.symlink(Self.b("elsewhere"), at: dir + Self.b("/ln"))
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/new\nline"), Self.b("n"))
        }
        // "d/f", inside "d" removed in the same batch, is gone: done. "." is refused by rm.
        #expect(answers.map { String($0.prefix(1)) } == ["0", "0", "0", "0", "L", "P", "E", "0"], "\(answers)")
    }

    @Test("remove runs one rm for a whole batch (not one per path: thinning 1,000 remote versions forked 2,000 processes)")
    func removeRunsOneRmPerBatch() throws {
        let realRm = try #require(ChildSpawning.locate("rm"), "rm is not installed")
        // A PATH whose rm notes each run, then runs the real one.
        let bin = try ScratchDirectory.make(prefix: "keepsync-rm-count")
        defer { try? ScratchDirectory.removeTree(bin) }
        let log = bin + Self.b("/runs")
        try LiveMirrorTests.LiveFS.writeFile(bin + Self.b("/rm"), Self.b("#!/bin/sh\necho run >> '\(String(decoding: log, as: UTF8.self))'\nexec \(realRm) \"$@\"\n"))
        try LiveMirrorTests.LiveFS.chmod(bin + Self.b("/rm"), 0o755)
        let dir = try ScratchDirectory.make(prefix: "keepsync-remove-batch")
        defer { try? ScratchDirectory.removeTree(dir) }
        try LiveMirrorTests.LiveFS.makeDirectories(dir, ".kv/kept~20251206-054640Z")
        var items: [[[UInt8]]] = [[Self.b(".kv/kept~20251206-054640Z")]]
        for i in 0..<200 {
            let name = ".kv/o\(i)~20251206-054640Z"
            try LiveMirrorTests.LiveFS.writeFile(dir + Self.b("/" + name), Self.b("v\(i)"))
            items.append([Self.b(name)])
        }
        let script = Self.b("PATH=\(String(decoding: bin, as: UTF8.self)):$PATH; export PATH; ") + RemoteScript.batch(dir, RemoteScript.remove)
        let output = try Sys.runCaptured([Self.b("/bin/sh"), Self.b("-c"), script], input: RemoteScript.input(items.flatMap { $0 }),
                                         timeout: .seconds(60))
        #expect(output.status == 0, "\(String(decoding: output.stderr, as: UTF8.self))")
        let tokens = RemoteMirror.replies(output.stdout, items: items, withRecords: false).map(\.token)
        #expect(tokens == Array(repeating: "0", count: items.count), "\(tokens)")
        #expect(try LiveMirrorTests.LiveFS.list(dir + Self.b("/.kv")).isEmpty)
        let runs = ((try? LiveMirrorTests.LiveFS.readFile(log)) ?? []).filter { $0 == 0x0A }.count
        #expect(runs == 1, "\(runs) rm runs to remove \(items.count) paths")
    }
}
