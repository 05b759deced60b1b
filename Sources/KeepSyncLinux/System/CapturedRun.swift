import CKeepSyncShims
import Glibc
import KeepSyncCore

/// A child run to its end (or killed at its deadline): status, output, timing.
struct CapturedRun: Sendable {
    /// Exit status, 128 + signal when killed.
    var status: Int32
    /// What it wrote to stdout.
    var stdout: [UInt8]
    /// What it wrote to stderr.
    var stderr: [UInt8]
    /// True when the deadline passed and its process group was killed.
    var timedOut: Bool
    /// From spawn to end.
    var elapsed: Duration
}

/// A child spawned with its output captured (`Sys.spawnCaptured`), not yet waited for:
/// `collect` runs it to its end. With a pipe on its stdin it can be spawned ahead and
/// given its input later (`send`).
struct CapturedChild: Sendable {
    /// Its pid, also its process group.
    let pid: pid_t
    /// When it was spawned.
    let spawned: ContinuousClock.Instant
    /// The write end of its stdin pipe; nil when its stdin is a file.
    let input: FileDescriptor?
    let out: FileDescriptor
    let err: FileDescriptor

    /// Writes `bytes` to its stdin pipe (`collect` closes it); false when it cannot take
    /// them (it ended, its stdin is no pipe, or they exceed the pipe's capacity, so that
    /// the write never waits on a child blocked on its own output): then `abandon` it.
    /// SIGPIPE is held back on this thread meanwhile (and taken if the write raised it).
    func send(_ bytes: [UInt8]) -> Bool {
        guard let input, bytes.count <= fcntl(input.rawValue, Self.getPipeSize) else { return false }
        var pipeSignal = sigset_t(), saved = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &saved)
        defer { pthread_sigmask(SIG_SETMASK, &saved, nil) }
        do throws(Errno) { try input.writeAll(bytes) } catch {
            if error.rawValue == EPIPE {
                var zero = timespec()
                while sigtimedwait(&pipeSignal, nil, &zero) < 0 && errno == EINTR {}
            }
            return false
        }
        return true
    }

    /// `F_GETPIPE_SZ` (Glibc's overlay leaves it out).
    static let getPipeSize: Int32 = 1032

    /// Whether it runs and so do all its children (rsync's ssh), as `/proc/PID/stat` and
    /// `/proc/PID/task/PID/children` say: an ssh that ended (reaped, or a zombie) means the
    /// transport behind a waiting rsync is gone. rsync reaps it at once, so "no child" is
    /// told apart from "no child yet" by the minor faults of reaped children (`cminflt`),
    /// which any exec makes nonzero; one spawned within `childGrace` with no child yet (its
    /// ssh still to come, on a loaded machine) runs. Without those files, whether it can be
    /// signalled.
    var childrenAlive: Bool {
        guard let stat = Self.stat(pid) else { return kill(pid, 0) == 0 }
        guard stat.running else { return false }
        guard let fd = try? Sys.open(.currentDirectory, Array("/proc/\(pid)/task/\(pid)/children".utf8), O_RDONLY) else {
            return true
        }
        let text = (try? fd.readAll()) ?? []
        fd.close()
        let children = text.split(separator: 0x20).compactMap { pid_t(String(decoding: $0, as: UTF8.self)) }
        guard !children.isEmpty else { return stat.reapedFaults == 0 && ContinuousClock.now - spawned < Self.childGrace }
        return children.allSatisfy { Self.running($0) == true }
    }

    /// How long after its spawn a child may still be without children of its own.
    static let childGrace: Duration = .seconds(2)

    /// Whether `pid` runs (not a zombie, not gone); nil when /proc cannot say.
    static func running(_ pid: pid_t) -> Bool? {
        stat(pid).map(\.running)
    }

    /// From `/proc/PID/stat`: whether it runs, and the minor faults of the children it
    /// reaped (field 11, `cminflt`); gone is not running; nil when /proc cannot say.
    static func stat(_ pid: pid_t) -> (running: Bool, reapedFaults: Int)? {
        let fd: FileDescriptor
        do throws(Errno) { fd = try Sys.open(.currentDirectory, Array("/proc/\(pid)/stat".utf8), O_RDONLY) } catch {
            return error.rawValue == ENOENT ? (false, 0) : nil
        }
        defer { fd.close() }
        // "PID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS MINFLT CMINFLT ...": the state
        // follows the last ')'; Z and X have ended.
        guard let stat = try? fd.readAll(), let close = stat.lastIndex(of: 0x29), close + 2 < stat.count else { return nil }
        let fields = stat[(close + 2)...].split(separator: 0x20)
        guard fields.count > 8, let faults = Int(String(decoding: fields[8], as: UTF8.self)) else { return nil }
        return (fields[0].first != 0x5A && fields[0].first != 0x58, faults)
    }

    /// Kills its process group and reaps it, closing every pipe.
    func abandon() {
        kill(-pid, SIGKILL)
        input?.close()
        out.close()
        err.close()
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
    }

    /// Closes its stdin pipe (its list ends), then runs it to its end: stdout and stderr
    /// read until `timeout` from now, when the whole group gets SIGKILL (rsync's ssh child
    /// too). Once the child exited, its pipes are drained for at most `drain` (a background
    /// ssh master may hold a copy).
    func collect(timeout: Duration, drain: Duration = .milliseconds(500)) -> CapturedRun {
        let clock = ContinuousClock()
        let start = clock.now
        input?.close()
        var stdout: [UInt8] = [], stderr: [UInt8] = []
        var fds = [pollfd(fd: out.rawValue, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: err.rawValue, events: Int16(POLLIN), revents: 0)]
        let deadline = start + timeout
        var status: Int32?
        var drainUntil: ContinuousClock.Instant?
        var timedOut = false
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
        defer { buffer.deallocate() }
        while fds.contains(where: { $0.fd >= 0 }) {
            if status == nil, let done = Sys.reapIfExited(pid) {
                status = done
                drainUntil = clock.now + drain
            }
            let remaining = clock.now.duration(to: min(deadline, drainUntil ?? deadline))
            if remaining <= .zero {
                if status == nil {
                    timedOut = true
                    kill(-pid, SIGKILL)
                }
                break
            }
            // Short slices: an exit is noticed while a grandchild holds a pipe.
            let ms = Int32(min(remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1, 50))
            if poll(&fds, nfds_t(fds.count), ms) < 0 {
                if errno == EINTR { continue }
                break
            }
            for i in fds.indices where fds[i].fd >= 0 && fds[i].revents != 0 {
                let n = read(fds[i].fd, buffer.baseAddress, buffer.count)
                if n > 0 {
                    if i == 0 { stdout += buffer[0..<n] } else { stderr += buffer[0..<n] }
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    Glibc.close(fds[i].fd)
                    fds[i].fd = -1
                }
            }
        }
        for f in fds where f.fd >= 0 { Glibc.close(f.fd) }
        if status == nil {
            // Both pipes closed before the deadline: the child is ending; past it, killed.
            if !timedOut && clock.now >= deadline {
                timedOut = true
                kill(-pid, SIGKILL)
            }
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
            status = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        }
        if timedOut { kill(-pid, SIGKILL) }
        return CapturedRun(status: status!, stdout: stdout, stderr: stderr, timedOut: timedOut, elapsed: clock.now - start)
    }
}

