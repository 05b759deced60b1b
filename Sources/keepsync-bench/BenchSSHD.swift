import Glibc

/// A loopback OpenSSH server for the remote rows, after KeepSyncTestSupport's
/// LoopbackSSHD (the bench uses no project module): `sshd -D -e -f CONFIG` on a free
/// port of 127.0.0.1, its keys, `authorized_keys` and config in a scratch directory.
/// Nothing in /etc or ~/.ssh is read or written. Stopped, with its sessions, by `stop`.
final class BenchSSHD {
    /// Why the remote rows cannot run here (a program missing), nil when they can.
    static var missing: String? {
        let needed = [("sshd", "openssh-server"), ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client"), ("rsync", "rsync")]
        let absent = needed.filter { Spawn.which($0.0) == nil }.map { "\($0.0) (\($0.1))" }
        return absent.isEmpty ? nil : "not installed: \(absent.joined(separator: ", "))"
    }

    let directory: [UInt8]
    let port: UInt16
    let server: Spawn
    /// The user logged in as (this process's).
    let user: String
    /// Whether sessions skip the login user's ~/.bashrc (sshd `SetEnv SHLVL=1`).
    let skipsBashrc: Bool
    /// Seconds every bash started by sshd sleeps first (`BASH_ENV`), standing in for a
    /// `~/.bashrc` that runs pyenv, conda or nvm; 0 for an empty profile.
    let shellStartup: Double
    private var stopped = false

    /// `USER@127.0.0.1`.
    var destination: String { "\(user)@127.0.0.1" }
    /// The private key the client authenticates with.
    var key: String { Paths.display(directory) + "/user_ed25519" }
    /// ssh and its options, without the destination (what `--ssh` and `rsync -e` run).
    var sshWords: [String] {
        [Paths.display(Spawn.which("ssh") ?? Array("ssh".utf8)), "-F", "/dev/null", "-p", String(port), "-i", key,
         "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]
    }
    /// `sshWords` as one string (no word holds a space or a quote).
    var sshCommand: String { sshWords.joined(separator: " ") }
    /// A client master whose socket lives in `directory`.
    var masterOptions: [String] { ["-o", "ControlMaster=auto", "-o", "ControlPath=\(Paths.display(directory))/cm-%C", "-o", "ControlPersist=60"] }

    private init(directory: [UInt8], port: UInt16, server: Spawn, user: String, skipsBashrc: Bool, shellStartup: Double) {
        self.directory = directory
        self.port = port
        self.server = server
        self.user = user
        self.skipsBashrc = skipsBashrc
        self.shellStartup = shellStartup
    }

    deinit { stop() }

    /// Makes keys and a config in `directory` (created), starts sshd and waits until
    /// `ssh … true` succeeds. `skipBashrc`: sessions get `SHLVL=1` (sshd `SetEnv`), so a
    /// non-interactive bash started by sshd does not source ~/.bashrc (it does only at
    /// level 1); every client of this server gets the same. `shellStartup` > 0: every bash
    /// sshd starts sleeps that long first (`SetEnv BASH_ENV`; the login shell must be bash).
    static func start(in directory: [UInt8], skipBashrc: Bool, shellStartup: Double = 0) throws -> BenchSSHD {
        if let missing = Self.missing { throw BenchError(missing) }
        guard let sshd = Spawn.which("sshd"), let keygen = Spawn.which("ssh-keygen") else { throw BenchError("no sshd") }
        guard let passwd = getpwuid(geteuid()), let name = passwd.pointee.pw_name else { throw BenchError("uid \(geteuid()) has no name") }
        let user = String(cString: name)
        if shellStartup > 0, let shell = passwd.pointee.pw_shell, !String(cString: shell).hasSuffix("/bash") {
            throw BenchError("the login shell of \(user) is \(String(cString: shell)), not bash: BASH_ENV cannot slow it")
        }
        if geteuid() == 0 && mkdir("/run/sshd", 0o755) != 0 && errno != EEXIST {
            throw BenchError("mkdir /run/sshd: \(String(cString: strerror(errno)))")
        }
        try Paths.mkdirs(directory)
        let dir = Paths.display(directory)
        for (file, comment) in [("host_ed25519", "keepsync-bench-host"), ("user_ed25519", "keepsync-bench-user")] {
            try Spawn.run([keygen] + Spawn.args("-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", "\(dir)/\(file)"))
        }
        guard link("\(dir)/user_ed25519.pub", "\(dir)/authorized_keys") == 0 else {
            throw BenchError("link authorized_keys: \(String(cString: strerror(errno)))")
        }
        let port = try freePort()
        var environment = skipBashrc ? ["SHLVL=1"] : []
        if shellStartup > 0 {
            try Paths.write(Array("\(dir)/profile.sh".utf8), Array("sleep \(shellStartup)\n".utf8), mode: 0o644)
            environment.append("BASH_ENV=\(dir)/profile.sh")
        }
        let config = """
            # keepsync-bench: sshd reads this file only (-f); nothing in /etc.
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
            \(environment.isEmpty ? "" : "SetEnv \(environment.joined(separator: " "))\n")
            """
        try Paths.write(Array("\(dir)/sshd_config".utf8), Array(config.utf8), mode: 0o600)
        let log = Array("\(dir)/sshd.log".utf8)
        let server = try Spawn([sshd] + Spawn.args("-D", "-e", "-f", "\(dir)/sshd_config"), output: log, group: true)
        let started = BenchSSHD(directory: directory, port: port, server: server, user: user, skipsBashrc: skipBashrc,
                                shellStartup: shellStartup)
        let until = Clock.now() + 30
        while !(Machine.read("\(dir)/sshd.log") ?? "").contains("Server listening on 127.0.0.1 port \(port).") {
            guard server.poll() == nil, Clock.now() < until else {
                let text = Machine.read("\(dir)/sshd.log") ?? ""
                started.stop()
                throw BenchError("sshd did not listen on port \(port): \(text.split(separator: "\n").suffix(3).joined(separator: " | "))")
            }
            usleep(20_000)
        }
        while (try? Spawn.run(started.ssh("true"))) == nil {
            guard Clock.now() < until else {
                started.stop()
                throw BenchError("sshd listens on port \(port) but ssh … true fails")
            }
            usleep(100_000)
        }
        return started
    }

    /// argv of `ssh [options] DEST command`.
    func ssh(_ command: String, options: [String] = []) -> [[UInt8]] {
        (sshWords + options + ["--", destination, command]).map { Array($0.utf8) }
    }

    /// Median seconds of one `ssh DEST command` over an established master, `n` runs.
    func sshCost(_ command: String, runs n: Int = 10) throws -> Double {
        try Spawn.run(ssh("true", options: masterOptions))
        defer { _ = try? Spawn.run((sshWords + masterOptions + ["-O", "exit", destination]).map { Array($0.utf8) }, quiet: true) }
        var s = Samples()
        for _ in 0..<n { s.values.append(try Spawn.run(ssh(command, options: masterOptions))) }
        return s.median ?? 0
    }

    /// SIGTERM to sshd's group and its sessions (each in a session of its own), SIGKILL
    /// to what is left after 5 s; then the directory goes. Idempotent.
    func stop() {
        guard !stopped else { return }
        stopped = true
        let all = [server.pid] + Self.descendants(of: server.pid)
        kill(-server.pid, SIGTERM)
        for p in all { kill(p, SIGTERM) }
        let until = Clock.now() + 5
        while server.poll() == nil && Clock.now() < until { usleep(10_000) }
        kill(-server.pid, SIGKILL)
        for p in all where p != server.pid { kill(p, SIGKILL) }
        server.wait()
        Paths.remove(directory)
    }

    /// Pids below `root` (from /proc/PID/stat's parent field).
    static func descendants(of root: pid_t) -> [pid_t] {
        var parent: [pid_t: pid_t] = [:]
        for name in (try? Paths.list(Array("/proc".utf8))) ?? [] {
            guard let pid = pid_t(Paths.display(name)), let stat = Machine.read("/proc/\(pid)/stat"),
                  let end = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            if fields.count > 1, let ppid = pid_t(fields[1]) { parent[pid] = ppid }
        }
        var found: [pid_t] = []
        var frontier: Set<pid_t> = [root]
        while !frontier.isEmpty {
            let next = parent.filter { frontier.contains($0.value) }.map(\.key)
            found += next
            frontier = Set(next)
        }
        return found
    }

    /// Whether something accepts a TCP connection on 127.0.0.1:`port` now.
    static func listening(port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        address.sin_port = port.bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// A port nobody listens on now: the kernel's pick for 127.0.0.1:0.
    private static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw BenchError("bind 127.0.0.1:0: \(String(cString: strerror(errno)))") }
        return UInt16(bigEndian: address.sin_port)
    }
}
