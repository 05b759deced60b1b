import Glibc

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
