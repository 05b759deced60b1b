import Dispatch
import Glibc
import KeepSyncCore
import Synchronization

/// One persistent, multiplexed ssh connection to a remote mirror's host for the life of
/// the value (`ControlMaster`, its socket in a private directory), reopened when it
/// drops. Runs fixed remote scripts with their data on stdin through one remote shell
/// started once per connection (`RemoteShell`: the login shell's start is paid once, not
/// per command), under a deadline that ends it; rsync runs go over the same master
/// (`rsyncShell`), one started ahead when asked (`keepRsyncWarm`). Safe on any thread.
public final class RemoteSession: Sendable {
    /// Timeouts and keep-alives.
    public struct Timing: Sendable {
        /// ssh's `ConnectTimeout`, seconds: how long a new connection may take.
        public var connectSeconds: Int
        /// `ServerAliveInterval` seconds and `ServerAliveCountMax`: a master over a dead
        /// link ends after about their product.
        public var aliveInterval: Int
        /// See `aliveInterval`.
        public var aliveCount: Int
        /// The deadline of one remote command; the client is killed past it.
        public var command: Duration
        /// How long a warm rsync waits before it is renewed (at most half the rsync's own
        /// `--timeout`).
        public var warm: Duration
        /// How long after the last rsync run or remote command warm ones are renewed.
        public var warmWhileIdle: Duration

        /// Timings.
        public init(connectSeconds: Int = 10, aliveInterval: Int = 5, aliveCount: Int = 3, command: Duration = .seconds(60),
                    warm: Duration = .seconds(30), warmWhileIdle: Duration = .seconds(86_400)) {
            self.connectSeconds = connectSeconds
            self.aliveInterval = aliveInterval
            self.aliveCount = aliveCount
            self.command = command
            self.warm = warm
            self.warmWhileIdle = warmWhileIdle
        }
    }

    /// The host, for messages.
    public let host: String
    /// ssh's destination, `[user@]host`.
    public let destination: String
    /// The rsync program on the remote (`--rsync-path`).
    public let rsyncPath: [UInt8]
    /// The timings.
    public let timing: Timing
    /// The private directory holding the control socket.
    public let controlDirectory: [UInt8]
    /// ssh's argv up to (without) the destination: the user's words with our options
    /// right after the program (ssh takes an option's first value).
    public let sshArguments: [[UInt8]]

    struct State {
        var masterOpen = false
        var masterPid: pid_t?
        var connections = 0
        var commands = 0
        var rsyncRuns = 0
        var rsync: RemoteRsyncVersion?
        var closed = false
        /// `keepRsyncWarm` was called.
        var warm = false
        /// The warm rsync, when one waits.
        var standby: Standby?
        var standbys = 0
        var warmRuns = 0
        var endedIdle = 0
        /// The warm rsync's argv for the remote rsync's version (`keepRsyncWarm`).
        var warmArgv: (@Sendable (RemoteRsyncVersion) -> [[UInt8]]?)?
        /// Remote shells started, and the pid of the one running.
        var shells = 0
        var shellPid: pid_t?
        /// The shell the master was opened with, until a command takes it.
        var opened: RemoteShell?
        /// Masters opened so far: a failure closes the master it met, not a newer one.
        var generation = 0
        /// rsync runs under way (each an ssh session; commands go to the one shell).
        var sessions = 0
        var lastRun: ContinuousClock.Instant?

        /// The warm rsync, taken away (the caller ends or uses it).
        mutating func takeStandby() -> Standby? {
            defer { standby = nil }
            return standby
        }
    }

    /// An rsync spawned ahead for the next run of `argv`, waiting for its list on stdin.
    struct Standby: Sendable {
        var argv: [[UInt8]]
        var child: CapturedChild
        var number: Int
    }
    let state = Mutex(State())
    /// The remote shell; held while a command runs (commands take turns).
    private let shell = Mutex<RemoteShell?>(nil)
    /// Serializes opening and closing the master.
    private let opening = Mutex(())
    /// Where warm rsyncs' renewals fire: a queue of its own (a thread when it needs one),
    /// not the global pool, which busy work can keep full past a renewal's time.
    let renewals = DispatchQueue(label: "keepsync.remote.renewals")

