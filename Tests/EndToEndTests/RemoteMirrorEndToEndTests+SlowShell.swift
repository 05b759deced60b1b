import Foundation
import Glibc
import KeepSyncTestSupport
import Testing

/// A remote whose login shell is slow to start (issue 39): sshd runs it for every session,
/// and a `~/.bashrc` running pyenv or conda takes 0.1-1 s. Here each bash sshd starts
/// notes itself and sleeps 0.25 s (`LoopbackSSHD.start(shellStartup:)`).
extension RemoteMirrorEndToEndTests {
    @Test("a remote whose login shell takes 0.25 s: 20 single-file changes, one at a time, start no remote shell (the one from the start serves them) and each goes to an rsync started before it came",
          .timeLimit(.minutes(3)))
    func slowLoginShellIsPaidOncePerConnection() async throws {
        let r = try Remote("slowLoginShellIsPaidOncePerConnection", shellStartup: .milliseconds(250))
        let agent = try await r.start(["-v"])
        defer { agent.killNow() }
        // The counter counts: the harness's probe and the agent's remote shell were noted,
        // and an rsync waits for the first change.
        let ready = await eventually(timeout: .seconds(30)) { r.sshd.loginShells.contains { $0.command == "rsync" } }
        let before = r.sshd.loginShells
        #expect(ready && before.contains { $0.command == "true" } && before.contains { $0.command == "exec" },
                "login shells before the first change: \(before.map(\.command))")

        let transfers = { agent.stderrLines.filter { $0.contains("rsync of 1 to 127.0.0.1") } }
        let transfersBefore = transfers().count
        for i in 0..<20 {
            let name = "change-\(i).txt"
            try FS.writeFile(r.sandbox.source / name, "change \(i)\n")
            let arrived = await eventually(timeout: .seconds(30)) {
                (try? FS.readFile(r.sandbox.mirror / name)) == Self.b("change \(i)\n") && transfers().count > transfersBefore + i
            }
            try #require(arrived, "\(name) did not arrive; status.json: \(RunCommandTests.statusText(r.sandbox))\n\(agent.stderrText)")
        }
        let during = Array(r.sshd.loginShells.dropFirst(before.count))
        let commands = during.filter { $0.command != "rsync" }
        #expect(commands.count <= 1, "login shells for remote commands during 20 changes: \(commands.map(\.command))")
        // rsync takes one list per process: each change's transfer is an rsync started
        // ahead, and the next one is started after it, off the change's path.
        #expect(during.count - commands.count <= 21, "\(during.count - commands.count) rsync login shells for 20 changes")
        let lines = Array(transfers().dropFirst(transfersBefore))
        #expect(lines.count == 20 && lines.allSatisfy { $0.contains("(started ahead)") },
                "every transfer to an rsync started ahead:\n\(lines.joined(separator: "\n"))")
        print("RemoteMirrorEndToEndTests: slow login shell: \(before.count) login shells before the first change, during 20 changes \(commands.count) for remote commands and \(during.count - commands.count) for rsync (each started ahead: \(lines.filter { $0.contains("(started ahead)") }.count) of \(lines.count) transfers)")
    }
}
