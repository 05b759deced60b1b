import Glibc

/// Waits for names to arrive in any of several directories: one inotify descriptor with a
/// watch on each (taken before an agent starts, so its watches cannot crowd them out).
final class MirrorWatch {
    let fd: Int32
    /// Watch descriptor to the index of its directory.
    private var directories: [Int32: Int] = [:]
    private var seen: Set<[UInt8]> = []
    private var buffer = [UInt8](repeating: 0, count: 64 << 10)

    /// Watches each of `paths` (its index is its name in `wait`).
    init(_ paths: [[UInt8]]) throws {
        fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0 else { throw BenchError("inotify_init1: \(String(cString: strerror(errno)))") }
        for (i, path) in paths.enumerated() {
            let wd = Paths.with(path) { inotify_add_watch(fd, $0, UInt32(IN_MOVED_TO | IN_CLOSE_WRITE)) }
            guard wd >= 0 else {
                let why = String(cString: strerror(errno))
                close(fd)
                throw BenchError("inotify_add_watch \(Paths.display(path)): \(why)")
            }
            directories[wd] = i
        }
    }

    deinit { close(fd) }

    private static func key(_ directory: Int, _ name: [UInt8]) -> [UInt8] { Array("\(directory)/".utf8) + name }

    /// Monotonic seconds when `name` arrived in directory `directory`; nil after `timeout`.
    func wait(in directory: Int, for name: [UInt8], timeout: Double) -> Double? {
        let wanted = Self.key(directory, name)
        let until = Clock.now() + timeout
        while true {
            if seen.remove(wanted) != nil { return Clock.now() }
            let left = until - Clock.now()
            if left <= 0 { return nil }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, Int32(max(1, min(left * 1000, 1000))))
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { continue }
            let now = Clock.now()
            var hit = false
            buffer.withUnsafeBytes { raw in
                var offset = 0
                while offset + 16 <= n {
                    let wd = raw.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                    let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    if let d = directories[wd] {
                        let got = Self.key(d, Array(raw[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }))
                        if got == wanted { hit = true } else { seen.insert(got) }
                    }
                    offset += 16 + length
                }
            }
            if hit { return now }
        }
    }
}

/// `fs.inotify.max_user_watches`: read, raised for a while, put back, also when the bench
/// is interrupted (SIGINT, SIGTERM, SIGHUP restore it before exiting).
enum WatchLimit {
    static let path = "/proc/sys/fs/inotify/max_user_watches"
    /// `path` for the signal handler (which must not allocate).
    nonisolated(unsafe) private static let cPath = strdup(path)!
    /// The value to put back as text ("" when nothing is raised), for the signal handler.
    nonisolated(unsafe) private static let saved = UnsafeMutablePointer<CChar>.allocate(capacity: 32)
    nonisolated(unsafe) private static var savedLength = 0

    static var current: Int? { Machine.read(path).flatMap { Int($0.split(separator: "\n").first ?? "") } }

    /// Writes `value`; false when not permitted.
    static func write(_ value: Int) -> Bool {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let text = Array("\(value)\n".utf8)
        return text.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == text.count
    }

    /// Raises the limit to `value`; returns the old one to `restore`, nil when not raised.
    static func raise(to value: Int) -> Int? {
        guard let old = current, old < value else { return nil }
        let text = Array("\(old)\n".utf8)
        for (i, c) in text.enumerated() { saved[i] = CChar(bitPattern: c) }
        savedLength = text.count
        _ = cPath  // initialized here, not first in a handler
        for s in [SIGINT, SIGTERM, SIGHUP] {
            signal(s) { signo in
                let fd = open(WatchLimit.cPath, O_WRONLY | O_CLOEXEC)
                if fd >= 0 {
                    _ = Glibc.write(fd, WatchLimit.saved, WatchLimit.savedLength)
                    close(fd)
                }
                _exit(128 + signo)
            }
        }
        guard write(value) else {
            restore(old)
            return nil
        }
        return old
    }

    /// Puts `old` back and the signals' default actions.
    static func restore(_ old: Int) {
        _ = write(old)
        for s in [SIGINT, SIGTERM, SIGHUP] { signal(s, SIG_DFL) }
        savedLength = 0
    }
}

/// What /proc and status.json say about a running agent.
enum AgentProbe {
    /// utime + stime of `pid` in seconds (every thread), nil once it is gone.
    static func cpuSeconds(_ pid: pid_t) -> Double? {
        guard let text = Machine.read("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
        // After "pid (comm)": state is field 3, utime 14, stime 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident set (VmRSS) of `pid`, in KiB.
    static func residentKiB(_ pid: pid_t) -> Int? { Machine.value("/proc/\(pid)/status", key: "VmRSS:") }

    /// Inode numbers of every directory `pid` holds an inotify watch on (its fdinfo).
    static func watchedInodes(_ pid: pid_t) -> Set<UInt64> {
        var inodes = Set<UInt64>()
        let base = Array("/proc/\(pid)/fdinfo".utf8)
        let marker = Array("inotify wd:".utf8), ino = Array(" ino:".utf8)
        for name in (try? Paths.list(base)) ?? [] {
            let fd = Paths.with(Paths.join(base, name)) { open($0, O_RDONLY | O_CLOEXEC) }
            guard fd >= 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            let n = Paths.readAll(fd, into: &buffer)
            close(fd)
            // Lines "inotify wd:1 ino:f7c1b2 sdev:fe00000 mask:...", the inode in hex.
            var i = 0
            while let start = find(marker, in: buffer, from: i, to: n) {
                guard let at = find(ino, in: buffer, from: start, to: n) else { break }
                var value: UInt64 = 0
                var k = at + ino.count
                while k < n, let digit = hexDigit(buffer[k]) {
                    value = value << 4 | UInt64(digit)
                    k += 1
                }
                inodes.insert(value)
                i = k
            }
        }
        return inodes
    }

    private static func find(_ needle: [UInt8], in hay: [UInt8], from: Int, to end: Int) -> Int? {
        var i = from
        while i + needle.count <= end {
            if hay[i] == needle[0] && hay[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }

    private static func hexDigit(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }

    /// From status.json: the directories left unwatched and the seconds between polls of
    /// them (the error entry "N directories are not watched (polled every P s)"); nil
    /// when the file says nothing of the kind.
    static func unwatched(statusFile: [UInt8]) -> (directories: Int, period: Double)? {
        guard let text = Machine.read(Paths.display(statusFile)) else { return nil }
        guard let count = text.firstRange(of: " directories are not watched (polled every ") else { return nil }
        let digits = text[..<count.lowerBound].reversed().prefix { $0.isNumber }
        let period = text[count.upperBound...].prefix { $0.isNumber || $0 == "." }
        guard let n = Int(String(digits.reversed())), let p = Double(period) else { return nil }
        return (n, p)
    }
}
