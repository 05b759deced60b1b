import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// The loopback sshd the remote-mirror tests (issue 18) stand on: a real OpenSSH server on
/// 127.0.0.1, one per test, and what the remote mirror will ask of it: ssh sessions, rsync
/// over ssh, names as bytes, a remote that hangs (SIGSTOP) and comes back, one multiplexed
/// connection. Skipped, with the reason printed, where OpenSSH or rsync is not installed.
@Suite("Loopback sshd")
struct LoopbackSSHDTests {
    typealias LiveFS = LiveMirrorTests.LiveFS

    /// A started sshd, or the test cancelled (skipped) with the reason printed.
    static func startOrSkip(_ test: String) throws -> LoopbackSSHD {
        do {
            return try LoopbackSSHD.start()
        } catch let missing as LoopbackSSHD.Unavailable {
            print("LoopbackSSHDTests: \(test) skipped: \(missing)")
            try Test.cancel("\(missing)")
        }
    }

    /// The OpenSSH programs, or the test cancelled (skipped) with the reason printed.
    static func toolsOrSkip(_ test: String) throws -> LoopbackSSHD.Tools {
        do {
            return try LoopbackSSHD.Tools.locate()
        } catch {
            print("LoopbackSSHDTests: \(test) skipped: \(error)")
            try Test.cancel("\(error)")
        }
    }

    /// rsync's path, or the test cancelled (skipped) with the reason printed.
    static func rsyncOrSkip(_ test: String) throws -> String {
        guard let rsync = ChildSpawning.locate("rsync") else {
            print("LoopbackSSHDTests: \(test) skipped: rsync is not installed (apt-get install rsync; .ci/run installs it)")
            try Test.cancel("rsync is not installed (apt-get install rsync; .ci/run installs it)")
        }
        return rsync
    }

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// A started sshd, rsync's path and two scratch directories (the local source, the
    /// remote side) for `body`; after it sshd is stopped and both are removed. Skipped as
    /// `startOrSkip` and `rsyncOrSkip` say.
    static func withRsyncOverSSH(_ test: String,
                                 _ body: (_ sshd: LoopbackSSHD, _ rsync: String, _ source: [UInt8], _ remote: [UInt8]) throws -> Void) throws {
        let sshd = try startOrSkip(test)
        defer { sshd.stop() }
        let rsync = try rsyncOrSkip(test)
        let source = try ScratchDirectory.make(prefix: "keepsync-sshd-source")
        defer { try? ScratchDirectory.removeTree(source) }
        let remote = try ScratchDirectory.make(prefix: "keepsync-sshd-remote")
        defer { try? ScratchDirectory.removeTree(remote) }
        try body(sshd, rsync, source, remote)
    }

    /// rsync's last two arguments: the contents of `source`, into `remote` on `sshd`'s host.
    static func rsyncEnds(_ sshd: LoopbackSSHD, _ source: [UInt8], _ remote: [UInt8]) -> [[UInt8]] {
        [source + bytes("/"), bytes(sshd.host + ":") + remote + bytes("/")]
    }

    // MARK: Cases

    @Test("ssh … true succeeds; the session runs as the current user; one login per session")
    func sessionsRun() async throws {
        try await offThePool {
            let sshd = try Self.startOrSkip("sessionsRun")
            defer { sshd.stop() }
            let ran = try sshd.ssh("true")
            #expect(ran.succeeded, "\(ran)")
            let who = try sshd.ssh("id -un")
            #expect(who.succeeded && who.stdoutText == sshd.user + "\n", "\(who)")
            let failing = try sshd.ssh("exit 7")
            #expect(failing.status == 7, "the remote command's status comes back: \(failing)")
            #expect(sshd.acceptedLogins == sshd.sessionsRun, "\(sshd.log)")
            print("LoopbackSSHDTests: sessions: \(sshd.sessionsRun) ssh sessions (readiness probe included), "
                  + "\(sshd.acceptedLogins) logins accepted, as \(sshd.user) on port \(sshd.port)")
        }
    }

