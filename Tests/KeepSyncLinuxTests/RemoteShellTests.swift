import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The remote shell's loop (`RemoteShell.loop`), run here under the local shells: what a
/// request carries and what its answer holds, byte for byte, both ways large at once,
/// and the ends of a shell (its process gone, a deadline).
@Suite("Remote shell loop")
struct RemoteShellTests {
    typealias LiveFS = LiveMirrorTests.LiveFS
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    /// The shells to run the loop under: dash, bash, and bash running a pipeline's last
    /// part in the current shell as ksh93, mksh and zsh do (`lastpipe`).
    static let shells: [[String]] = [["sh"], ["bash"], ["bash", "-O", "lastpipe"]].filter { shell in
        (try? Sys.runCaptured(shell.map(b) + [b("-c"), b("true")], input: [], timeout: .seconds(10)).status) == 0
    }

    /// The answer to `script` with `input`, or a recorded issue.
    static func ask(_ shell: RemoteShell, _ script: String, _ input: [UInt8] = [],
                    timeout: Duration = .seconds(30)) -> RemoteOutput? {
        switch shell.exchange(b(script), input: input, timeout: timeout) {
        case .answered(let output): return output
        case let other:
            Issue.record("\(script): \(other)")
            return nil
        }
    }

    /// The requests every loop must answer exactly; the count asked.
    static func exercise(_ shell: RemoteShell, _ name: String) -> Int {
        var every: [UInt8] = []
        for _ in 0..<4096 { every += (0...255).map { UInt8($0) } }
        // 1 MiB through `cat`: more than any pipe holds, written while the answer is read.
        let echoed = ask(shell, "cat", every)
        #expect(echoed?.stdout == every && echoed?.status == 0, "\(name): cat of 1 MiB: \(echoed?.stdout.count ?? -1) bytes")
        // Output and error without a final newline, and a status.
        let mixed = ask(shell, "printf out; printf err >&2; exit 7")
        #expect(mixed?.status == 7 && mixed?.stdout == b("out") && mixed?.stderr == b("err"), "\(name): \(String(describing: mixed))")
        // A script that reads 3 bytes of 100 KB: the rest is drained, the next request intact.
        let partial = ask(shell, "head -c 3", [UInt8](repeating: 0x61, count: 100_000))
        #expect(partial?.stdout == b("aaa"), "\(name): \(partial?.stdout.count ?? -1) bytes")
        // What looks like a trailer, and a script with a newline and quotes, stays output.
        let lookalike = ask(shell, "printf '%s 0\\n' 0123456789abcdef\necho \"two\"")
        #expect(lookalike?.stdout == b("0123456789abcdef 0\ntwo\n"), "\(name): \(String(describing: lookalike))")
        // NUL-separated words to xargs -0, as the batch scripts take them.
        let words = ask(shell, "xargs -0 printf '[%s]'", RemoteScript.input([b("a b"), b("new\nline"), [0xFF, 0x27]]))
        #expect(words?.stdout == b("[a b][new\nline]") + [0x5B, 0xFF, 0x27, 0x5D], "\(name): \(String(describing: words))")
        // 2 MB out, nothing in.
        let large = ask(shell, "head -c 2000000 /dev/zero")
        #expect(large?.stdout.count == 2_000_000 && large?.stdout.allSatisfy { $0 == 0 } == true, "\(name): \(large?.stdout.count ?? -1)")
        return 6
    }

    @Test("requests of any bytes, a MiB both ways at once, a script that leaves input unread: each answer exact, under dash, bash and bash with lastpipe, one process")
    func requestsAreExact() throws {
        #expect(Self.shells.count == 3, "\(Self.shells)")
        for words in Self.shells {
            let name = words.joined(separator: " ")
            let shell = try RemoteShell(words.map(Self.b) + [Self.b("-c"), Self.b(RemoteShell.loop)])
            defer { shell.end() }
            let pid = shell.pid
            let asked = Self.exercise(shell, name)
            #expect(shell.answered == asked && shell.pid == pid && shell.isAlive, "\(name): \(shell.answered) of \(asked) answered")
            print("RemoteShellTests: \(name): \(shell.answered) requests answered by one loop (pid \(pid))")
        }
    }

    @Test("a head that reads ahead (BusyBox's, BSD's): the loop reads with dd instead, and every request still gets exactly its bytes")
    func headThatReadsAhead() throws {
        let dir = try ScratchDirectory.make(prefix: "keepsync-greedy-head-")
        defer { try? ScratchDirectory.removeTree(dir) }
        // Reads up to 64 KiB of whatever its pipe holds, then keeps the first bytes asked.
        let head = dir + Self.b("/head")
        try LiveFS.writeFile(head, Self.b("#!/bin/sh\ndd bs=65536 count=1 2>/dev/null | /usr/bin/head \"$@\"\n"))
        chmod(String(decoding: head, as: UTF8.self), 0o755)
        let path = String(decoding: dir, as: UTF8.self) + ":/usr/bin:/bin"
        let greedy = try Sys.runCaptured([Self.b("env"), Self.b("PATH=\(path)"), Self.b("sh"), Self.b("-c"),
                                          Self.b("printf ab | { head -c 1 >/dev/null; head -c 1; }")], input: [], timeout: .seconds(10))
        #expect(greedy.stdout.isEmpty, "the stand-in head reads ahead: \(String(decoding: greedy.stdout, as: UTF8.self))")
        let shell = try RemoteShell([Self.b("env"), Self.b("PATH=\(path)"), Self.b("sh"), Self.b("-c"), Self.b(RemoteShell.loop)])
        defer { shell.end() }
        let asked = Self.exercise(shell, "sh with a greedy head")
        #expect(shell.answered == asked)
    }

    @Test("a shell whose process ends answers .ended with its status; one past its deadline .timedOut")
    func endsAndDeadlines() throws {
        let quits = try RemoteShell([Self.b("sh"), Self.b("-c"), Self.b("read x; echo gone >&2; exit 3")])
        guard case .ended(let status, let stderr) = quits.exchange(Self.b("true"), input: [], timeout: .seconds(10)) else {
            Issue.record("not ended")
            return
        }
        #expect(status == 3 && stderr == Self.b("gone\n") && !quits.isAlive)
        let slow = try RemoteShell([Self.b("sh"), Self.b("-c"), Self.b(RemoteShell.loop)])
        defer { slow.end() }
        let t0 = ContinuousClock.now
        guard case .timedOut = slow.exchange(Self.b("sleep 10"), input: [], timeout: .milliseconds(300)) else {
            Issue.record("not timed out")
            return
        }
        #expect(ContinuousClock.now - t0 < .seconds(5))
    }
}
