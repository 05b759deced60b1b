import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A real OpenSSH server on 127.0.0.1 for the remote-mirror tests: `sshd -D -e -f CONFIG`
/// on a free port, with a host key, a user key and `authorized_keys` made in a scratch
/// directory. It reads only its own config (nothing in /etc); as root it needs /run/sshd,
/// which `start` makes if missing. Stopped (with its sessions) by `stop` or on deinit.
public final class LoopbackSSHD: Sendable {
    /// The OpenSSH programs are not installed: tests say skipped, and why.
    public struct Unavailable: Error, CustomStringConvertible {
        /// What is missing and how to get it.
        public let description: String
    }

    /// sshd is installed but could not be started or reached: a real failure.
    public struct Failure: Error, CustomStringConvertible {
        /// What went wrong, with sshd's log.
        public let description: String
    }

    /// The OpenSSH programs, by absolute path.
    public struct Tools: Sendable {
        /// The server (sshd re-executes itself, so the path must be absolute).
        public let sshd: String
        /// The client.
        public let ssh: String
        /// The key generator.
        public let sshKeygen: String

        /// Finds them in `directories` (default: `$PATH` and the usual bin and sbin).
        public static func locate(in directories: [String]? = nil) throws(Unavailable) -> Tools {
            let found = ["sshd", "ssh", "ssh-keygen"].map { ChildSpawning.locate($0, in: directories) }
            let missing = zip(["sshd (openssh-server)", "ssh (openssh-client)", "ssh-keygen (openssh-client)"], found)
                .filter { $0.1 == nil }.map(\.0)
            guard let sshd = found[0], let ssh = found[1], let keygen = found[2] else {
                throw Unavailable(description: "not installed: \(missing.joined(separator: ", ")); "
                                  + "apt-get install openssh-server openssh-client (.ci/run installs them)")
            }
            return Tools(sshd: sshd, ssh: ssh, sshKeygen: keygen)
        }
    }

    /// Why a loopback sshd cannot run here (a program missing), nil when it can.
    public static var missingPrerequisite: String? {
        do { _ = try Tools.locate() } catch { return error.description }
        return nil
    }

    /// The host to connect to.
    public let host = "127.0.0.1"
    /// The port sshd listens on.
    public let port: UInt16
    /// The user logged in as (the current user; root on CI).
    public let user: String
    /// The scratch directory holding the keys, the config, the log and control sockets.
    public let directory: String
    /// The private key the client authenticates with.
    public let userKey: String
    /// sshd's pid (the listener; a new one after `restart`).
    public var pid: pid_t { state.withLock { $0.pid } }
    /// The programs used.
    public let tools: Tools
    /// `ssh` and its options, without the destination: argv as a remote mirror's
    /// `--ssh` would run it. `-F /dev/null` and `IdentitiesOnly`: no user or system
    /// ssh config, no agent keys.
    public let sshArguments: [String]

    /// `sshArguments` as the one string `--ssh`, `ssh_command` or `rsync -e` take.
    public var sshCommand: String { sshCommand(adding: []) }

    /// `sshCommand` with `options` appended (each quoted where needed).
    public func sshCommand(adding options: [String]) -> String {
        (sshArguments + options).map(Self.shellWord).joined(separator: " ")
    }
    /// `USER@HOST`.
    public var destination: String { "\(user)@\(host)" }
    /// Connection multiplexing: one master per destination, its socket in `directory`.
    public var multiplexingOptions: [String] {
        ["-o", "ControlMaster=auto", "-o", "ControlPath=\(directory)/cm-%C", "-o", "ControlPersist=60"]
    }

    private struct State {
        var pid: pid_t
        /// False between `shutDown` and `restart` (the pid is reaped and may be reused).
        var running = true
        var stopped = false
        var sessions = 0
    }
    private let state: Mutex<State>

