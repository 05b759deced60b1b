import CKeepSyncShims
import Glibc
import KeepSyncCore
import Synchronization

/// Calls `body` with `bytes` as a NUL-terminated C string.
@inline(__always)
func withCPath<R, E: Error>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) throws(E) -> R) throws(E) -> R {
    var z = bytes
    z.append(0)
    return try z.withUnsafeBufferPointer { (buf) throws(E) -> R in
        try buf.withMemoryRebound(to: CChar.self) { (c) throws(E) -> R in try body(c.baseAddress!) }
    }
}

/// Thin syscall wrappers, one per C call, all relative to a directory descriptor.
enum Sys {
    /// `openat`.
    static func open(_ dir: FileDescriptor, _ name: [UInt8], _ flags: Int32, mode: UInt32 = 0) throws(Errno) -> FileDescriptor {
        let fd = try withCPath(name) { (p) throws(Errno) -> Int32 in
            try valueOrErrno { openat(dir.rawValue, p, flags | O_CLOEXEC, mode_t(mode)) }
        }
        return FileDescriptor(rawValue: fd)
    }

    /// `openat2`; throws ENOSYS where the kernel lacks it.
    static func open2(_ dir: FileDescriptor, _ path: [UInt8], _ flags: Int32, resolve: UInt64) throws(Errno) -> FileDescriptor {
        let fd = try withCPath(path) { (p) throws(Errno) -> Int32 in
            try valueOrErrno { ks_openat2(dir.rawValue, p, UInt64(UInt32(bitPattern: flags | O_CLOEXEC)), 0, resolve) }
        }
        return FileDescriptor(rawValue: fd)
    }

    /// `fstatat` without following a final symlink; nil when the name does not exist.
    static func lstat(_ dir: FileDescriptor, _ name: [UInt8]) throws(Errno) -> FileStat? {
        var st = ks_stat()
        do throws(Errno) {
            _ = try withCPath(name) { (p) throws(Errno) -> Int32 in
                try valueOrErrno { ks_statx(dir.rawValue, p, 0, &st) }
            }
        } catch {
            if error == .noSuchFileOrDirectory || error == .notDirectory { return nil }
            throw error
        }
        return FileStat(st)
    }

    /// `lstat` of a name given as bytes followed by a NUL in memory (`forEachEntry`'s
    /// names are): no copy of the name.
    static func lstat(_ dir: FileDescriptor, terminatedName name: UnsafeRawBufferPointer) throws(Errno) -> FileStat? {
        var st = ks_stat()
        do throws(Errno) {
            _ = try valueOrErrno { ks_statx(dir.rawValue, name.baseAddress!.assumingMemoryBound(to: CChar.self), 0, &st) }
        } catch {
            if error == .noSuchFileOrDirectory || error == .notDirectory { return nil }
            throw error
        }
        return FileStat(st)
    }

    /// `readlinkat`.
    static func readLink(_ dir: FileDescriptor, _ name: [UInt8]) throws(Errno) -> [UInt8] {
        let size = Int(PATH_MAX) + 1
        let buf = UnsafeMutablePointer<CChar>.allocate(capacity: size)
        defer { buf.deallocate() }
        let n = try withCPath(name) { (p) throws(Errno) -> Int in
            try valueOrErrno { readlinkat(dir.rawValue, p, buf, size) }
        }
        return Array(UnsafeRawBufferPointer(start: buf, count: n))
    }

    /// `mkdirat`.
    static func makeDirectory(_ dir: FileDescriptor, _ name: [UInt8], mode: UInt32) throws(Errno) {
        _ = try withCPath(name) { (p) throws(Errno) -> Int32 in try valueOrErrno { mkdirat(dir.rawValue, p, mode_t(mode)) } }
    }

    /// `symlinkat`.
    static func makeSymlink(target: [UInt8], _ dir: FileDescriptor, _ name: [UInt8]) throws(Errno) {
        _ = try withCPath(target) { (t) throws(Errno) -> Int32 in
            try withCPath(name) { (p) throws(Errno) -> Int32 in try valueOrErrno { symlinkat(t, dir.rawValue, p) } }
        }
    }

    /// `linkat` without `AT_SYMLINK_FOLLOW` (a symlink is linked itself).
    static func link(_ fromDir: FileDescriptor, _ from: [UInt8], _ toDir: FileDescriptor, _ to: [UInt8]) throws(Errno) {
        _ = try withCPath(from) { (f) throws(Errno) -> Int32 in
            try withCPath(to) { (t) throws(Errno) -> Int32 in
                try valueOrErrno { linkat(fromDir.rawValue, f, toDir.rawValue, t, 0) }
            }
        }
    }

    /// `renameat`.
    static func rename(_ fromDir: FileDescriptor, _ from: [UInt8], _ toDir: FileDescriptor, _ to: [UInt8]) throws(Errno) {
        _ = try withCPath(from) { (f) throws(Errno) -> Int32 in
            try withCPath(to) { (t) throws(Errno) -> Int32 in
                try valueOrErrno { renameat(fromDir.rawValue, f, toDir.rawValue, t) }
            }
        }
    }

    /// `unlinkat`, for a directory when `directory` is true.
    static func unlink(_ dir: FileDescriptor, _ name: [UInt8], directory: Bool) throws(Errno) {
        let flags = directory ? ks_at_removedir() : 0
        _ = try withCPath(name) { (p) throws(Errno) -> Int32 in try valueOrErrno { unlinkat(dir.rawValue, p, flags) } }
    }

    /// `fchmodat` that refuses to follow a symlink.
    static func setMode(_ dir: FileDescriptor, _ name: [UInt8], _ mode: UInt32) throws(Errno) {
        _ = try withCPath(name) { (p) throws(Errno) -> Int32 in
            try valueOrErrno { fchmodat(dir.rawValue, p, mode_t(mode), ks_at_symlink_nofollow()) }
        }
    }

