import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The source re-check after a remote transfer (SPEC Guarantees, Atomic: a file that
/// changes while it is copied is copied again) for a writer that leaves no mark but the
/// ctime: rewritten in place with the same size and its mtime put back (`touch -r`,
/// `rsync --inplace -t` into the source). The remote's rsync is a wrapper that does that
/// rewrite right after it received the file, before keepsync looks at the source again.
@Suite("Remote source re-check")
struct RemoteSourceRecheckTests {
    typealias LiveFS = LiveMirrorTests.LiveFS

    @Test("a file rewritten in place during its transfer, same size and mtime put back, is sent again")
    func rewriteKeepingSizeAndMtimeIsSentAgain() async throws {
        try await offThePool {
            let sshd = try LoopbackSSHDTests.startOrSkip("rewriteKeepingSizeAndMtimeIsSentAgain")
            defer { sshd.stop() }
            _ = try LoopbackSSHDTests.rsyncOrSkip("rewriteKeepingSizeAndMtimeIsSentAgain")
            let source = try ScratchDirectory.make(prefix: "keepsync-recheck-source")
            let remote = try ScratchDirectory.make(prefix: "keepsync-recheck-mirror")
            let side = try ScratchDirectory.make(prefix: "keepsync-recheck-side")
            defer { for dir in [source, remote, side] { try? ScratchDirectory.removeTree(dir) } }
            func path(_ dir: [UInt8], _ name: String) -> [UInt8] { dir + [0x2F] + Array(name.utf8) }

            var random = SplitMix64(seed: 3636)
            let first = random.bytes(64 << 10), second = random.bytes(64 << 10)
            let file = path(source, "report.odt")
            try LiveFS.writeFile(file, first)
            try LiveFS.setTimes(file, seconds: 1_700_000_000, nanoseconds: 250_000_000)
            try LiveFS.writeFile(path(side, "second"), second)
            try LiveFS.writeFile(path(side, "armed"), [])
            // The remote's rsync: after the first transfer, the source file is rewritten in
            // place with the second version and its mtime put back.
            let wrapper = path(side, "rsync-then-rewrite")
            let q = { (p: [UInt8]) in "'" + String(decoding: p, as: UTF8.self) + "'" }
            let script = """
                #!/bin/sh
                rsync "$@"; status=$?
                if [ -e \(q(path(side, "armed"))) ]; then
                    rm -f \(q(path(side, "armed")))
                    touch -r \(q(file)) \(q(path(side, "mtime")))
                    cat \(q(path(side, "second"))) > \(q(file))
                    touch -r \(q(path(side, "mtime"))) \(q(file))
                fi
                exit $status

                """
            try LiveFS.writeFile(wrapper, Array(script.utf8))
            try LiveFS.chmod(wrapper, 0o755)

            let session = try RemoteSession(ssh: sshd.sshArguments.map { Array($0.utf8) }, destination: sshd.destination,
                                            host: sshd.host, rsyncPath: wrapper,
                                            timing: .init(connectSeconds: 3, aliveInterval: 1, aliveCount: 3, command: .seconds(20)))
            defer { session.close() }
            let mirror = RemoteMirror(session: session, target: RemoteTarget(user: sshd.user, host: sshd.host, directory: remote),
                                      sourceRoot: source, rsyncIOTimeout: 20)
            let before = try #require(LiveFS.lstat(file))
            let results = mirror.install([RelativePath("report.odt")], from: try PosixFileSystem(rootPath: source),
                                         io: .serial, logger: .silent)

            // The rewrite happened, and left size and mtime as they were.
            #expect(LiveFS.lstat(path(side, "armed")) == nil, "the wrapper never rewrote the source")
            let after = try #require(LiveFS.lstat(file))
            #expect(after.st_size == before.st_size && after.st_mtim.tv_sec == before.st_mtim.tv_sec
                    && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec)
            #expect(try LiveFS.readFile(file) == second)
            // keepsync saw it (the ctime) and sent the file again.
            guard case .success(let copied?) = results.first?.result else {
                Issue.record("the install failed: \(String(describing: results.first?.result))")
                return
            }
            #expect(session.rsyncRuns == 2, "\(session.rsyncRuns) rsync runs: the rewrite was not noticed")
            #expect(try LiveFS.readFile(path(remote, "report.odt")) == second, "the remote keeps the first version, recorded as the second")
            #expect(copied.source.ctime.seconds == Int64(after.st_ctim.tv_sec) && copied.source.ctime.nanoseconds == Int64(after.st_ctim.tv_nsec))
        }
    }
}
