#if canImport(Glibc)
import Glibc
#endif

/// Fresh directories for tests that touch the disk, and their removal. Paths are bytes.
public enum ScratchDirectory {
    /// A call that failed, with its errno.
    public struct Failure: Error, CustomStringConvertible {
        /// The call that failed.
        public let call: String
        /// The path it was given.
        public let path: [UInt8]
        /// Its errno.
        public let code: Int32

        /// `call path: strerror`.
        public var description: String {
            "\(call) \(String(decoding: path, as: UTF8.self)): \(String(cString: strerror(code)))"
        }
    }

    /// A new empty directory `base/prefix-XXXXXX` made by `mkdtemp`.
    public static func make(prefix: String, in base: String = "/tmp") throws -> [UInt8] {
        var template = Array("\(base)/\(prefix)-XXXXXX".utf8) + [0]
        let made = template.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { mkdtemp($0.baseAddress!) != nil }
        }
        guard made else { throw Failure(call: "mkdtemp", path: Array(base.utf8), code: errno) }
        return Array(template.dropLast())
    }

    /// `rm -rf`, never following links, descriptor-relative (deep and long paths work);
    /// a directory without rwx for its owner gets it first. Nothing there is not an error.
    public static func removeTree(_ path: [UInt8]) throws {
        var info = stat()
        guard withCString(path, { lstat($0, &info) }) == 0 else {
            if errno == ENOENT { return }
            throw Failure(call: "lstat", path: path, code: errno)
        }
        if info.st_mode & S_IFMT != S_IFDIR {
            try check(withCString(path) { unlink($0) }, "unlink", path)
            return
        }
        let fd = withCString(path) { open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { throw Failure(call: "open", path: path, code: errno) }
        defer { close(fd) }
        try removeContents(fd, path)
        try check(withCString(path) { rmdir($0) }, "rmdir", path)
    }

    /// Removes everything in the directory open at `dirfd` (`path`, for messages).
    private static func removeContents(_ dirfd: Int32, _ path: [UInt8]) throws {
        var info = stat()
        try check(fstat(dirfd, &info), "fstat", path)
        if info.st_mode & 0o700 != 0o700 { try check(fchmod(dirfd, 0o700), "fchmod", path) }
        for name in try names(dirfd, path) {
            let child = path + [0x2F] + name
            let sub = withCString(name) { openat(dirfd, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            if sub >= 0 {
                defer { close(sub) }
                try removeContents(sub, child)
                try check(withCString(name) { unlinkat(dirfd, $0, AT_REMOVEDIR) }, "rmdir", child)
            } else {
                try check(withCString(name) { unlinkat(dirfd, $0, 0) }, "unlink", child)
            }
        }
    }

    /// The names in the directory open at `dirfd` (the descriptor stays open).
    private static func names(_ dirfd: Int32, _ path: [UInt8]) throws -> [[UInt8]] {
        let copy = dup(dirfd)
        guard copy >= 0 else { throw Failure(call: "dup", path: path, code: errno) }
        guard let dir = fdopendir(copy) else {
            let code = errno
            close(copy)
            throw Failure(call: "fdopendir", path: path, code: code)
        }
        defer { closedir(dir) }
        var out: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name: [UInt8] = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name != [0x2E] && name != [0x2E, 0x2E] { out.append(name) }
        }
        return out
    }

    private static func check(_ result: Int32, _ call: String, _ path: [UInt8]) throws {
        if result != 0 { throw Failure(call: call, path: path, code: errno) }
    }

    private static func withCString<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
        (bytes.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
