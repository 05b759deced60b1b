#if canImport(Glibc)
import Glibc
#endif

/// A child run to its end: exit status, what it wrote, and whether the deadline killed it.
public struct ChildOutcome: Sendable, CustomStringConvertible {
    /// The exit status (128 + signal when killed).
    public let status: Int32
    /// Everything written to stdout.
    public let stdout: [UInt8]
    /// Everything written to stderr.
    public let stderr: [UInt8]
    /// True when the deadline passed and the child was killed.
    public let timedOut: Bool
    /// From the spawn to the end.
    public let elapsed: Duration

    /// Exit 0 before the deadline.
    public var succeeded: Bool { status == 0 && !timedOut }
    /// stdout as UTF-8 (lossy).
    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    /// stderr as UTF-8 (lossy).
    public var stderrText: String { String(decoding: stderr, as: UTF8.self) }

    /// Status, time and stderr, for failure messages.
    public var description: String {
        "exit \(status)\(timedOut ? " (killed at the deadline)" : "") after \(elapsed); stderr: \(stderrText)"
    }
}

extension ChildSpawning {
    /// A spawn that could not happen.
    public struct Failure: Error, CustomStringConvertible {
        /// What failed, with its errno.
        public let description: String
    }

    /// Where `locate` looks after `$PATH`: the sbin directories too (sshd lives there).
    public static let usualDirectories = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]

    /// The absolute path of executable `name` in `directories` (default: `$PATH`, then
    /// `usualDirectories`); nil when none has it.
    public static func locate(_ name: String, in directories: [String]? = nil) -> String? {
        let search = directories ?? ((getenv("PATH").map { String(cString: $0) } ?? "")
            .split(separator: ":").map(String.init) + usualDirectories)
        for dir in search where dir.hasPrefix("/") {
            let path = dir + "/" + name
            var info = stat()
            if stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && access(path, X_OK) == 0 { return path }
        }
        return nil
    }

    /// `PATH` (ours, then `usualDirectories`) and `HOME`: what the tools run here need.
    public static var plainEnvironment: [String: String] {
        let path = getenv("PATH").map { String(cString: $0) }
        return ["PATH": ([path].compactMap { $0 } + usualDirectories).joined(separator: ":"),
                "HOME": getenv("HOME").map { String(cString: $0) } ?? "/"]
    }

    /// Runs `argv` (`argv[0]` an absolute path) to its end with `input` on stdin (empty:
    /// /dev/null), capturing stdout and stderr; killed at `timeout`. Once the child has
    /// exited, its output is read for at most a second more: a grandchild left running
    /// (an ssh master in the background) may hold the pipes.
    public static func run(_ argv: [[UInt8]], environment: [String: String] = plainEnvironment,
                           input: [UInt8] = [], timeout: Duration = .seconds(60)) throws -> ChildOutcome {
        let clock = ContinuousClock()
        let start = clock.now
        var outPipe: [Int32] = [-1, -1]
        var errPipe: [Int32] = [-1, -1]
        guard closeOnExecPipe(&outPipe) == 0 else { throw Failure(description: "pipe: errno \(errno)") }
        guard closeOnExecPipe(&errPipe) == 0 else {
            close(outPipe[0]); close(outPipe[1])
            throw Failure(description: "pipe: errno \(errno)")
        }
        // Input from an unlinked file, not a pipe: no SIGPIPE when the child stops reading.
        let inputFile = input.isEmpty ? -1 : try unlinkedFile(holding: input)
        defer { if inputFile >= 0 { close(inputFile) } }

        let pid: pid_t
        do {
            // The write ends are the child's alone once it runs (or none runs).
            defer {
                close(outPipe[1])
                close(errPipe[1])
            }
            pid = try spawn(argv, environment: environment) { actions in
                if inputFile >= 0 {
                    posix_spawn_file_actions_adddup2(&actions, inputFile, 0)
                } else {
                    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
                }
                posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
                posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
            }
        } catch {
            close(outPipe[0]); close(errPipe[0])
            throw error
        }

        var out: [UInt8] = []
        var err: [UInt8] = []
        var fds = [pollfd(fd: outPipe[0], events: Int16(POLLIN), revents: 0),
                   pollfd(fd: errPipe[0], events: Int16(POLLIN), revents: 0)]
        let deadline = start + timeout
        var exitStatus: Int32?
        var drainUntil: ContinuousClock.Instant?
        var timedOut = false
        var buffer = [UInt8](repeating: 0, count: 65536)
        while fds.contains(where: { $0.fd >= 0 }) {
            if exitStatus == nil, let status = poll(pid) {
                exitStatus = status
                drainUntil = clock.now + .seconds(1)
            }
            let remaining = clock.now.duration(to: min(deadline, drainUntil ?? deadline))
            if remaining <= .zero {
                if exitStatus == nil {
                    timedOut = true
                    kill(pid, SIGKILL)
                }
                break
            }
            // Short slices: the child's exit is noticed even while a grandchild holds a pipe.
            let ms = Int32(min(remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1, 100))
            if Glibc.poll(&fds, nfds_t(fds.count), ms) < 0 {
                if errno == EINTR { continue }
                break
            }
            for i in fds.indices where fds[i].fd >= 0 && fds[i].revents != 0 {
                let got = buffer.withUnsafeMutableBytes { read(fds[i].fd, $0.baseAddress, $0.count) }
                if got > 0 {
                    if i == 0 { out += buffer[0..<got] } else { err += buffer[0..<got] }
                } else if got == 0 || (errno != EINTR && errno != EAGAIN) {
                    close(fds[i].fd)
                    fds[i].fd = -1
                }
            }
        }
        for f in fds where f.fd >= 0 { close(f.fd) }
        let status = exitStatus ?? reap(pid)
        return ChildOutcome(status: status, stdout: out, stderr: err, timedOut: timedOut, elapsed: clock.now - start)
    }

    /// `run` with string arguments.
    public static func run(_ argv: [String], environment: [String: String] = plainEnvironment,
                           input: [UInt8] = [], timeout: Duration = .seconds(60)) throws -> ChildOutcome {
        try run(argv.map { Array($0.utf8) }, environment: environment, input: input, timeout: timeout)
    }

    /// `pipe2(O_CLOEXEC)` through dlsym (Swift's Glibc module does not import it): no
    /// window in which a child spawned by another test inherits the ends. Where glibc
    /// lacks it, `pipe` then `FD_CLOEXEC`.
    private static func closeOnExecPipe(_ ends: inout [Int32]) -> Int32 {
        typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pipe2") {
            return ends.withUnsafeMutableBufferPointer { unsafeBitCast(symbol, to: Pipe2.self)($0.baseAddress!, O_CLOEXEC) }
        }
        guard pipe(&ends) == 0 else { return -1 }
        for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return 0
    }

    /// A descriptor, close-on-exec and at offset 0, of an unlinked temp file holding `bytes`.
    private static func unlinkedFile(holding bytes: [UInt8]) throws -> Int32 {
        var template = Array("/tmp/keepsync-input-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw Failure(description: "mkstemp: errno \(errno)") }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        unlink(template)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let code = errno
                close(fd)
                throw Failure(description: "write of the input: errno \(code)")
            }
            offset += n
        }
        lseek(fd, 0, SEEK_SET)
        return fd
    }
}
