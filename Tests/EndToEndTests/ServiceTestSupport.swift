import Foundation
import Glibc
import Synchronization
import Testing
import KeepSyncTestSupport
import KeepSyncCore

// Helpers for the sd_notify, systemd service and foreground-output suites: a child left
// running (optionally on a pseudo-terminal), a datagram socket standing in for
// systemd's notify socket, and deadline polling.

/// `CLOCK_MONOTONIC` in microseconds, the clock of sd_notify's `MONOTONIC_USEC=`.
func monotonicMicroseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
}

/// `CLOCK_REALTIME` in seconds, the clock of SO_TIMESTAMPNS.
func realtimeSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// A child process left running. stdin is /dev/null, stdout and stderr go to files;
/// or all three are a terminal (the child gets its own session with that terminal as
/// its controlling terminal, so a ^C typed on it reaches the child as SIGINT).
final class BackgroundChild {
    let pid: pid_t
    let stdoutPath: [UInt8]?
    let stderrPath: [UInt8]?
    private(set) var exitStatus: Int32?

    enum Output {
        /// stdout to `base.stdout`, stderr to `base.stderr`.
        case files(base: [UInt8])
        /// stdin, stdout and stderr are this terminal (a pty slave path).
        case terminal([UInt8])
    }

    init(_ executable: [UInt8], arguments: [[UInt8]], environment: [String: String], output: Output) throws {
        var flags: Int32 = 0
        switch output {
        case .files(let base):
            stdoutPath = base + Array(".stdout".utf8)
            stderrPath = base + Array(".stderr".utf8)
        case .terminal:
            stdoutPath = nil
            stderrPath = nil
            // POSIX_SPAWN_SETSID (glibc): setsid() runs before the file actions, so opening
            // the slave without O_NOCTTY makes it the controlling terminal.
            flags = 0x80
        }
        let (outPath, errPath) = (stdoutPath, stderrPath)
        pid = try ChildSpawning.spawn([executable] + arguments, environment: environment, flags: flags) { actions in
            switch output {
            case .files:
                posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
                FS.withCPath(outPath!) { _ = posix_spawn_file_actions_addopen(&actions, 1, $0, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
                FS.withCPath(errPath!) { _ = posix_spawn_file_actions_addopen(&actions, 2, $0, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
            case .terminal(let slave):
                FS.withCPath(slave) { _ = posix_spawn_file_actions_addopen(&actions, 0, $0, O_RDWR, 0) }
                posix_spawn_file_actions_adddup2(&actions, 0, 1)
                posix_spawn_file_actions_adddup2(&actions, 0, 2)
            }
        }
    }

    deinit { killNow() }

    /// SIGKILL and reap, if still running.
    func killNow() {
        guard poll() == nil else { return }
        kill(pid, SIGKILL)
        _ = ChildSpawning.reap(pid)
        exitStatus = 128 + SIGKILL
    }

    func send(_ signal: Int32) { kill(pid, signal) }

    /// The exit status (128 + signal when killed) once ended, nil while running.
    @discardableResult
    func poll() -> Int32? {
        if let exitStatus { return exitStatus }
        exitStatus = ChildSpawning.poll(pid)
        return exitStatus
    }

    /// Waits up to `timeout` for the exit; `whileWaiting` runs on every poll (to drain a pty).
    func waitForExit(timeout: Duration, whileWaiting: () -> Void = {}) async -> Int32? {
        _ = await eventually(timeout: timeout, every: .milliseconds(5)) {
            whileWaiting()
            return poll() != nil
        }
        whileWaiting()
        return poll()
    }

    var stderrText: String {
        guard let stderrPath else { return "" }
        return String(decoding: (try? FS.readFile(stderrPath)) ?? [], as: UTF8.self)
    }

    var stderrLines: [String] { stderrText.split(separator: "\n").map(String.init) }

    /// For failure messages.
    var diagnostics: String { "--- keepsync (pid \(pid)) stderr ---\n" + stderrText }

}

/// A pseudo-terminal: the test holds the master (and keeps a slave descriptor open so
/// that output written just before the child exits is never lost to a hangup).
final class PseudoTerminal {
    let master: Int32
    let slavePath: [UInt8]
    private let heldSlave: Int32
    private(set) var output: [UInt8] = []

    init() throws {
        // posix_openpt, unlockpt and ptsname by hand: Swift's Glibc module does not
        // import the XSI declarations. grantpt is a no-op with devpts.
        let fd = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { throw SpawnError(description: "open /dev/ptmx: errno \(errno)") }
        var unlock: Int32 = 0
        guard ioctl(fd, 0x4004_5431 /* TIOCSPTLCK */, &unlock) == 0 else {
            close(fd)
            throw SpawnError(description: "TIOCSPTLCK: errno \(errno)")
        }
        var number: UInt32 = 0
        guard ioctl(fd, 0x8004_5430 /* TIOCGPTN */, &number) == 0 else {
            close(fd)
            throw SpawnError(description: "TIOCGPTN: errno \(errno)")
        }
        let name = Array("/dev/pts/\(number)".utf8)
        master = fd
        slavePath = name
        heldSlave = FS.withCPath(slavePath) { open($0, O_RDWR | O_NOCTTY | O_CLOEXEC) }
        // A wide terminal: nothing the product prints is wrapped.
        var size = winsize(ws_row: 50, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0)
        _ = ioctl(master, UInt(TIOCSWINSZ), &size)
        _ = fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK)
    }

    deinit {
        close(master)
        if heldSlave >= 0 { close(heldSlave) }
    }

    /// Reads whatever the terminal holds now.
    func drain() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(master, $0.baseAddress, $0.count) }
            if n > 0 {
                output += buffer[0..<n]
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }

    /// Types bytes on the keyboard (`[3]` is ^C).
    func type(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
    }

    var text: String { String(decoding: output, as: UTF8.self) }

    /// The output as a visible transcript (escape as `\e`, carriage return as `\r`).
    var visible: String {
        text.replacingOccurrences(of: "\u{1B}", with: "\\e").replacingOccurrences(of: "\r", with: "\\r")
    }
}

/// A datagram socket standing in for systemd's `$NOTIFY_SOCKET`: a filesystem path or
/// an abstract name. A thread of its own reads every datagram as it comes (the kernel
/// queues only `net.unix.max_dgram_qlen`, 10 by default, before senders block), keeping
/// it with the sender's PID (SO_PASSCRED) and the kernel's receive time (SO_TIMESTAMPNS).
/// With `reading: false` nobody ever reads it: a stuck systemd.
final class NotifySocket {
    struct Message: CustomStringConvertible, Sendable {
        var text: String
        var senderPID: pid_t?
        /// When the reader thread got it.
        var at: ContinuousClock.Instant
        /// When the kernel queued it (SO_TIMESTAMPNS, CLOCK_REALTIME seconds).
        var sentAt: Double?

        /// `KEY=VALUE` lines.
        var fields: [(key: String, value: String)] {
            text.split(separator: "\n").map { line in
                let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
            }
        }

        func value(_ key: String) -> String? { fields.first { $0.key == key }?.value }
        func has(_ key: String, _ value: String = "1") -> Bool { self.value(key) == value }

        var description: String { text.replacingOccurrences(of: "\n", with: "\\n") }
    }

    enum Kind: String, CustomStringConvertible, CaseIterable, Sendable {
        case path, abstract
        var description: String { rawValue }
    }

    /// The descriptor and what was read from it, shared with the reader thread.
    private final class Reader: Sendable {
        let fd: Int32
        let received = Mutex<[Message]>([])
        let stop = Atomic<Bool>(false)
        let finished = DispatchSemaphore(value: 0)

        init(fd: Int32) { self.fd = fd }

        func loop() {
            defer { finished.signal() }
            var data = [UInt8](repeating: 0, count: 8192)
            var control = [UInt8](repeating: 0, count: 256)
            while !stop.load(ordering: .relaxed) {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, 50) > 0 else { continue }
                while true {
                    var controlLength = 0
                    let n = data.withUnsafeMutableBytes { d in
                        control.withUnsafeMutableBytes { c in
                            var iov = iovec(iov_base: d.baseAddress, iov_len: d.count)
                            return withUnsafeMutablePointer(to: &iov) { iovp in
                                var msg = msghdr()
                                msg.msg_iov = iovp
                                msg.msg_iovlen = 1
                                msg.msg_control = c.baseAddress
                                msg.msg_controllen = c.count
                                let r = recvmsg(fd, &msg, Int32(MSG_DONTWAIT))
                                controlLength = Int(msg.msg_controllen)
                                return r
                            }
                        }
                    }
                    if n < 0 {
                        if errno == EINTR { continue }
                        break
                    }
                    let ancillary = NotifySocket.parseControl(control, length: controlLength)
                    let message = Message(text: String(decoding: data[0..<n], as: UTF8.self), senderPID: ancillary.pid,
                                          at: ContinuousClock.now, sentAt: ancillary.time)
                    received.withLock { $0.append(message) }
                }
            }
        }
    }

    /// The value for `NOTIFY_SOCKET`.
    let address: String
    private let path: [UInt8]?
    private let reader: Reader
    private let reading: Bool

    private static let counter = Mutex(0)

    init(_ kind: Kind, directory: [UInt8], reading: Bool = true) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SpawnError(description: "socket: errno \(errno)") }
        var on: Int32 = 1
        // SO_PASSCRED (16): the kernel attaches the sender's credentials to every datagram;
        // SO_TIMESTAMPNS (35): and the time it queued it.
        for option in [Int32(16), 35] where setsockopt(fd, SOL_SOCKET, option, &on, socklen_t(MemoryLayout<Int32>.size)) != 0 {
            let e = errno
            close(fd)
            throw SpawnError(description: "setsockopt \(option): errno \(e)")
        }
        let n = Self.counter.withLock { $0 += 1; return $0 }
        var nameBytes: [UInt8]
        switch kind {
        case .path:
            path = directory / "notify-\(n).sock"
            nameBytes = path!
            address = String(decoding: path!, as: UTF8.self)
        case .abstract:
            path = nil
            let name = "keepsync-test-\(getpid())-\(n)-\(UInt32.random(in: 0...UInt32.max))"
            nameBytes = [0] + Array(name.utf8)
            address = "@" + name
        }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        guard nameBytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            close(fd)
            throw SpawnError(description: "socket address too long: \(address)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: nameBytes) }
        let length = MemoryLayout<sa_family_t>.size + nameBytes.count + (kind == .path ? 1 : 0)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(length)) }
        }
        guard rc == 0 else {
            let e = errno
            close(fd)
            throw SpawnError(description: "bind \(address): errno \(e)")
        }
        reader = Reader(fd: fd)
        self.reading = reading
        if reading {
            let reader = self.reader
            Thread.detachNewThread { reader.loop() }
        }
    }

    deinit {
        if reading {
            reader.stop.store(true, ordering: .relaxed)
            reader.finished.wait()
        }
        close(reader.fd)
        if let path { _ = FS.withCPath(path) { unlink($0) } }
    }

    /// Everything read so far, in order.
    var messages: [Message] { reader.received.withLock { $0 } }

    /// The PID of an SCM_CREDENTIALS control message (struct ucred: pid, uid, gid) and
    /// the time of an SCM_TIMESTAMPNS one (struct timespec); each after a struct cmsghdr
    /// (size_t len, int level, int type).
    fileprivate static func parseControl(_ control: [UInt8], length: Int) -> (pid: pid_t?, time: Double?) {
        func load<T>(_ offset: Int, as: T.Type) -> T {
            control[offset..<(offset + MemoryLayout<T>.size)].withUnsafeBytes { $0.loadUnaligned(as: T.self) }
        }
        var pid: pid_t?
        var time: Double?
        var offset = 0
        let header = MemoryLayout<Int>.size + 8
        while offset + header <= length {
            let len = load(offset, as: Int.self)
            let level = load(offset + MemoryLayout<Int>.size, as: Int32.self)
            let type = load(offset + MemoryLayout<Int>.size + 4, as: Int32.self)
            guard len >= header, offset + len <= length else { break }
            if level == SOL_SOCKET && type == 2 /* SCM_CREDENTIALS */ && len >= header + 4 {
                pid = load(offset + header, as: Int32.self)
            }
            if level == SOL_SOCKET && type == 35 /* SCM_TIMESTAMPNS */ && len >= header + 16 {
                time = Double(load(offset + header, as: Int.self)) + Double(load(offset + header + 8, as: Int.self)) / 1e9
            }
            offset += (len + 7) & ~7
        }
        return (pid, time)
    }

    /// Waits until a message at index `from` or later satisfies `match`; returns its index.
    func waitFor(_ timeout: Duration, from start: Int = 0, _ match: (Message) -> Bool) async -> Int? {
        var found: Int?
        _ = await eventually(timeout: timeout, every: .milliseconds(2)) {
            let all = messages
            found = all.indices.first { $0 >= start && match(all[$0]) }
            return found != nil
        }
        return found
    }

    /// The messages, one a line, for failure messages.
    var transcript: String {
        let all = messages
        guard let first = all.first?.at else { return "(no datagrams)" }
        return all.map { m in
            let ms = (m.at - first).components
            let t = ms.seconds * 1000 + ms.attoseconds / 1_000_000_000_000_000
            return "+\(t)ms pid \(m.senderPID.map(String.init) ?? "?"): \(m)"
        }.joined(separator: "\n")
    }
}

