import Foundation
import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// Issue 41: `keepsync run` with several mirrors, the built binary: two local mirrors and
/// one over a loopback sshd, records carried over from single-mirror services.
@Suite(.serialized, .offThePool)
struct SeveralMirrorsRunTests {
    /// Every status.json under the sandbox's state home, parsed, by state directory name.
    static func statuses(_ sandbox: Sandbox) -> [String: [String: Any]] {
        let home = sandbox.home / ".local/state/keepsync"
        var out: [String: [String: Any]] = [:]
        for name in (try? FS.list(home)) ?? [] {
            guard let data = try? FS.readFile(home / name / "status.json"),
                  let json = (try? JSONSerialization.jsonObject(with: Data(data))) as? [String: Any] else { continue }
            out[String(decoding: name, as: UTF8.self)] = json
        }
        return out
    }

    static func differences(_ sandbox: Sandbox, _ mirror: [UInt8]) -> [String] {
        do { return try sandbox.sourceSnapshot().differences(to: try TreeSnapshot.take(mirror)) } catch { return ["\(error)"] }
    }

    /// Files a `stopped after` line of `mirror` says it copied.
    static func copied(_ stderr: [String], _ mirror: String) -> Int? {
        guard let line = stderr.last(where: { $0.contains("mirror \(mirror): stopped after") }),
              let range = line.range(of: #"\d+ files copied"#, options: .regularExpression) else { return nil }
        return Int(line[range].split(separator: " ")[0])
    }

    @Test("one run feeds two local mirrors and a remote one from one watch; the local pairs' records from single-mirror services carry over (nothing copied again); a change reaches all three")
    func twoLocalMirrorsAndARemoteOne() async throws {
        let sshd = try RemoteMirrorEndToEndTests.Remote.startOrSkip("twoLocalMirrorsAndARemoteOne")
        defer { sshd.stop() }
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let second = sandbox.root / "M2", remote = sandbox.root / "R"
        let remoteName = "\(sshd.destination):" + String(decoding: remote, as: UTF8.self)
        func run(_ mirrors: [any CommandArgument], name: String) throws -> RunCommandTests.Agent {
            let arguments: [any CommandArgument] = ["run", "--source", sandbox.source] + mirrors + ["--ssh", sshd.sshCommand]
            return try RunCommandTests.Agent(binary: sandbox.binary, arguments: arguments.map(\.argumentBytes),
                                             environment: sandbox.environment, stderrPath: sandbox.root / "\(name).stderr")
        }
        // Two single-mirror services, one after the other, as before.
        for (mirror, name) in [(sandbox.mirror, "one"), (second, "two")] {
            let alone = try run(["--mirror", mirror], name: name)
            let converged = await eventually(timeout: .seconds(60)) { Self.differences(sandbox, mirror).isEmpty }
            #expect(converged, "\(alone.stderrText)")
            try await FaultInjectionTests.stop(alone, sandbox)
        }
        #expect(Self.statuses(sandbox).count == 2)

        let agent = try run(["--mirror", sandbox.mirror, "--mirror", second, "--mirror", remoteName], name: "three")
        defer { agent.killNow() }
        let watching = await eventually(timeout: .seconds(60)) {
            let all = Self.statuses(sandbox)
            return all.count == 3 && all.values.allSatisfy { $0["state"] as? String == "watching" }
        }
        #expect(watching, "\(Self.statuses(sandbox))\n\(agent.stderrText)")
        for mirror in [sandbox.mirror, second, remote] {
            #expect(Self.differences(sandbox, mirror).isEmpty, "\(String(decoding: mirror, as: UTF8.self)): \(Self.differences(sandbox, mirror))")
        }
        // One watch: one inotify instance for three mirrors.
        #expect(RunCommandTests.inotifyInstances(agent.pid) == 1)

        try FS.writeFile(sandbox.source / "live.txt", "to three mirrors\n")
        let everywhere = await eventually(timeout: .seconds(20)) {
            [sandbox.mirror, second, remote].allSatisfy { FS.exists($0 / "live.txt") }
        }
        #expect(everywhere, "\(agent.stderrText)")
        let status = try sandbox.keepsync("status", "--source", sandbox.source, "--mirror", sandbox.mirror, "--mirror", second,
                                          "--mirror", remoteName)
        #expect(status.status == 0 && status.stdoutText.components(separatedBy: "mirror ").count - 1 >= 3, "\(status)")
        try await FaultInjectionTests.stop(agent, sandbox)
        let stderr = agent.stderrText.split(separator: "\n").map(String.init)
        let copied = [sandbox.mirror, second, remote].map { Self.copied(stderr, String(decoding: $0, as: UTF8.self) == String(decoding: remote, as: UTF8.self) ? remoteName : String(decoding: $0, as: UTF8.self)) }
        #expect(copied[0] == 1 && copied[1] == 1, "the local mirrors copied only live.txt: \(copied)\n\(agent.stderrText)")
        #expect((copied[2] ?? 0) > 1, "the remote mirror got everything: \(copied)")
        print("SeveralMirrorsRunTests: one run, 3 mirrors, 1 inotify instance; files copied: \(copied.map { $0.map(String.init) ?? "?" })")
    }
}