    @Test("the versions found: ssh, sshd, rsync, and whether rsync has --fsync (3.2.4 and later)")
    func versions() async throws {
        try await offThePool {
            let tools = try Self.toolsOrSkip("versions")
            let rsync = try Self.rsyncOrSkip("versions")
            func firstLine(_ outcome: ChildOutcome, containing word: String) -> String {
                String((outcome.stdoutText + outcome.stderrText).split(whereSeparator: \.isNewline).first { $0.contains(word) } ?? "")
            }
            // Older sshd has no -V but names its version in the usage it prints.
            let ssh = firstLine(try ChildSpawning.run([tools.ssh, "-V"]), containing: "OpenSSH")
            let sshd = firstLine(try ChildSpawning.run([tools.sshd, "-V"]), containing: "OpenSSH")
            let package = try ChildSpawning.locate("dpkg-query").map {
                try ChildSpawning.run([$0, "-W", "-f", "${Version}", "openssh-server"]).stdoutText
            } ?? "no dpkg"
            let rsyncVersion = firstLine(try ChildSpawning.run([rsync, "--version"]), containing: "version")
            let fsync = try ChildSpawning.run([rsync, "--help"]).stdoutText.contains("--fsync")
            #expect(ssh.hasPrefix("OpenSSH") && sshd.hasPrefix("OpenSSH") && rsyncVersion.hasPrefix("rsync"))
            print("LoopbackSSHDTests: versions: 5 asked: ssh \"\(ssh)\", sshd \"\(sshd)\" (openssh-server \(package)), rsync \"\(rsyncVersion)\", rsync --fsync: \(fsync ? "yes" : "no")")
        }
    }

    @Test("rsync -a -e SSH copies a tree to 127.0.0.1:DIR/, byte for byte")
    func rsyncCopiesOverSSH() async throws {
        try await offThePool {
            try Self.withRsyncOverSSH("rsyncCopiesOverSSH") { sshd, rsync, source, remote in
                var random = SplitMix64(seed: 18)
                let files: [(String, [UInt8])] = [("small", Self.bytes("hello over ssh\n")), ("sub/large", random.bytes(3 << 20 + 17)),
                                                  ("sub/empty", [])]
                try LiveFS.mkdir(source + Self.bytes("/sub"), mode: 0o755)
                for (name, content) in files { try LiveFS.writeFile(source + Self.bytes("/" + name), content) }

                let logins = sshd.acceptedLogins
                let copy = try ChildSpawning.run([rsync, "-a", "-e", sshd.sshCommand].map(Self.bytes) + Self.rsyncEnds(sshd, source, remote),
                                                 timeout: .seconds(120))
                #expect(copy.succeeded, "\(copy)\nsshd's log:\n\(sshd.log)")
                var arrived = 0
                for (name, content) in files {
                    let got = try? LiveFS.readFile(remote + Self.bytes("/" + name))
                    #expect(got.map { LiveFS.sameBytes($0, content) } == true, "\(name): \(got?.count ?? -1) bytes, not \(content.count)")
                    if got.map({ LiveFS.sameBytes($0, content) }) == true { arrived += 1 }
                }
                #expect(sshd.acceptedLogins == logins + 1, "one ssh login for the rsync run")
                print("LoopbackSSHDTests: rsync: 1 rsync run, \(arrived) of \(files.count) files (\(files.map(\.1.count).reduce(0, +)) bytes) "
                      + "arrived byte for byte in \(copy.elapsed), \(sshd.acceptedLogins - logins) ssh login")
            }
        }
    }

