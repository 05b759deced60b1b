import Glibc

/// Byte-path file operations for the benchmark (names need not be UTF-8).
enum Paths {
    static func join(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] { a.isEmpty ? b : a + [0x2F] + b }
    static func join(_ a: [UInt8], _ b: String) -> [UInt8] { join(a, Array(b.utf8)) }

    static func display(_ p: [UInt8]) -> String { String(decoding: p, as: UTF8.self) }

    static func with<R>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        try (path + [0]).withUnsafeBufferPointer { try $0.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) } }
    }

    static func check(_ rc: Int32, _ call: String, _ path: [UInt8]) throws {
        if rc != 0 { throw BenchError("\(call) \(display(path)): \(String(cString: strerror(errno)))") }
    }

    static func mkdir(_ path: [UInt8], mode: mode_t = 0o755) throws {
        let rc = with(path) { Glibc.mkdir($0, mode) }
        if rc != 0 && errno != EEXIST { try check(rc, "mkdir", path) }
    }

    static func mkdirs(_ path: [UInt8]) throws {
        var prefix: [UInt8] = []
        for (i, part) in path.split(separator: 0x2F, omittingEmptySubsequences: false).enumerated() {
            prefix += (i == 0 ? [] : [0x2F]) + part
            if !prefix.isEmpty && prefix != [0x2F] { try mkdir(prefix) }
        }
    }

    /// Creates (or truncates) a file, writes `bytes`, closes it.
    static func write(_ path: [UInt8], _ bytes: UnsafeRawBufferPointer, mode: mode_t = 0o644) throws {
        let fd = with(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) }
        guard fd >= 0 else { throw BenchError("open \(display(path)): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError("write \(display(path)): \(String(cString: strerror(errno)))")
            }
            done += n
        }
    }

    static func write(_ path: [UInt8], _ bytes: [UInt8], mode: mode_t = 0o644) throws {
        try bytes.withUnsafeBytes { try write(path, $0, mode: mode) }
    }

    static func symlink(_ target: [UInt8], at path: [UInt8]) throws {
        try check(with(target) { t in with(path) { Glibc.symlink(t, $0) } }, "symlink", path)
    }

    static func setTimes(_ path: [UInt8], seconds: Int, nanoseconds: Int, follow: Bool = true) throws {
        var times = [timespec(tv_sec: seconds, tv_nsec: nanoseconds), timespec(tv_sec: seconds, tv_nsec: nanoseconds)]
        let rc = with(path) { utimensat(AT_FDCWD, $0, &times, follow ? 0 : AT_SYMLINK_NOFOLLOW) }
        try check(rc, "utimensat", path)
    }

    static func lstat(_ path: [UInt8]) -> stat? {
        var st = stat()
        return with(path) { Glibc.lstat($0, &st) } == 0 ? st : nil
    }

    static func exists(_ path: [UInt8]) -> Bool { lstat(path) != nil }

    static func readlink(_ path: [UInt8]) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 4097)
        let n = with(path) { p in buffer.withUnsafeMutableBufferPointer { Glibc.readlink(p, UnsafeMutableRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 4096) } }
        return n < 0 ? nil : Array(buffer[..<n])
    }

    /// Entry names of a directory, `.` and `..` left out.
    static func list(_ path: [UInt8]) throws -> [[UInt8]] {
        guard let dir = with(path, { opendir($0) }) else {
            throw BenchError("opendir \(display(path)): \(String(cString: strerror(errno)))")
        }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name != [0x2E] && name != [0x2E, 0x2E] { names.append(name) }
        }
        return names
    }

    /// `rm -rf`.
    static func remove(_ path: [UInt8]) {
        _ = try? Spawn.run([Array("/bin/rm".utf8), Array("-rf".utf8), path], quiet: true)
    }

    /// `rm -rf`, one `rm` per entry of `path` at once: a cold tree's removal waits on
    /// reads, and two at once took as long as one (120k inodes each, 18 s).
    static func removeInParallel(_ path: [UInt8]) {
        let removals = ((try? list(path)) ?? []).compactMap {
            try? Spawn([Array("/bin/rm".utf8), Array("-rf".utf8), join(path, $0)])
        }
        for r in removals { r.wait() }
        remove(path)
    }

    static func readAll(_ fd: Int32, into buffer: inout [UInt8]) -> Int {
        var total = 0
        while true {
            if total == buffer.count { buffer += [UInt8](repeating: 0, count: max(buffer.count, 1 << 16)) }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return total }
            total += n
        }
    }
}

/// A benchmark failure, one line.
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ text: String) { description = text }
}

/// Unbuffered output.
enum FileHandleOut {
    static func line(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        bytes.withUnsafeBytes { _ = Glibc.write(1, $0.baseAddress, $0.count) }
    }

    static func error(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        bytes.withUnsafeBytes { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