extension Sandbox {
    /// `count` regular files `f0000…` of `size` bytes each under the source, in two directories.
    func writeManyFiles(_ count: Int, size: Int = 4096) throws {
        try FS.mkdirs(source / "many/a")
        try FS.mkdirs(source / "many/b")
        for i in 0..<count {
            let name = String(i).count >= 4 ? String(i) : String(repeating: "0", count: 4 - String(i).count) + String(i)
            try FS.writeFile(source / "many/\(i % 2 == 0 ? "a" : "b")/f\(name)", FS.pattern(count: size, seed: UInt64(i)))
        }
    }

    /// Entries of `writeManyFiles` in the mirror, temp files not counted: a cheap count
    /// (a copy is renamed into place, so a name there is a complete file), fast enough
    /// to read the mirror's state at the moment a notification arrives.
    func mirroredManyFiles() -> Int {
        ["many/a", "many/b"].reduce(0) { total, dir in
            total + ((try? FS.list(mirror / dir)) ?? []).filter { !$0.starts(with: Array(".keepsync-tmp-".utf8)) }.count
        }
    }

    /// Number of regular files in the source.
    func sourceRegularFileCount() throws -> Int { try sourceSnapshot().regularFiles.count }

    /// Differences between the source (minus `ignoring`) and the mirror; empty when equal.
    func differencesFromSource(ignoring: [[UInt8]] = []) -> [String] {
        do {
            return try sourceSnapshot().removing(ignoring).differences(to: try mirrorSnapshot())
        } catch {
            return ["cannot snapshot: \(error)"]
        }
    }

    /// At most `limit` of the differences, for failure messages.
    func differencesFromSourceSummary(limit: Int = 10) -> String {
        let all = differencesFromSource()
        return all.prefix(limit).joined(separator: "\n") + (all.count > limit ? "\n… and \(all.count - limit) more" : "")
    }

    /// `T/status.json` as an object, nil while absent or unreadable.
    var statusJSON: [String: Any]? {
        guard let data = try? FS.readFile(state / "status.json") else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(data))) as? [String: Any]
    }

    /// Starts `keepsync run -S -M -T` plus `extra` with stderr to a file.
    func spawnRun(_ extra: [any CommandArgument] = [], environment extraEnvironment: [String: String] = [:],
                  removing removed: [String] = []) throws -> BackgroundChild {
        var env = environment
        for (k, v) in extraEnvironment { env[k] = v }
        for k in removed { env[k] = nil }
        return try BackgroundChild(binary, arguments: (["run"] + paths + extra).map(\.argumentBytes), environment: env,
                                   output: .files(base: root / "agent-\(UInt32.random(in: 0...UInt32.max))"))
    }
}