    @Test("a name with a newline and non-UTF-8 bytes survives rsync --from0 --files-from=- and a find -print0 listing over ssh")
    func namesAreBytes() async throws {
        try await offThePool {
            try Self.withRsyncOverSSH("namesAreBytes") { sshd, rsync, source, remote in
                let names: [[UInt8]] = [Self.bytes("new\nline"), Self.bytes("latin1-caf") + [0xE9], [0xFF, 0xFE, 0x0A, 0x2D, 0x20, 0x5C],
                                        Self.bytes(" leading space and trailing\n")]
                for (i, name) in names.enumerated() { try LiveFS.writeFile(source + [0x2F] + name, Self.bytes("file \(i)\n")) }
                try LiveFS.writeFile(source + Self.bytes("/not-listed"), Self.bytes("stays home\n"))

                let list: [UInt8] = names.flatMap { $0 + [UInt8(0)] }
                let copy = try ChildSpawning.run([rsync, "-a", "--from0", "--files-from=-", "-e", sshd.sshCommand].map(Self.bytes)
                                                 + Self.rsyncEnds(sshd, source, remote), input: list, timeout: .seconds(120))
                #expect(copy.succeeded, "\(copy)")
                let arrived = try LiveFS.list(remote)
                #expect(Set(arrived) == Set(names), "arrived: \(arrived.map(ByteEscaping.escape))")
                for (i, name) in names.enumerated() {
                    #expect((try? LiveFS.readFile(remote + [0x2F] + name)) == Self.bytes("file \(i)\n"), "\(ByteEscaping.escape(name))")
                }

                // The way back: a remote listing, NUL-separated, through ssh's stdout.
                let listing = try sshd.ssh("cd '\(String(decoding: remote, as: UTF8.self))' && find . -mindepth 1 -printf '%P\\0'")
                #expect(listing.succeeded, "\(listing)")
                let listed = listing.stdout.split(separator: 0, omittingEmptySubsequences: true).map(Array.init)
                #expect(Set(listed) == Set(names), "listed: \(listed.map(ByteEscaping.escape))")
                print("LoopbackSSHDTests: names: \(names.count) hostile names sent by 1 rsync --from0 run (\(arrived.count) arrived, "
                      + "the unlisted file stayed home), \(listed.count) listed back by 1 ssh find -print0")
            }
        }
    }

    @Test("paused (SIGSTOP), ssh -o ConnectTimeout=2 fails within a deadline and a command over an open master stalls; resumed, both work again")
    func pausedRemoteHangsThenRecovers() async throws {
        try await offThePool {
            let sshd = try Self.startOrSkip("pausedRemoteHangsThenRecovers")
            defer { sshd.stop() }
            let master = try sshd.ssh("true", options: sshd.multiplexingOptions)
            #expect(master.succeeded, "\(master)")
            try sshd.pause()
            let stopped = sshd.processes
            #expect(stopped.count >= 2 && stopped.allSatisfy { $0.state == UInt8(ascii: "T") }, "\(stopped)")

            let unanswered = try sshd.ssh("true", options: ["-o", "ConnectTimeout=2"], timeout: .seconds(30))
            // The kernel accepts the connection; the stopped sshd never sends its banner.
            #expect(!unanswered.timedOut && unanswered.status == 255 && unanswered.stderrText.contains("timed out"), "\(unanswered)")
            #expect(unanswered.elapsed < .seconds(15), "ConnectTimeout=2 took \(unanswered.elapsed)")
            // The remote mirror keeps one connection: ConnectTimeout does not cover a command
            // over it, only its own timeouts do (here the 3 s deadline kills the client).
            let stalled = try sshd.ssh("true", options: sshd.multiplexingOptions, timeout: .seconds(3))
            #expect(stalled.timedOut, "a command over the paused connection returned: \(stalled)")

            sshd.resume()
            let again = try sshd.ssh("true", options: ["-o", "ConnectTimeout=10"])
            #expect(again.succeeded, "\(again)\nsshd's log:\n\(sshd.log)")
            let overMaster = try sshd.ssh("true", options: sshd.multiplexingOptions)
            #expect(overMaster.succeeded, "\(overMaster)")
            _ = try sshd.control("exit")
            print("LoopbackSSHDTests: pause: \(stopped.count) sshd processes stopped; \(sshd.sessionsRun) ssh sessions: "
                  + "a new one failed in \(unanswered.elapsed) (exit \(unanswered.status)), one over the open master stalled \(stalled.elapsed) "
                  + "until killed; after resume a new one took \(again.elapsed), one over the master \(overMaster.elapsed)")
        }
    }

