import Glibc
import KeepSyncTestSupport

/// File system helpers on byte paths (Glibc only: names need not be UTF-8).
enum FS {
    static func withCPath<R>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        let c = path.map { CChar(bitPattern: $0) } + [0]
        return try c.withUnsafeBufferPointer { try body($0.baseAddress!) }
    }

    static func check(_ result: Int32, _ call: String, _ path: [UInt8]) throws {
        if result != 0 { throw FSError(call: call, path: path, code: errno) }
    }

    static func mkdir(_ path: [UInt8], mode: mode_t = 0o755) throws {
        try check(withCPath(path) { Glibc.mkdir($0, mode) }, "mkdir", path)
        try chmod(path, mode)
    }

    /// mkdir -p; modes only for the directories it creates.
    static func mkdirs(_ path: [UInt8], mode: mode_t = 0o755) throws {
        if lstat(path) != nil { return }
        let parent = dirname(path)
        if parent != path { try mkdirs(parent, mode: mode) }
        try mkdir(path, mode: mode)
    }

    static func chmod(_ path: [UInt8], _ mode: mode_t) throws {
        try check(withCPath(path) { Glibc.chmod($0, mode) }, "chmod", path)
    }

    /// Creates or truncates a regular file with exactly `content` and `mode`.
    static func writeFile(_ path: [UInt8], _ content: [UInt8], mode: mode_t = 0o644) throws {
        let fd = withCPath(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode) }
        guard fd >= 0 else { throw FSError(call: "open", path: path, code: errno) }
        defer { close(fd) }
        try writeAll(fd, content, path)
        try check(fchmod(fd, mode), "fchmod", path)
    }

    static func writeFile(_ path: [UInt8], _ text: String, mode: mode_t = 0o644) throws {
        try writeFile(path, Array(text.utf8), mode: mode)
    }

    /// Overwrites the start of an existing file in place (same inode, no truncation).
    static func overwrite(_ path: [UInt8], _ content: [UInt8]) throws {
        let fd = withCPath(path) { open($0, O_WRONLY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { throw FSError(call: "open", path: path, code: errno) }
        defer { close(fd) }
        try writeAll(fd, content, path)
    }

    static func append(_ path: [UInt8], _ content: [UInt8]) throws {
        let fd = withCPath(path) { open($0, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { throw FSError(call: "open", path: path, code: errno) }
        defer { close(fd) }
        try writeAll(fd, content, path)
    }

    private static func writeAll(_ fd: Int32, _ content: [UInt8], _ path: [UInt8]) throws {
        var offset = 0
        while offset < content.count {
            let n = content.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw FSError(call: "write", path: path, code: errno)
            }
            offset += n
        }
    }

    static func readFile(_ path: [UInt8]) throws -> [UInt8] {
        let fd = withCPath(path) { open($0, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { throw FSError(call: "open", path: path, code: errno) }
        defer { close(fd) }
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw FSError(call: "read", path: path, code: errno)
            }
            if n == 0 { break }
            result += buffer[0..<n]
        }
        return result
    }

    static func symlink(target: [UInt8], at path: [UInt8]) throws {
        let r = withCPath(target) { t in withCPath(path) { Glibc.symlink(t, $0) } }
        try check(r, "symlink", path)
    }

    static func mkfifo(_ path: [UInt8], mode: mode_t = 0o644) throws {
        try check(withCPath(path) { Glibc.mkfifo($0, mode) }, "mkfifo", path)
    }

    /// Sets atime and mtime (to the nanosecond) without following a link.
    static func setTimes(_ path: [UInt8], seconds: Int, nanoseconds: Int) throws {
        let times = [timespec(tv_sec: seconds, tv_nsec: nanoseconds), timespec(tv_sec: seconds, tv_nsec: nanoseconds)]
        try check(withCPath(path) { utimensat(AT_FDCWD, $0, times, AT_SYMLINK_NOFOLLOW) }, "utimensat", path)
    }

    /// Copies the mtime of one path to another (e.g. to undo a directory mtime change).
    static func copyMtime(from: [UInt8], to: [UInt8]) throws {
        guard let info = lstat(from) else { throw FSError(call: "lstat", path: from, code: ENOENT) }
        try setTimes(to, seconds: info.mtimeSeconds, nanoseconds: info.mtimeNanoseconds)
    }

    static func lstat(_ path: [UInt8]) -> FileInfo? {
        var st = stat()
        guard withCPath(path, { Glibc.lstat($0, &st) }) == 0 else { return nil }
        return info(st)
    }

    static func lstatFollowing(_ path: [UInt8]) -> FileInfo? {
        var st = stat()
        guard withCPath(path, { fstatat(AT_FDCWD, $0, &st, 0) }) == 0 else { return nil }
        return info(st)
    }

    private static func info(_ st: stat) -> FileInfo {
        let kind: FileInfo.Kind
        switch st.st_mode & S_IFMT {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symlink
        case S_IFIFO: kind = .fifo
        default: kind = .other
        }
        return FileInfo(kind: kind, permissions: UInt32(st.st_mode) & 0o7777, size: Int(st.st_size),
                        device: UInt64(st.st_dev), inode: UInt64(st.st_ino),
                        mtimeSeconds: Int(st.st_mtim.tv_sec), mtimeNanoseconds: Int(st.st_mtim.tv_nsec),
                        ctimeSeconds: Int(st.st_ctim.tv_sec), ctimeNanoseconds: Int(st.st_ctim.tv_nsec))
    }

    static func exists(_ path: [UInt8]) -> Bool { lstat(path) != nil }

    static func readlink(_ path: [UInt8]) throws -> [UInt8] {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = withCPath(path) { Glibc.readlink($0, &buffer, buffer.count) }
        guard n >= 0 else { throw FSError(call: "readlink", path: path, code: errno) }
        return buffer[0..<n].map { UInt8(bitPattern: $0) }
    }

    /// The names in a directory (bytes), sorted, without `.` and `..`.
    static func list(_ path: [UInt8]) throws -> [[UInt8]] {
        guard let dir = withCPath(path, { opendir($0) }) else { throw FSError(call: "opendir", path: path, code: errno) }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name: [UInt8] = withUnsafePointer(to: &entry.pointee.d_name) { tuple in
                tuple.withMemoryRebound(to: UInt8.self, capacity: 256) { p in
                    Array(UnsafeBufferPointer(start: p, count: strlen(UnsafeRawPointer(p).assumingMemoryBound(to: CChar.self))))
                }
            }
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            names.append(name)
        }
        return names.sorted { $0.lexicographicallyPrecedes($1) }
    }

    static func rename(_ from: [UInt8], _ to: [UInt8]) throws {
        let r = withCPath(from) { f in withCPath(to) { Glibc.rename(f, $0) } }
        try check(r, "rename", from)
    }

    static func unlink(_ path: [UInt8]) throws {
        try check(withCPath(path) { Glibc.unlink($0) }, "unlink", path)
    }

    static func realpath(_ path: [UInt8]) -> [UInt8] {
        guard let p = withCPath(path, { Glibc.realpath($0, nil) }) else { return path }
        defer { Glibc.free(p) }
        return Array(UnsafeRawBufferPointer(start: p, count: strlen(p)))
    }

    static func dirname(_ path: [UInt8]) -> [UInt8] {
        guard let slash = path.lastIndex(of: 0x2F) else { return Array(".".utf8) }
        return slash == 0 ? [0x2F] : Array(path[..<slash])
    }

    /// Deterministic pseudo-random bytes (xorshift), so that misplaced blocks show.
    static func pattern(count: Int, seed: UInt64) -> [UInt8] {
        var state = seed | 1
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var i = 0
            while i < count {
                state ^= state << 13
                state ^= state >> 7
                state ^= state << 17
                var word = state
                var k = 0
                while k < 8 && i < count {
                    buffer[i] = UInt8(truncatingIfNeeded: word)
                    word >>= 8
                    i += 1
                    k += 1
                }
            }
            initialized = count
        }
    }
}
