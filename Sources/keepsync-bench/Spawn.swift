import Glibc

/// Child processes: spawned with byte arguments, output to /dev/null or a file.
final class Spawn {
    let pid: pid_t
    private(set) var status: Int32?

    /// Starts `argv` with this process's environment plus `extra`; `group`: in a new
    /// process group (its pid), so `kill(-pid, …)` reaches what it forks.
    init(_ argv: [[UInt8]], extra: [String: String] = [:], output: [UInt8]? = nil, group: Bool = false) throws {
        var env: [[UInt8]] = []
        var i = 0
        while let p = environ[i] {
            let entry = Array(String(cString: p).utf8)
            let key = entry.prefix { $0 != 0x3D }
            if extra[String(decoding: key, as: UTF8.self)] == nil { env.append(entry) }
            i += 1
        }
        for (k, v) in extra { env.append(Array("\(k)=\(v)".utf8)) }
        let cArgs = argv.map(Spawn.cString) + [nil]
        let cEnv = env.map(Spawn.cString) + [nil]
        defer {
            for p in cArgs { p?.deallocate() }
            for p in cEnv { p?.deallocate() }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let out = output ?? Array("/dev/null".utf8)
        Paths.with(out) { _ = posix_spawn_file_actions_addopen(&actions, 1, $0, O_WRONLY | O_CREAT | O_APPEND, 0o644) }
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        if group {
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
            posix_spawnattr_setpgroup(&attributes, 0)
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, cArgs[0]!, &actions, &attributes, cArgs, cEnv)
        guard rc == 0 else { throw BenchError("cannot start \(Paths.display(argv[0])): \(String(cString: strerror(rc)))") }
        self.pid = pid
    }

    deinit { if status == nil { kill(pid, SIGKILL); _ = wait() } }

    /// Waits for the exit; the status (128 + signal when killed).
    @discardableResult
    func wait() -> Int32 {
        if let status { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
        let s = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        status = s
        return s
    }

    /// The exit status if it ended, nil while it runs.
    func poll() -> Int32? {
        if let status { return status }
        var raw: Int32 = 0
        guard waitpid(pid, &raw, WNOHANG) == pid else { return nil }
        let s = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        status = s
        return s
    }

    /// Sends SIGTERM and waits up to `seconds`, then SIGKILL.
    func stop(seconds: Double = 10) {
        guard poll() == nil else { return }
        kill(pid, SIGTERM)
        let until = Clock.now() + seconds
        while poll() == nil && Clock.now() < until { usleep(5_000) }
        if poll() == nil {
            kill(pid, SIGKILL)
            wait()
        }
    }

    /// Runs to completion; throws unless it exits 0 (or `allowed`). Returns the seconds taken.
    @discardableResult
    static func run(_ argv: [[UInt8]], extra: [String: String] = [:], allowed: Set<Int32> = [0], quiet: Bool = false,
                    output: [UInt8]? = nil) throws -> Double {
        let start = Clock.now()
        let child = try Spawn(argv, extra: extra, output: output)
        let status = child.wait()
        let took = Clock.now() - start
        if !allowed.contains(status) && !quiet {
            // The last lines it wrote to `output`: a failure says why.
            let said = output.flatMap { Machine.read(Paths.display($0)) }.map { $0.split(separator: "\n").suffix(3).joined(separator: " | ") }
            throw BenchError("\(argv.map(Paths.display).joined(separator: " ")) exited \(status)" + (said.map { $0.isEmpty ? "" : ": " + $0 } ?? ""))
        }
        return took
    }

    /// `run`, also returning the child's peak resident set in MiB: its VmHWM, read every
    /// 2 ms while it runs (wait4's ru_maxrss would count the spawning bench's own memory,
    /// which the child shared until its exec).
    static func runMeasured(_ argv: [[UInt8]]) throws -> (seconds: Double, peakMiB: Double) {
        let start = Clock.now()
        let child = try Spawn(argv)
        var peak = 0
        var status: Int32
        while true {
            if let kib = Machine.peakRSS(child.pid) { peak = max(peak, kib) }
            if let s = child.poll() {
                status = s
                break
            }
            usleep(2_000)
        }
        let took = Clock.now() - start
        if status != 0 { throw BenchError("\(argv.map(Paths.display).joined(separator: " ")) exited \(status)") }
        return (took, Double(peak) / 1024)
    }

    /// `argv` from plain strings.
    static func args(_ parts: String...) -> [[UInt8]] { parts.map { Array($0.utf8) } }

    private static func cString(_ bytes: [UInt8]) -> UnsafeMutablePointer<CChar>? {
        let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
        for (i, b) in bytes.enumerated() { p[i] = CChar(bitPattern: b) }
        p[bytes.count] = 0
        return p
    }

    /// The first of `names` found on PATH, as an absolute path.
    static func which(_ name: String) -> [UInt8]? {
        for dir in ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
            let path = Array("\(dir)/\(name)".utf8)
            if Paths.with(path, { access($0, X_OK) }) == 0 { return path }
        }
        return nil
    }
}

/// Monotonic seconds.
enum Clock {
    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