    @Test("multiplexing: a second ssh and an rsync reuse the master (ssh -O check, one login, the same server process)")
    func multiplexedConnectionIsReused() async throws {
        try await offThePool {
            try Self.withRsyncOverSSH("multiplexedConnectionIsReused") { sshd, rsync, source, remote in
                try LiveFS.writeFile(source + Self.bytes("/f"), Self.bytes("through the master\n"))
                let logins = sshd.acceptedLogins

                let first = try sshd.ssh("echo $PPID", options: sshd.multiplexingOptions)
                #expect(first.succeeded, "\(first)")
                let check = try sshd.control("check")
                #expect(check.succeeded && check.stderrText.hasPrefix("Master running"), "\(check)")
                let second = try sshd.ssh("echo $PPID", options: sshd.multiplexingOptions)
                #expect(second.succeeded && second.stdout == first.stdout, "the same server process serves both: \(first.stdoutText) vs \(second.stdoutText)")
                let command = sshd.sshCommand(adding: sshd.multiplexingOptions)
                let copy = try ChildSpawning.run([rsync, "-a", "-e", command].map(Self.bytes) + Self.rsyncEnds(sshd, source, remote),
                                                 timeout: .seconds(60))
                #expect(copy.succeeded, "\(copy)")
                #expect((try? LiveFS.readFile(remote + Self.bytes("/f"))) == Self.bytes("through the master\n"))
                #expect(sshd.acceptedLogins == logins + 1, "one login for 2 sessions and an rsync:\n\(sshd.log)")

                let exit = try sshd.control("exit")
                #expect(exit.succeeded, "\(exit)")
                let gone = eventuallyBlocking(timeout: .seconds(10)) { (try? sshd.control("check"))?.succeeded == false }
                #expect(gone, "the master still answers after -O exit")
                print("LoopbackSSHDTests: multiplexing: 2 ssh sessions and 1 rsync over 1 master, "
                      + "\(sshd.acceptedLogins - logins) login, served by server pid \(first.stdoutText.filter(\.isNumber))")
            }
        }
    }

    @Test("stop kills sshd and its sessions, frees the port and removes its directory")
    func stopLeavesNothing() async throws {
        try await offThePool {
            let sshd = try Self.startOrSkip("stopLeavesNothing")
            let master = try sshd.ssh("true", options: sshd.multiplexingOptions)
            #expect(master.succeeded, "\(master)")
            let before = sshd.processes
            #expect(before.count >= 2, "sshd and the master's session: \(before)")
            sshd.stop()
            let gone = before.allSatisfy { p in ProcessTree.entry(p.pid).map { $0.state == UInt8(ascii: "Z") } ?? true }
            #expect(gone, "\(before.compactMap { ProcessTree.entry($0.pid) })")
            #expect(LiveFS.lstat(Self.bytes(sshd.directory)) == nil)
            let refused = try ChildSpawning.run(sshd.sshArguments + ["-o", "ConnectTimeout=5", sshd.destination, "true"], timeout: .seconds(30))
            #expect(refused.status == 255 && refused.stderrText.contains("refused"), "\(refused)")
            print("LoopbackSSHDTests: stop: \(before.count) processes killed, the port refuses, the directory is gone")
        }
    }

    @Test("without OpenSSH the harness says what is missing (the tests then skip with that reason)")
    func missingToolsAreReported() async throws {
        try await offThePool {
            let empty = try ScratchDirectory.make(prefix: "keepsync-sshd-empty")
            defer { try? ScratchDirectory.removeTree(empty) }
            var reason = ""
            do {
                _ = try LoopbackSSHD.Tools.locate(in: [String(decoding: empty, as: UTF8.self)])
            } catch {
                reason = "\(error)"
            }
            #expect(reason.contains("sshd (openssh-server)") && reason.contains("ssh (openssh-client)")
                    && reason.contains("ssh-keygen"), "\(reason)")
            print("LoopbackSSHDTests: missing tools: 3 reported missing: \(reason)")
        }
    }
}