    private init(tools: Tools, user: String, directory: String, port: UInt16, pid: pid_t) {
        self.tools = tools
        self.user = user
        self.directory = directory
        self.port = port
        state = Mutex(State(pid: pid))
        userKey = directory + "/user_ed25519"
        sshArguments = [tools.ssh, "-F", "/dev/null", "-p", String(port), "-i", userKey,
                        "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
                        "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]
    }

    deinit { stop() }

    // MARK: Starting

    /// Generates the keys, starts sshd on a free port (another on a collision) and waits
    /// until `ssh … true` succeeds, for at most `timeout`. Throws `Unavailable` when the
    /// programs are missing, `Failure` when sshd does not come up. With `shellStartup`,
    /// every bash that sshd starts (a session's login shell: for a command, rsync's server,
    /// a remote shell) first notes itself in `loginShells` and sleeps that long, as a
    /// `~/.bashrc` running pyenv or conda does (`BASH_ENV`; the user's login shell must be
    /// bash, else `Unavailable`).
    public static func start(timeout: Duration = .seconds(30), shellStartup: Duration? = nil) throws -> LoopbackSSHD {
        let tools = try Tools.locate()
        guard let passwd = getpwuid(geteuid()), let name = passwd.pointee.pw_name else {
            throw Failure(description: "uid \(geteuid()) has no user name")
        }
        let user = String(cString: name)
        if shellStartup != nil, let shell = passwd.pointee.pw_shell, !String(cString: shell).hasSuffix("/bash") {
            throw Unavailable(description: "the login shell of \(user) is \(String(cString: shell)), not bash: BASH_ENV stands for a slow ~/.bashrc only in bash")
        }
        if geteuid() == 0 { try makePrivilegeSeparationDirectory() }
        let scratch = try ScratchDirectory.make(prefix: "keepsync-sshd")
        let dir = String(decoding: scratch, as: UTF8.self)
        do {
            try generateKey(tools, dir + "/host_ed25519", comment: "keepsync-test-host")
            try generateKey(tools, dir + "/user_ed25519", comment: "keepsync-test-user")
            guard link(dir + "/user_ed25519.pub", dir + "/authorized_keys") == 0 else {
                throw Failure(description: "link authorized_keys: errno \(errno)")
            }
            var lastLog = ""
            for _ in 0..<5 {
                let port = try freePort()
                try writeConfig(dir, port: port, user: user, shellStartup: shellStartup)
                let pid = try spawnServer(tools, dir)
                let log = dir + "/sshd.log"
                var exited: Int32?
                let listening = eventuallyBlocking(timeout: timeout) {
                    if read(log).contains("Server listening on 127.0.0.1 port \(port).") { return true }
                    exited = ChildSpawning.poll(pid)
                    return exited != nil
                } && exited == nil
                if listening {
                    let server = LoopbackSSHD(tools: tools, user: user, directory: dir, port: port, pid: pid)
                    try server.waitUntilReachable(timeout: timeout)
                    return server
                }
                if exited == nil {
                    kill(pid, SIGKILL)
                    _ = ChildSpawning.reap(pid)
                    throw Failure(description: "sshd did not listen within \(timeout); its log:\n\(read(log))")
                }
                lastLog = read(log)
                // Another process took the port between our probe and sshd's bind: try another.
                guard lastLog.contains("Address already in use") || lastLog.contains("Cannot bind any address") else {
                    throw Failure(description: "sshd exited with status \(exited!); its log:\n\(lastLog)")
                }
            }
            throw Failure(description: "sshd found no free port in 5 tries; its log:\n\(lastLog)")
        } catch {
            try? ScratchDirectory.removeTree(scratch)
            throw error
        }
    }

    /// `ssh … true` until it succeeds; on failure stops sshd and throws with both logs.
    private func waitUntilReachable(timeout: Duration) throws {
        var last: ChildOutcome?
        let reached = eventuallyBlocking(timeout: timeout, every: .milliseconds(50)) {
            last = try? ssh("true", timeout: .seconds(10))
            return last?.succeeded == true
        }
        guard reached else {
            let message = "sshd on port \(port) listens but ssh … true fails (\(last.map(String.init(describing:)) ?? "not run")); sshd's log:\n\(log)"
            stop()
            throw Failure(description: message)
        }
    }

    /// sshd run as root refuses to start without its privilege separation directory.
    private static func makePrivilegeSeparationDirectory() throws {
        if mkdir("/run/sshd", 0o755) != 0 && errno != EEXIST {
            throw Failure(description: "mkdir /run/sshd: errno \(errno)")
        }
    }

    private static func generateKey(_ tools: Tools, _ path: String, comment: String) throws {
        let outcome = try ChildSpawning.run([tools.sshKeygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                                            timeout: .seconds(30))
        guard outcome.succeeded else { throw Failure(description: "ssh-keygen -f \(path): \(outcome)") }
    }

    /// A port nobody listens on now: the kernel's pick for a socket bound to port 0.
    private static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw Failure(description: "bind 127.0.0.1:0: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// `SetEnv SHLVL=1`: a bash started by sshd sources ~/.bashrc only at level 1, and the
    /// machine's may be slow or hang (pyenv's init waits up to 60 s on a lock that a
    /// session killed by `shutDown` or `stop` left behind): the tests are about keepsync.
    private static func writeConfig(_ dir: String, port: UInt16, user: String, shellStartup: Duration?) throws {
        var environment = "SHLVL=1"
        if let shellStartup {
            let seconds = Double(shellStartup.components.seconds) + Double(shellStartup.components.attoseconds) / 1e18
            // The first word of the command bash runs (`exec`, `rsync`, `true`), with the time.
            try writeFile(dir + "/profile.sh", """
                printf '%s %s\\n' "$(date +%s.%N)" "${BASH_EXECUTION_STRING%% *}" >> \(dir)/login-shells
                sleep \(seconds)

                """)
            environment += " BASH_ENV=\(dir)/profile.sh"
        }
        let config = """
            # LoopbackSSHD: sshd reads this file only (-f); nothing in /etc.
            ListenAddress 127.0.0.1:\(port)
            HostKey \(dir)/host_ed25519
            AuthorizedKeysFile \(dir)/authorized_keys
            AllowUsers \(user)
            PermitRootLogin prohibit-password
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            PidFile none
            PrintMotd no
            PrintLastLog no
            MaxStartups 100
            MaxSessions 100
            LogLevel INFO
            SetEnv \(environment)

            """
        try writeFile(dir + "/sshd_config", config)
    }

    private static func writeFile(_ path: String, _ text: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw Failure(description: "open \(path): errno \(errno)") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw Failure(description: "write \(path): errno \(errno)")
        }
    }

    /// `sshd -D -e -f DIR/sshd_config`, its stdout and stderr to `DIR/sshd.log`.
    private static func spawnServer(_ tools: Tools, _ dir: String) throws -> pid_t {
        let argv = [tools.sshd, "-D", "-e", "-f", dir + "/sshd_config"].map { Array($0.utf8) }
        return try ChildSpawning.spawn(argv, environment: ChildSpawning.plainEnvironment) { actions in
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, dir + "/sshd.log", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            posix_spawn_file_actions_adddup2(&actions, 2, 1)
        }
    }

    // MARK: Using

    /// Runs `remoteCommand` (a line for the remote shell) in a new ssh session;
    /// `options` go before the destination.
    public func ssh(_ remoteCommand: String, options: [String] = [], input: [UInt8] = [],
                    timeout: Duration = .seconds(30)) throws -> ChildOutcome {
        state.withLock { $0.sessions += 1 }
        return try ChildSpawning.run(sshArguments + options + [destination, remoteCommand], input: input, timeout: timeout)
    }

    /// `ssh -O OPERATION` (`check`, `exit`) to the master that `multiplexingOptions` name.
    public func control(_ operation: String, timeout: Duration = .seconds(30)) throws -> ChildOutcome {
        try ChildSpawning.run(sshArguments + multiplexingOptions + ["-O", operation, destination], timeout: timeout)
    }

    /// ssh sessions run through `ssh`, readiness probes included.
    public var sessionsRun: Int { state.withLock { $0.sessions } }

    /// What sshd logged so far (`-e`: its log goes to a file in `directory`).
    public var log: String { Self.read(directory + "/sshd.log") }

    /// Logins sshd accepted so far: a multiplexed session adds none.
    public var acceptedLogins: Int {
        // sshd ends its stderr lines with "\r\n", one Character in Swift.
        log.split(whereSeparator: \.isNewline).filter { $0.hasPrefix("Accepted publickey for ") }.count
    }

    /// sshd and every process below it (connections, sessions, their commands).
    public var processes: [ProcessTree.Entry] {
        (ProcessTree.entry(pid).map { [$0] } ?? []) + ProcessTree.descendants(of: pid)
    }

    // MARK: Hanging and stopping

    /// SIGSTOP to sshd and every process below it, a remote that hangs instead of
    /// refusing: new connections are accepted by the kernel but never answered, and open
    /// sessions stall. Returns once all are stopped (throws if that takes 10 s).
    public func pause() throws {
        let frozen = freeze()
        let stopped = eventuallyBlocking(timeout: .seconds(10), every: .milliseconds(1)) {
            frozen.allSatisfy { p in ProcessTree.entry(p).map { $0.state == UInt8(ascii: "T") || $0.state == UInt8(ascii: "Z") } ?? true }
        }
        guard stopped else { throw Failure(description: "sshd's processes not all stopped after 10 s: \(processes)") }
    }

    /// SIGCONT to sshd and every process below it.
    public func resume() {
        for p in ProcessTree.descendants(of: pid).reversed() { kill(p.pid, SIGCONT) }
        kill(pid, SIGCONT)
    }

    /// Cuts the connection that `pid` (a command run in one of its sessions) came in over:
    /// SIGTERM to the sshd process serving it (its nearest sshd ancestor), as an ended
    /// sshd session or a dropped network does. The commands are not signalled: they see
    /// their input close and run their own cleanup. Returns that sshd process's pid; nil
    /// when `pid` does not descend from this sshd or the signal could not be sent.
    public func endConnection(of pid: pid_t) -> pid_t? {
        let listener = self.pid
        var entry = ProcessTree.entry(pid)
        while let current = entry, current.parent > 1, current.parent != listener {
            guard let parent = ProcessTree.entry(current.parent) else { return nil }
            if parent.name == "sshd" {
                // The connection's own process (below the listener), never the listener.
                guard ProcessTree.descendants(of: listener).contains(where: { $0.pid == parent.pid }) else { return nil }
                return kill(parent.pid, SIGTERM) == 0 ? parent.pid : nil
            }
            entry = parent
        }
        return nil
    }

    /// Kills sshd and every process below it, as a stopped service or a rebooting host:
    /// connections to the port are refused until `restart`. Keeps the keys and the port.
    public func shutDown() {
        let running = state.withLock { s in
            defer { s.running = false }
            return s.running
        }
        guard running else { return }
        // Frozen first: none can fork a child that would escape the kill.
        let killed = freeze()
        for p in killed { kill(p, SIGKILL) }
        _ = ChildSpawning.reap(killed[0])
        _ = eventuallyBlocking(timeout: .seconds(10), every: .milliseconds(1)) {
            killed.dropFirst().allSatisfy { p in ProcessTree.entry(p).map { $0.state == UInt8(ascii: "Z") } ?? true }
        }
    }

    /// Starts sshd again after `shutDown`, on the same port with the same keys, and waits
    /// until `ssh … true` succeeds (at most `timeout`). Its log starts anew.
    public func restart(timeout: Duration = .seconds(30)) throws {
        let pid = try Self.spawnServer(tools, directory)
        state.withLock { s in
            s.pid = pid
            s.running = true
        }
        let listening = eventuallyBlocking(timeout: timeout) {
            Self.read(directory + "/sshd.log").contains("Server listening on 127.0.0.1 port \(port).") || ChildSpawning.poll(pid) != nil
        }
        guard listening, ChildSpawning.poll(pid) == nil else {
            throw Failure(description: "sshd did not start again on port \(port); its log:\n\(log)")
        }
        try waitUntilReachable(timeout: timeout)
    }

    /// Kills sshd and every process below it, waits until they are gone (or zombies
    /// of a parent that does not reap), then removes `directory`. Idempotent.
    public func stop() {
        let first = state.withLock { s in
            defer { s.stopped = true }
            return !s.stopped
        }
        guard first else { return }
        shutDown()
        // An ssh master of a test may still be making its control socket in there: retry.
        _ = eventuallyBlocking(timeout: .seconds(5), every: .milliseconds(10)) {
            (try? ScratchDirectory.removeTree(Array(directory.utf8))) != nil
        }
    }

    /// SIGSTOP to sshd, then to its descendants until a scan finds no new one: the pids.
    private func freeze() -> [pid_t] {
        kill(pid, SIGSTOP)
        var frozen: [pid_t] = [pid]
        var seen: Set<pid_t> = [pid]
        while true {
            let fresh = ProcessTree.descendants(of: pid).filter { $0.state != UInt8(ascii: "Z") && !seen.contains($0.pid) }
            if fresh.isEmpty { return frozen }
            for p in fresh {
                kill(p.pid, SIGSTOP)
                seen.insert(p.pid)
                frozen.append(p.pid)
            }
        }
    }

    /// With `start(shellStartup:)`: every login shell sshd started, in order: when, and the
    /// first word of its command (`exec` for a remote shell, `rsync`, `true`).
    public var loginShells: [(time: Double, command: String)] {
        Self.read(directory + "/login-shells").split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ", maxSplits: 1)
            guard let time = words.first.flatMap({ Double($0) }) else { return nil }
            return (time, words.count > 1 ? String(words[1]) : "")
        }
    }

    // MARK: Helpers

    private static func read(_ path: String) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return String(decoding: out, as: UTF8.self) }
            out += buffer[0..<n]
        }
    }

    /// One word for `rsync -e` and the shell: single-quoted unless plainly safe.
    private static func shellWord(_ word: String) -> String {
        let safe = !word.isEmpty && word.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || Array("/._-=,:@%+".utf8).contains(b)
        }
        precondition(!word.contains("'"), "a single quote in an ssh argument: \(word)")
        return safe ? word : "'\(word)'"
    }
}
