import Foundation
import Glibc
import KeepSyncTestSupport

/// Runs a program as a child process with raw byte arguments and an explicit
/// environment, capturing stdout, stderr and the exit status, with a timeout.
enum ChildProcess {
    private static let spawnLock = NSLock()

    static func run(_ executable: [UInt8], arguments: [[UInt8]], environment: [String: String],
                    timeout: Duration = .seconds(30)) throws -> ProcessResult {
        // Pipes are made close-on-exec under a lock shared with the spawn, so that a
        // child spawned concurrently by another test never inherits our write ends.
        spawnLock.lock()
        var locked = true
        defer { if locked { spawnLock.unlock() } }
        var outPipe: [Int32] = [-1, -1]
        var errPipe: [Int32] = [-1, -1]
        guard pipe(&outPipe) == 0 else { throw SpawnError(description: "pipe: errno \(errno)") }
        guard pipe(&errPipe) == 0 else {
            close(outPipe[0]); close(outPipe[1])
            throw SpawnError(description: "pipe: errno \(errno)")
        }
        for fd in outPipe + errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }

        let argv = ChildSpawning.cStrings([executable] + arguments)
        let envp = ChildSpawning.environmentStrings(environment)
        defer {
            ChildSpawning.release(argv)
            ChildSpawning.release(envp)
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)

        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0]!, &actions, nil, argv, envp)
        close(outPipe[1])
        close(errPipe[1])
        spawnLock.unlock()
        locked = false
        guard rc == 0 else {
            close(outPipe[0]); close(errPipe[0])
            throw SpawnError(description: "posix_spawn \(String(decoding: executable, as: UTF8.self)): errno \(rc)")
        }

        var out: [UInt8] = []
        var err: [UInt8] = []
        var fds = [pollfd(fd: outPipe[0], events: Int16(POLLIN), revents: 0),
                   pollfd(fd: errPipe[0], events: Int16(POLLIN), revents: 0)]
        var timedOut = false
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var buffer = [UInt8](repeating: 0, count: 65536)
        while fds.contains(where: { $0.fd >= 0 }) {
            let remaining = clock.now.duration(to: deadline)
            if remaining <= .zero {
                timedOut = true
                kill(pid, SIGKILL)
                break
            }
            let ms = Int32(min(remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1, 1000))
            let n = poll(&fds, nfds_t(fds.count), ms)
            if n < 0 {
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

        let status = ChildSpawning.reap(pid)
        return ProcessResult(status: status, stdout: out, stderr: err, timedOut: timedOut)
    }
}
