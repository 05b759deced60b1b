import Glibc
import KeepSyncCore

/// A remote `sh` started once and fed requests on its stdin, so that what the remote's
/// login shell costs to start (a `~/.bashrc` running pyenv or conda) is paid once per
/// connection, not per command. A request is a header line `TOKEN SCRIPTLEN INPUTLEN`,
/// then the script's bytes and the input's: the loop reads both exactly (`head -c`, or
/// `dd bs=1` where a `head` reads ahead), runs the script in a subshell with the input on
/// its stdin (what it leaves unread is drained; the pipeline's last part is a subshell,
/// as shells that run it in the current one would otherwise end the loop), and ends its stdout with `TOKEN STATUS`
/// and its stderr with `TOKEN`, each on a line. The token is random per request: no
/// byte a script prints can end an answer early. Not thread-safe: `RemoteSession`
/// serializes the calls.
final class RemoteShell: @unchecked Sendable {
    /// The loop the remote `sh -c` runs. Free of `'`: it goes inside one single-quoted word.
    static let loop = """
        if [ "$(printf ab | { head -c 1 >/dev/null; head -c 1; } 2>/dev/null)" = b ]; \
        then rd() { head -c "$1"; }; else rd() { dd bs=1 count="$1" 2>/dev/null; }; fi; \
        while IFS=" " read -r t sl il; do s=$(rd "$sl"; printf x); s=${s%x}; \
        rd "$il" | ( (eval "$s"); r=$?; cat >/dev/null; exit $r ); \
        printf "%s %s\\n" "$t" "$?"; printf "%s\\n" "$t" >&2; done
        """

    /// The remote command that starts the loop under the login shell.
    static var command: [UInt8] {
        precondition(!loop.contains("'"))
        return Array("exec sh -c '\(loop)'".utf8)
    }

    /// How a request ended.
    enum Outcome {
        /// The script ran; its status and output.
        case answered(RemoteOutput)
        /// The shell (its ssh) ended before it answered: ssh's exit status and stderr.
        case ended(status: Int32, stderr: [UInt8])
        /// No answer by the deadline.
        case timedOut
    }

    private let child: CapturedChild
    private var ended = false
    /// Requests answered.
    private(set) var answered = 0

    /// Spawns `argv` (ssh to the host running `command`, or any program running the loop).
    init(_ argv: [[UInt8]]) throws(Errno) {
        child = try Sys.spawnCaptured(argv, stdin: nil)
        if let input = child.input { _ = fcntl(input.rawValue, F_SETFL, fcntl(input.rawValue, F_GETFL) | O_NONBLOCK) }
    }

    deinit { end() }

    /// The pid of its ssh (its process group).
    var pid: pid_t { child.pid }

    /// False once it ended or its process is gone.
    var isAlive: Bool { !ended && Sys.reapIfExited(child.pid) == nil }

    /// Kills it and reaps it.
    func end() {
        guard !ended else { return }
        ended = true
        child.abandon()
    }

