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
            // No close here: a class init that throws once `fd` is set still runs deinit.
            guard wd >= 0 else { throw BenchError("inotify_add_watch \(Paths.display(path)): \(String(cString: strerror(errno)))") }
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

/// An sd_notify socket: tells when a child sent READY=1.
final class NotifySocket {
    let fd: Int32
    let path: [UInt8]

    init(_ path: [UInt8]) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { throw BenchError("notify socket path too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { b in
            for (i, c) in path.enumerated() { b[i] = c }
            b[path.count] = 0
        }
        _ = Paths.with(path) { unlink($0) }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { throw BenchError("bind \(Paths.display(path)): \(String(cString: strerror(errno)))") }
    }

    deinit {
        close(fd)
        _ = Paths.with(path) { unlink($0) }
    }

    /// Monotonic seconds when a datagram holding READY=1 arrived; nil after `timeout`,
    /// or when `alive` says the child is gone.
    func waitReady(timeout: Double, alive: () -> Bool) -> Double? {
        let until = Clock.now() + timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Clock.now() < until {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 200) > 0 {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n > 0 {
                    let text = String(decoding: buffer[..<n], as: UTF8.self)
                    if text.split(separator: "\n").contains("READY=1") { return Clock.now() }
                }
            } else if !alive() {
                return nil
            }
        }
        return nil
    }
}

/// What the machine is and allows.
enum Machine {
    /// `sync; echo 3 > /proc/sys/vm/drop_caches`; false when not permitted.
    @discardableResult
    static func dropCaches() -> Bool {
        Glibc.sync()
        let fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return Glibc.write(fd, "3\n", 2) == 2
    }

    static var canDropCaches: Bool { access("/proc/sys/vm/drop_caches", W_OK) == 0 }

    /// Peak resident set (VmHWM) of a process, in KiB.
    static func peakRSS(_ pid: pid_t) -> Int? {
        value("/proc/\(pid)/status", key: "VmHWM:")
    }

    static func value(_ file: String, key: String) -> Int? {
        guard let text = read(file) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(key) {
            return Int(line.dropFirst(key.count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "")
        }
        return nil
    }

    static func read(_ file: String) -> String? {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        let n = Paths.readAll(fd, into: &buffer)
        return String(decoding: buffer[..<n], as: UTF8.self)
    }

    /// One line: kernel, cores, memory, the work directory's file system.
    static func describe(work: [UInt8]) -> String {
        var u = utsname()
        uname(&u)
        let release = withUnsafeBytes(of: u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let machine = withUnsafeBytes(of: u.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let mem = (value("/proc/meminfo", key: "MemTotal:") ?? 0) / 1024 / 1024
        let cores = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        return "Linux \(release) \(machine), \(cores) cores, \(mem) GiB RAM, work dir \(Paths.display(work)) on \(fileSystem(work))"
    }

    /// The type (and options) of the mount holding `path`, from /proc/self/mounts.
    static func fileSystem(_ path: [UInt8]) -> String {
        guard let mounts = read("/proc/self/mounts") else { return "?" }
        let p = Paths.display(path)
        var best = ("", "?")
        for line in mounts.split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count >= 4 else { continue }
            let point = String(f[1])
            if (p == point || p.hasPrefix(point == "/" ? "/" : point + "/")) && point.count >= best.0.count {
                best = (point, "\(f[2]) (\(f[0]))")
            }
        }
        return best.1
    }
}