extension Sys {
    /// `posix_spawnp` of `argv` in a process group of its own, `input` on stdin (from an
    /// unlinked temp file: no SIGPIPE, no deadlock on a large list), stdout and stderr
    /// captured, run to its end or killed at `timeout` (`CapturedChild.collect`).
    static func runCaptured(_ argv: [[UInt8]], input: [UInt8], timeout: Duration,
                            drain: Duration = .milliseconds(500)) throws(Errno) -> CapturedRun {
        let inputFile = try unlinkedFile(holding: input)
        defer { inputFile.close() }
        return try spawnCaptured(argv, stdin: inputFile).collect(timeout: timeout, drain: drain)
    }

    /// `posix_spawnp` of `argv` in a process group of its own, stdout and stderr on pipes;
    /// its stdin is `stdin`, or a pipe whose write end the child's value holds.
    static func spawnCaptured(_ argv: [[UInt8]], stdin: FileDescriptor?) throws(Errno) -> CapturedChild {
        let inputPipe = stdin == nil ? try pipe() : nil
        let out: (read: FileDescriptor, write: FileDescriptor), err: (read: FileDescriptor, write: FileDescriptor)
        do throws(Errno) {
            out = try pipe()
            do throws(Errno) { err = try pipe() } catch {
                out.read.close(); out.write.close()
                throw error
            }
        } catch {
            inputPipe?.read.close(); inputPipe?.write.close()
            throw error
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, (stdin ?? inputPipe!.read).rawValue, 0)
        posix_spawn_file_actions_adddup2(&actions, out.write.rawValue, 1)
        posix_spawn_file_actions_adddup2(&actions, err.write.rawValue, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGPIPE, SIGQUIT] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { bytes in
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            for (i, b) in bytes.enumerated() { p[i] = CChar(bitPattern: b) }
            p[bytes.count] = 0
            return p
        } + [nil]
        defer { for p in cArgs { p?.deallocate() } }
        var pid: pid_t = 0
        let spawned = ContinuousClock.now
        let rc = posix_spawnp(&pid, cArgs[0]!, &actions, &attributes, cArgs, environ)
        inputPipe?.read.close()
        out.write.close()
        err.write.close()
        guard rc == 0 else {
            inputPipe?.write.close()
            out.read.close(); err.read.close()
            throw Errno(rawValue: rc)
        }
        return CapturedChild(pid: pid, spawned: spawned, input: inputPipe?.write, out: out.read, err: err.read)
    }

    /// `waitpid(WNOHANG)`: the exit status once `pid` ended, nil while it runs.
    static func reapIfExited(_ pid: pid_t) -> Int32? {
        var raw: Int32 = 0
        guard waitpid(pid, &raw, WNOHANG) == pid else { return nil }
        return raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }

    /// An unlinked temp file in /tmp holding `bytes`, at offset 0, close-on-exec.
    private static func unlinkedFile(holding bytes: [UInt8]) throws(Errno) -> FileDescriptor {
        var template = Array("/tmp/keepsync-stdin-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { ks_mkstemp_cloexec($0.baseAddress!) }
        guard fd >= 0 else { throw Errno.current }
        Glibc.unlink(template)
        let file = FileDescriptor(rawValue: fd)
        do throws(Errno) {
            try file.writeAll(bytes)
            try file.seek(to: 0)
        } catch {
            file.close()
            throw error
        }
        return file
    }
}