    /// Runs `script` with `input` on its stdin; waits for its answer until `timeout`.
    /// After `.ended` or `.timedOut` the shell is of no more use (`end` it).
    func exchange(_ script: [UInt8], input: [UInt8], timeout: Duration) -> Outcome {
        guard !ended, let inputFD = child.input else { return .ended(status: 255, stderr: []) }
        let clock = ContinuousClock(), start = clock.now, deadline = start + timeout
        let token = Array((0..<2).map { _ in String(UInt64.random(in: .min ... .max), radix: 16) }.joined(separator: "x").utf8)
        var pending = Array("\(String(decoding: token, as: UTF8.self)) \(script.count) \(input.count)\n".utf8) + script + input
        var written = 0
        var stdout: [UInt8] = [], stderr: [UInt8] = []
        var status: Int32?, stderrDone = false
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
        defer { buffer.deallocate() }
        var pipeSignal = sigset_t(), saved = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &saved)
        defer {
            var zero = timespec()
            while sigtimedwait(&pipeSignal, nil, &zero) > 0 {}
            pthread_sigmask(SIG_SETMASK, &saved, nil)
        }
        while status == nil || !stderrDone {
            let remaining = clock.now.duration(to: deadline)
            if remaining <= .zero { return .timedOut }
            var fds = [pollfd(fd: child.out.rawValue, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: child.err.rawValue, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: written < pending.count ? inputFD.rawValue : -1, events: Int16(POLLOUT), revents: 0)]
            let ms = Int32(min(remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1, 1000))
            if poll(&fds, 3, ms) < 0 {
                if errno == EINTR { continue }
                return finish(stderr)
            }
            if fds[2].revents != 0 {
                let n = pending[written...].withUnsafeBytes { write(inputFD.rawValue, $0.baseAddress, $0.count) }
                if n > 0 {
                    written += n
                    if written == pending.count { pending = [] ; written = 0 }
                } else if n < 0 && errno != EAGAIN && errno != EINTR {
                    return finish(stderr)
                }
            }
            for i in 0..<2 where fds[i].revents != 0 {
                let n = read(fds[i].fd, buffer.baseAddress, buffer.count)
                if n > 0 {
                    if i == 0 {
                        stdout += buffer[0..<n]
                        if status == nil, let s = Self.trailer(&stdout, token: token) { status = s }
                    } else {
                        let from = max(0, stderr.count - token.count)
                        stderr += buffer[0..<n]
                        // ssh's own words may follow the marker in the same read: it is
                        // looked for in what arrived, not only at the end.
                        if !stderrDone, let at = stderr[from...].firstRange(of: token + [0x0A]) {
                            stderr.removeSubrange(at)
                            stderrDone = true
                        }
                    }
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    return finish(stderr)
                }
            }
        }
        answered += 1
        return .answered(RemoteOutput(status: status!, stdout: stdout, stderr: stderr, elapsed: clock.now - start))
    }

    /// When `stdout` ends with `TOKEN STATUS\n`: the status, and the trailer removed.
    static func trailer(_ stdout: inout [UInt8], token: [UInt8]) -> Int32? {
        guard stdout.last == 0x0A else { return nil }
        let end = stdout.count - 1
        var digits = end
        while digits > 0, end - digits < 3, (0x30...0x39).contains(stdout[digits - 1]) { digits -= 1 }
        let space = digits - 1
        guard digits < end, space >= token.count, stdout[space] == 0x20,
              stdout[(space - token.count)..<space].elementsEqual(token),
              let status = Int32(String(decoding: stdout[digits..<end], as: UTF8.self)) else { return nil }
        stdout.removeSubrange((space - token.count)...)
        return status
    }

    /// Ends it after its ssh went away (a pipe closed): what is left of its stderr read
    /// (for at most 500 ms, until it closes), its exit status (255 when it had to be killed).
    private func finish(_ stderr: [UInt8]) -> Outcome {
        ended = true
        var stderr = stderr
        let clock = ContinuousClock(), until = clock.now + .milliseconds(500)
        var buffer = [UInt8](repeating: 0, count: 1 << 14)
        while clock.now < until {
            var fd = pollfd(fd: child.err.rawValue, events: Int16(POLLIN), revents: 0)
            guard poll(&fd, 1, 50) >= 0 || errno == EINTR else { break }
            if fd.revents == 0 { continue }
            let n = buffer.withUnsafeMutableBytes { read(child.err.rawValue, $0.baseAddress, $0.count) }
            if n > 0 { stderr += buffer[0..<n] } else if n == 0 || (errno != EINTR && errno != EAGAIN) { break }
        }
        var status = Sys.reapIfExited(child.pid)
        while status == nil, clock.now < until {
            usleep(5_000)
            status = Sys.reapIfExited(child.pid)
        }
        // Once reaped its pid may be another's: only a live one is killed.
        if status == nil { kill(-child.pid, SIGKILL) }
        child.input?.close()
        child.out.close()
        child.err.close()
        if status == nil {
            var raw: Int32 = 0
            while waitpid(child.pid, &raw, 0) < 0 && errno == EINTR {}
            status = 255
        }
        return .ended(status: status!, stderr: stderr)
    }
}