    /// `utimensat` without following symlinks; access time left alone.
    static func setModificationTime(_ dir: FileDescriptor, _ name: [UInt8], _ t: Timespec,
                                    withAccessTime: Bool = false) throws(Errno) {
        var times = [withAccessTime ? timespec(t) : timespec(tv_sec: 0, tv_nsec: ks_utime_omit()), timespec(t)]
        _ = try withCPath(name) { (p) throws(Errno) -> Int32 in
            try valueOrErrno { utimensat(dir.rawValue, p, &times, ks_at_symlink_nofollow()) }
        }
    }

    /// `ioctl(FICLONE)`.
    static func cloneFile(to dest: FileDescriptor, from src: FileDescriptor) throws(Errno) {
        _ = try valueOrErrno { ks_ficlone(dest.rawValue, src.rawValue) }
    }

    /// `copy_file_range` from the current offsets; returns bytes copied (0 at end).
    static func copyRange(from src: FileDescriptor, to dest: FileDescriptor, count: Int) throws(Errno) -> Int {
        try valueOrErrno { ks_copy_file_range(src.rawValue, dest.rawValue, count) }
    }

    /// Names in a directory (without `.` and `..`); the descriptor stays open and owned by the caller.
    static func readDirectory(_ dir: FileDescriptor) throws(Errno) -> [[UInt8]] {
        var names: [[UInt8]] = []
        try forEachEntry(dir) { name, _ in names.append(Array(name)) }
        return names
    }

    /// Calls `body` with each entry's name (followed by a NUL in memory) and `d_type`
    /// (without `.` and `..`), read from
    /// the start with `getdents64` on the descriptor itself: no `dup`, `fdopendir`
    /// (`fstat`, `fcntl`) or `closedir` per directory, which readdir(3) costs. The
    /// descriptor's offset is moved; it stays open and owned by the caller.
    static func forEachEntry(_ dir: FileDescriptor, _ body: (UnsafeRawBufferPointer, UInt8) throws(Errno) -> Void) throws(Errno) {
        _ = try valueOrErrno { lseek(dir.rawValue, 0, SEEK_SET) }
        try withUnsafeTemporaryAllocation(byteCount: 32_768, alignment: 8) { (buffer) throws(Errno) in
            while true {
                let n = ks_getdents64(dir.rawValue, buffer.baseAddress!, buffer.count)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw Errno.current
                }
                if n == 0 { return }
                // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
                var offset = 0
                while offset < n {
                    let record = buffer.baseAddress! + offset
                    let length = Int(record.loadUnaligned(fromByteOffset: 16, as: UInt16.self))
                    let type = record.load(fromByteOffset: 18, as: UInt8.self)
                    let name = UnsafeRawBufferPointer(start: record + 19, count: strnlen(record + 19, length - 19))
                    offset += length
                    if name.count <= 2, name.allSatisfy({ $0 == 0x2E }) { continue }
                    try body(name, type)
                }
            }
        }
    }

    /// `realpath` of an absolute or relative path.
    static func realPath(_ path: [UInt8]) throws(Errno) -> [UInt8] {
        let result = withCPath(path) { p in Glibc.realpath(p, nil) }
        guard let result else { throw Errno.current }
        defer { free(result) }
        return Array(UnsafeRawBufferPointer(start: result, count: strlen(result)))
    }

    /// 16 hex digits for a temp name: a random base per process, stepped by a counter
    /// (unique here; O_EXCL settles a clash with another process). No syscall per name.
    static func randomHex16() -> [UInt8] {
        let n = temporaryCounter.add(1, ordering: .relaxed).newValue
        var v = temporaryBase &+ n &* 0x9E37_79B9_7F4A_7C15
        v = (v ^ (v >> 31)) &* 0xBF58_476D_1CE4_E5B9
        v ^= v >> 29
        let hex = Array("0123456789abcdef".utf8)
        return (0..<16).map { i in hex[Int((v >> (UInt64(15 - i) * 4)) & 0xF)] }
    }

    static let temporaryBase: UInt64 = {
        var g = SystemRandomNumberGenerator()
        return g.next()
    }()
    static let temporaryCounter = Atomic<UInt64>(0)

    /// `statx` of `path` below `dir` (intermediate symlinks followed, the last one not).
    static func lstatPath(_ dir: FileDescriptor, _ path: [UInt8]) throws(Errno) -> FileStat? {
        try lstat(dir, path)
    }
}

extension Sys {
    /// Names in the directory at an absolute path.
    static func readDirectoryPath(_ path: [UInt8]) throws(Errno) -> [[UInt8]] {
        let fd = try open(.currentDirectory, path, O_RDONLY | O_DIRECTORY)
        defer { fd.close() }
        return try readDirectory(fd)
    }
}

extension Sys {
    /// Raises the soft limit on open descriptors to the hard limit (at most 65,536): staged
    /// copies keep their directories open until their rename (one descriptor a directory,
    /// up to five groups of 256 files in flight), and each group stages its 256 sources at once.
    static func raiseOpenFileLimit() {
        var limit = rlimit()
        guard getrlimit(RLIMIT_NOFILE_VALUE, &limit) == 0 else { return }
        let wanted = min(limit.rlim_max, 65_536)
        guard limit.rlim_cur < wanted else { return }
        limit.rlim_cur = wanted
        _ = setrlimit(RLIMIT_NOFILE_VALUE, &limit)
    }

    private static var RLIMIT_NOFILE_VALUE: __rlimit_resource_t { __rlimit_resource_t(RLIMIT_NOFILE.rawValue) }
}