    /// A session to `destination` through `ssh` (the user's ssh words, e.g. `["ssh", "-p",
    /// "2222"]`). Connects lazily, on the first call.
    public init(ssh: [[UInt8]], destination: String, host: String, rsyncPath: [UInt8] = Array("rsync".utf8),
                timing: Timing = Timing()) throws {
        self.host = host
        self.destination = destination
        self.rsyncPath = rsyncPath
        self.timing = timing
        do throws(Errno) { controlDirectory = try Sys.makeTemporaryDirectory(Array("/tmp/keepsync-ssh-".utf8)) } catch {
            throw KeepSyncError(.io, "mkdtemp for the ssh control socket: \(error.text)")
        }
        let words = ssh.isEmpty ? [Array("ssh".utf8)] : ssh
        let ours = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=\(timing.connectSeconds)",
                    "-o", "ServerAliveInterval=\(timing.aliveInterval)", "-o", "ServerAliveCountMax=\(timing.aliveCount)",
                    "-o", "ControlMaster=auto", "-o", "ControlPersist=yes"].map { Array($0.utf8) }
            + [Array("-o".utf8), Array("ControlPath=".utf8) + controlDirectory + Array("/cm-%C".utf8)]
        sshArguments = [words[0]] + ours + words.dropFirst()
    }

    /// A session for a remote mirror's settings.
    public convenience init(settings: Settings, timing: Timing = Timing()) throws {
        guard let remote = settings.remote else { throw KeepSyncError(.configuration, "not a remote mirror") }
        try self.init(ssh: settings.sshCommand, destination: remote.destination, host: remote.host,
                      rsyncPath: settings.rsyncPath, timing: timing)
    }

    deinit { close() }

    // MARK: Counters

    /// Connections (ssh masters) this session opened.
    public var connectionsOpened: Int { state.withLock { $0.connections } }
    /// Remote commands run (the master's opening not counted).
    public var commandsRun: Int { state.withLock { $0.commands } }
    /// Remote shells started (one per connection, again after one ended).
    public var shellsStarted: Int { state.withLock { $0.shells } }
    /// rsync runs started.
    public var rsyncRuns: Int { state.withLock { $0.rsyncRuns } }
    /// rsync runs that went to a warm rsync (`keepRsyncWarm`).
    public var warmRsyncRuns: Int { state.withLock { $0.warmRuns } }
    /// The warm rsync's pid, while one waits.
    var warmRsyncPid: pid_t? { state.withLock { $0.standby?.child.pid } }

    // MARK: Commands

    /// Runs `script` (a POSIX sh command line) in the connection's remote shell with
    /// `input` on its stdin; the output whatever its exit status. Commands take turns in
    /// that one shell, which is started when none runs. Throws `RemoteFailure` when the
    /// host is unreachable (our deadline included: the shell is ended and the master
    /// closed), refuses the login, or the shell ended before it answered.
    public func run(_ script: [UInt8], input: [UInt8] = [], timeout: Duration? = nil) throws(RemoteFailure) -> RemoteOutput {
        try ensureMaster()
        state.withLock { $0.commands += 1 }
        let deadline = timeout ?? timing.command
        let (outcome, generation) = try shell.withLock { shell throws(RemoteFailure) -> (RemoteShell.Outcome, Int) in
            // The shell a newer master was opened with replaces the one held.
            if let opened = state.withLock({ s in defer { s.opened = nil }; return s.opened }) {
                shell?.end()
                shell = opened
            }
            if let running = shell, !running.isAlive {
                state.withLock { s in if s.shellPid == running.pid { s.shellPid = nil } }
                running.end()
                shell = nil
            }
            if shell == nil { shell = try startShell(master: false) }
            let generation = state.withLock { $0.generation }
            let outcome = shell!.exchange(script, input: input, timeout: deadline)
            if case .answered = outcome { return (outcome, generation) }
            state.withLock { s in if s.shellPid == shell!.pid { s.shellPid = nil } }
            shell!.end()
            shell = nil
            return (outcome, generation)
        }
        switch outcome {
        case .answered(let output):
            refillAfterCommand()
            return output
        case .timedOut:
            closeMaster(generation)
            throw RemoteFailure(.unreachable, host: host, "no answer within \(deadline)")
        case .ended(let status, let stderr):
            let failure = endedShellFailure(status, stderr)
            if failure.kind != .remoteCommand { closeMaster(generation) }
            throw failure
        }
    }

    /// Starts the remote shell and waits for its first answer, which also takes whatever
    /// the login shell printed on its way. `master`: its ssh opens the connection and
    /// leaves the master behind (`ControlPersist`), so that the master's opening and the
    /// shell cost one login; else it never becomes a master itself. On failure the master
    /// is ended when the connection is at fault (only killed when it was this call's).
    private func startShell(master: Bool) throws(RemoteFailure) -> RemoteShell {
        let words = master ? sshArguments : sshArguments.map {
            $0 == Array("ControlMaster=auto".utf8) ? Array("ControlMaster=no".utf8) : $0
        }
        let argv = words + [Array("--".utf8), Array(destination.utf8), RemoteShell.command]
        let started: RemoteShell
        do throws(Errno) { started = try RemoteShell(argv) } catch {
            throw RemoteFailure(.remoteCommand, host: host, "cannot run \(String(decoding: argv[0], as: UTF8.self)): \(error.text)")
        }
        state.withLock { s in
            s.shells += 1
            s.shellPid = started.pid
        }
        let limit = Duration.seconds(Int64(timing.connectSeconds) + 15)
        let outcome = started.exchange(Array("exit 0".utf8), input: [], timeout: limit)
        if case .answered(let output) = outcome, output.status == 0 { return started }
        started.end()
        state.withLock { $0.shellPid = nil }
        let failure: RemoteFailure
        switch outcome {
        case .answered(let output): failure = RemoteFailure(.remoteCommand, host: host, "the remote shell did not start: exit \(output.status)")
        case .timedOut: failure = RemoteFailure(.unreachable, host: host, "no answer within \(limit)")
        case .ended(let status, let stderr): failure = endedShellFailure(status, stderr)
        }
        if master {
            killMaster(nil)
        } else if failure.kind != .remoteCommand {
            closeMaster(state.withLock { $0.generation })
        }
        throw failure
    }

    /// What a shell's end says: ssh's words, or its status.
    private func endedShellFailure(_ status: Int32, _ stderr: [UInt8]) -> RemoteFailure {
        let failure = classify(stderr)
        if failure.kind != .remoteCommand { return failure }
        // The loop never exits 255 itself: that is ssh's own failure, the connection's; a
        // signal is ours (`closeMaster` on trouble elsewhere) or the host's.
        if status >= 128 { return RemoteFailure(.unreachable, host: host, stderr.isEmpty ? "the connection ended" : failure.message) }
        return RemoteFailure(.remoteCommand, host: host, "the remote shell ended (exit \(status)): \(failure.message)")
    }

    /// `run`, throwing `.remoteCommand` with its stderr unless it exits 0.
    public func check(_ script: [UInt8], input: [UInt8] = [], timeout: Duration? = nil) throws(RemoteFailure) -> RemoteOutput {
        let output = try run(script, input: input, timeout: timeout)
        guard output.status == 0 else {
            throw RemoteFailure(.remoteCommand, host: host,
                                "exit \(output.status): \(String(decoding: output.stderr, as: UTF8.self).trimmingNewlines)")
        }
        return output
    }

    /// The remote rsync's version, asked once (`RSYNC --version`).
    public func rsyncVersion() throws(RemoteFailure) -> RemoteRsyncVersion {
        if let known = state.withLock({ $0.rsync }) { return known }
        let output = try check(rsyncPath + Array(" --version".utf8))
        let first = String(decoding: output.stdout.prefix { $0 != 0x0A }, as: UTF8.self)
        let version = RemoteRsyncVersion(line: first)
        state.withLock { $0.rsync = version }
        return version
    }

    /// The ssh command as rsync's `-e` takes it: every word double-quoted (rsync splits
    /// it again, `\` escaping inside double quotes), the control options included.
    public var rsyncShell: [UInt8] { Self.shellWords(sshArguments) }

    /// `words` as rsync's `-e` takes them.
    static func shellWords(_ words: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        for word in words {
            if !out.isEmpty { out.append(0x20) }
            // rsync's own rule (do_cmd): inside quotes a doubled quote is one; no backslashes.
            out.append(0x22)
            for b in word {
                if b == 0x22 { out.append(0x22) }
                out.append(b)
            }
            out.append(0x22)
        }
        return out
    }

    /// Runs local rsync (`argv`, `argv[0]` the program) after making sure the master is
    /// up, `input` on its stdin; its exit status is for the caller, except that an ssh
    /// failure (unreachable, authentication) or our deadline throws.
    /// A warm rsync of the same argv (`keepRsyncWarm`) takes the run when `input` fits its
    /// pipe; once it took the list, its outcome is the run's.
    public func runRsync(_ argv: [[UInt8]], input: [UInt8], timeout: Duration) throws(RemoteFailure) -> RemoteOutput {
        try ensureMaster()
        let (standby, generation) = state.withLock { s -> (Standby?, Int) in
            s.rsyncRuns += 1
            s.sessions += 1
            return (s.takeStandby(), s.generation)
        }
        var warm: CapturedRun?
        if let standby {
            // One whose ssh ended while it waited (a dropped master, a killed remote side)
            // cannot take the list (nothing of it would arrive): the run goes to a fresh rsync.
            if standby.argv == argv, ContinuousClock.now - standby.child.spawned < warmAge(argv),
               standby.child.childrenAlive, standby.child.send(input) {
                warm = standby.child.collect(timeout: timeout)
            } else {
                standby.child.abandon()
            }
        }
        let result: CapturedRun
        if let warm {
            result = warm
        } else {
            do throws(RemoteFailure) { result = try spawn(argv, input: input, timeout: timeout) } catch {
                state.withLock { $0.sessions -= 1 }
                throw error
            }
        }
        let refill = state.withLock { s -> Bool in
            s.sessions -= 1
            s.lastRun = .now
            if warm != nil { s.warmRuns += 1 }
            return s.warm && s.sessions < Self.warmBeside && s.standby == nil && !s.closed && result.status == 0
        }
        if refill { spawnStandby(argv) }
        if result.timedOut {
            closeMaster(generation)
            throw RemoteFailure(.unreachable, host: host, "rsync: no progress within \(timeout)")
        }
        if result.status == 255 || result.status == 12 || result.status == 35 || result.status == 30 {
            let failure = classify(result.stderr)
            if failure.kind != .remoteCommand {
                closeMaster(generation)
                throw failure
            }
        }
        return RemoteOutput(status: result.status, stdout: result.stdout, stderr: result.stderr, elapsed: result.elapsed,
                            warm: warm != nil)
    }

    // MARK: The master

    /// Opens the master unless one is up: the connection's remote shell is started with
    /// ControlMaster=auto and ControlPersist=yes (the master stays in the background, the
    /// shell runs as its first session, kept for the next command), then `-O check` gives
    /// the master's pid.
    private func ensureMaster() throws(RemoteFailure) {
        let (open, closed) = state.withLock { ($0.masterOpen, $0.closed) }
        // After close, no call may start a master that nobody would end.
        if closed { throw RemoteFailure(.remoteCommand, host: host, "the session is closed") }
        if open { return }
        try opening.withLock { _ throws(RemoteFailure) in
            if state.withLock({ $0.masterOpen || $0.closed }) { return }
            state.withLock { $0.connections += 1 }
            let first = try startShell(master: true)
            if state.withLock({ $0.closed }) {
                first.end()
                killMaster(nil)
                throw RemoteFailure(.remoteCommand, host: host, "the session is closed")
            }
            let checked = try? spawn(sshArguments + [Array("-O".utf8), Array("check".utf8), Array(destination.utf8)],
                                     input: [], timeout: .seconds(10))
            let pid = checked.flatMap { Self.masterPid(String(decoding: $0.stderr, as: UTF8.self)) }
            let stale = state.withLock { s -> RemoteShell? in
                s.masterOpen = true
                s.masterPid = pid
                s.generation += 1
                defer { s.opened = first }
                return s.opened
            }
            stale?.end()
        }
    }

    /// `Master running (pid=1234)` -> 1234.
    static func masterPid(_ text: String) -> pid_t? {
        let bytes = Array(text.utf8), key = Array("pid=".utf8)
        guard bytes.count > key.count,
              let at = (0...(bytes.count - key.count)).first(where: { bytes[$0..<($0 + key.count)].elementsEqual(key) }) else { return nil }
        return pid_t(String(decoding: bytes[(at + key.count)...].prefix { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
    }

    /// Ends the master (a hung or dropped one) so that the next call opens a new one:
    /// `ssh -O exit`, then SIGTERM to its pid, and the socket removed.
    public func closeMaster() { closeMaster(nil) }

    /// `closeMaster`, unless `generation` is given and a newer master is up: a failure met
    /// on an old one (a command killed with it) leaves the new one alone.
    private func closeMaster(_ generation: Int?) {
        opening.withLock { _ in
            if let generation, state.withLock({ $0.generation != generation }) { return }
            let (pid, standby) = state.withLock { s -> (pid_t?, Standby?) in
                s.masterOpen = false
                defer { s.masterPid = nil }
                return (s.masterPid, s.takeStandby())
            }
            standby?.child.abandon()
            endShell()
            killMaster(pid)
        }
    }

    /// Kills the remote shell's ssh (a command under way then fails; its caller reaps it).
    private func endShell() {
        if let pid = state.withLock({ s in defer { s.shellPid = nil }; return s.shellPid }), pid > 1 { kill(-pid, SIGKILL) }
    }

    private func killMaster(_ pid: pid_t?) {
        _ = try? spawn(sshArguments + [Array("-O".utf8), Array("exit".utf8), Array(destination.utf8)], input: [],
                       timeout: .seconds(5))
        if let pid, pid > 1 { Sys.send(SIGTERM, to: pid) }
        // A socket left behind would be tried (and fail) by the next ssh.
        for name in (try? Sys.readDirectoryPath(controlDirectory)) ?? [] where name.starts(with: Array("cm-".utf8)) {
            try? Sys.unlink(.currentDirectory, controlDirectory + [0x2F] + name, directory: false)
        }
    }

    /// Closes the master and removes the private directory. Idempotent.
    public func close() {
        let first = state.withLock { s in
            defer { s.closed = true }
            return !s.closed
        }
        guard first else { return }
        opening.withLock { _ in
            state.withLock { $0.takeStandby() }?.child.abandon()
            state.withLock { s in defer { s.opened = nil }; return s.opened }?.end()
            endShell()
            let pid = state.withLock { $0.masterPid }
            killMaster(pid)
            state.withLock { $0.masterOpen = false }
        }
        try? Sys.unlink(.currentDirectory, controlDirectory, directory: true)
    }

    // MARK: Helpers

    private func spawn(_ argv: [[UInt8]], input: [UInt8], timeout: Duration) throws(RemoteFailure) -> CapturedRun {
        do throws(Errno) { return try Sys.runCaptured(argv, input: input, timeout: timeout) } catch {
            throw RemoteFailure(.remoteCommand, host: host, "cannot run \(String(decoding: argv[0], as: UTF8.self)): \(error.text)")
        }
    }

    /// ssh's words on stderr -> the kind: `Permission denied` is authentication; a command
    /// or file not found (outside ssh's warnings) is the remote command's; refused, timed
    /// out, no route, a name that does not resolve, a closed or reset connection are
    /// unreachable; anything else is the remote command's.
    public func classify(_ stderr: [UInt8]) -> RemoteFailure {
        let text = String(decoding: stderr, as: UTF8.self).trimmingNewlines
        if text.contains("Permission denied") || text.contains("Too many authentication failures")
            || text.contains("Host key verification failed") {
            // ssh's last line says it (`user@host: Permission denied (publickey).`).
            let last = text.split(whereSeparator: \.isNewline).last.map(String.init) ?? text
            return RemoteFailure(.authentication, host: host, last)
        }
        // ssh's own warnings (`Warning: Identity file … not accessible: No such file or
        // directory`) say nothing of the remote command.
        let said = text.split(whereSeparator: \.isNewline).filter { !$0.hasPrefix("Warning: ") }
        if said.contains(where: { $0.contains("command not found") || $0.contains("No such file or directory") }) {
            return RemoteFailure(.remoteCommand, host: host, text)
        }
        let unreachable = ["Connection refused", "timed out", "No route to host", "Network is unreachable",
                           "Could not resolve hostname", "Connection closed", "Connection reset", "Broken pipe",
                           "Name or service not known", "Temporary failure in name resolution",
                           "connection unexpectedly closed", "kex_exchange_identification", "Timeout, server"]
        if unreachable.contains(where: text.contains) { return RemoteFailure(.unreachable, host: host, text) }
        return RemoteFailure(.remoteCommand, host: host, text.isEmpty ? "failed without a message" : text)
    }
}

extension String {
    /// Without trailing line breaks and carriage returns.
    var trimmingNewlines: String {
        var s = Substring(self)
        while let last = s.last, last.isNewline { s = s.dropLast() }
        return String(s)
    }
}
