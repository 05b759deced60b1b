import Foundation
import Glibc
import KeepSyncCore
import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// Atomic on the remote when the connection drops (issue 36, class 3). A SIGKILLed remote
/// rsync skips its own cleanup; a cut connection does not: the receiver sees its input
/// close and runs it, which is where a kept partial file (`--partial`, `--inplace`,
/// `--delay-updates`) would land at a name a reader sees.
extension RemoteMirrorEndToEndTests {
    @Test("the connection cut mid-transfer of a 1 GiB file (its sshd process ended by SIGTERM: the remote rsync runs its own cleanup) leaves no torn file at any name on the remote; keepsync reconnects and converges",
          .timeLimit(.minutes(4)))
    func connectionCutMidTransferLeavesNoTornFile() async throws {
        let r = try Remote("connectionCutMidTransferLeavesNoTornFile")
        try r.sandbox.buildSmallSource()
        let agent = try await r.start()
        try await r.expectConverges(agent, "initial sync")

        // 1 GiB, sparse here: new on the remote, so rsync sends all of it as literal data
        // (what rsync's cleanup would keep as a partial file), slow enough to be cut.
        let size = 1 << 30
        let big = r.sandbox.source / "big.bin"
        let fd = FS.withCPath(big) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        try #require(fd >= 0)
        #expect(ftruncate(fd, off_t(size)) == 0)
        close(fd)

        func temporaries() -> [[UInt8]] {
            ((try? FS.list(r.sandbox.mirror)) ?? []).filter { $0.starts(with: Self.b(".big.bin.")) }
        }
        // Every look at the remote's final names, and what was wrong in them.
        var looks = 0
        var torn: [String] = []
        func look() {
            looks += 1
            for finding in Self.tornFiles(in: r.sandbox.mirror, against: r.sandbox.source) where !torn.contains(finding) {
                torn.append(finding)
            }
        }

        // The cut: once rsync's temp file has grown past 64 MiB, the connection's sshd ends.
        var cutAtSize = 0, finalAtCut: FileInfo?, sessionPid: pid_t = 0, rsyncs: [pid_t] = []
        let logins = r.sshd.acceptedLogins
        let cut = await eventually(timeout: .seconds(60), every: .milliseconds(2)) {
            look()
            guard let temp = temporaries().first, let st = FS.lstat(r.sandbox.mirror / temp), st.size >= 64 << 20 else { return false }
            let servers = Self.remoteRsyncs(into: r.sandbox.mirror)
            let final = FS.lstat(r.sandbox.mirror / "big.bin")
            guard let server = servers.first, let ended = r.sshd.endConnection(of: server) else { return false }
            (cutAtSize, finalAtCut, sessionPid, rsyncs) = (st.size, final, ended, servers)
            return true
        }
        try #require(cut, "no remote rsync was caught writing big.bin\n\(agent.stderrText)")
        #expect(cutAtSize < size && finalAtCut == nil,
                "the cut landed mid-transfer: \(cutAtSize) of \(size) bytes in the temp file, big.bin \(finalAtCut.map { "\($0.size) bytes" } ?? "absent")")

        // Nobody signalled the remote rsyncs: they end on their own, through their cleanup.
        func gone(_ pid: pid_t) -> Bool { ProcessTree.entry(pid).map { $0.state == UInt8(ascii: "Z") } ?? true }
        let ended = await eventually(timeout: .seconds(30), every: .milliseconds(2)) {
            look()
            return gone(sessionPid) && rsyncs.allSatisfy(gone)
        }
        #expect(ended, "the connection's sshd (\(sessionPid)) or the remote rsyncs (\(rsyncs)) did not end after the cut")
        let loginsWhenEnded = r.sshd.acceptedLogins
        look()
        // Their cleanup (which SIGKILL skips) took the temp file away (or moved it to a name).
        let leftAfterCut = temporaries().compactMap { FS.lstat(r.sandbox.mirror / $0)?.size }
        #expect(leftAfterCut.isEmpty, "rsync's temp file stayed after the remote rsyncs ended: \(leftAfterCut) bytes")

        // keepsync reconnects (a new login: the connection really dropped) and sends it again.
        let arrived = await eventually(timeout: .seconds(90), every: .milliseconds(5)) {
            look()
            return FS.lstat(r.sandbox.mirror / "big.bin")?.size == size
        }
        #expect(arrived, "big.bin never arrived after the cut\n\(agent.stderrText)")
        #expect(r.sshd.acceptedLogins > logins, "no new login after the cut: \(r.sshd.acceptedLogins) logins, \(logins) before it")
        try await r.expectConverges(agent, "after the cut")
        look()
        #expect(torn.isEmpty, "a final name on the remote held what is no complete version of the source file: \(torn.prefix(5))")
        let swept = await eventually(timeout: .seconds(30)) { temporaries().isEmpty }
        #expect(swept, "rsync's temp file stayed: \(temporaries().map { ByteEscaping.escape($0) })")
        print("RemoteMirrorEndToEndTests: connection cut with \(cutAtSize >> 20) of \(size >> 20) MiB in rsync's temp file "
              + "(sshd \(sessionPid), \(rsyncs.count) remote rsyncs ended on their own, their temp file gone, "
              + "\(loginsWhenEnded - logins) new logins by then); "
              + "\(looks) looks at the remote, no torn file; \(r.sshd.acceptedLogins - logins) new logins, converged")
        try await RunCommandTests.stop(agent, r.sandbox)
    }

    /// Regular files at non-temp names below `mirror` that are not a complete copy of the
    /// file at the same path in `source` (by size; by bytes up to 1 MiB): one line each.
    /// rsync's (`.NAME.XXXXXX`) and keepsync's temp names are skipped; links not followed.
    static func tornFiles(in mirror: [UInt8], against source: [UInt8], below relative: [UInt8] = []) -> [String] {
        var found: [String] = []
        for name in (try? FS.list(relative.isEmpty ? mirror : mirror / relative)) ?? [] {
            let path = relative.isEmpty ? name : relative / name
            guard let info = FS.lstat(mirror / path) else { continue }
            if info.kind == .directory {
                found += tornFiles(in: mirror, against: source, below: path)
                continue
            }
            guard info.kind == .regular, !RemoteMirror.isRsyncTemporary(name), !TemporaryName.matches(name) else { continue }
            guard let original = FS.lstat(source / path), original.kind == .regular else {
                found.append("\(ByteEscaping.escape(path)): \(info.size) bytes, no such file in the source")
                continue
            }
            if info.size != original.size {
                found.append("\(ByteEscaping.escape(path)): \(info.size) bytes of \(original.size)")
            } else if info.size <= 1 << 20, let a = try? FS.readFile(mirror / path), let b = try? FS.readFile(source / path), a != b {
                found.append("\(ByteEscaping.escape(path)): other bytes than the source's")
            }
        }
        return found
    }
}
