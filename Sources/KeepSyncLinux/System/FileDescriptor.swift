import CKeepSyncShims
import Glibc
import KeepSyncCore

/// An owned or borrowed file descriptor; `close` is never retried.
struct FileDescriptor: Sendable, Hashable {
    /// The raw descriptor.
    var rawValue: Int32

    /// The current directory, for calls that take a dirfd.
    static let currentDirectory = FileDescriptor(rawValue: AT_FDCWD)
    /// Standard output.
    static let standardOutput = FileDescriptor(rawValue: 1)
    /// Standard error.
    static let standardError = FileDescriptor(rawValue: 2)

    /// Closes the descriptor, ignoring errors (never retried).
    func close() { _ = Glibc.close(rawValue) }

    /// `fstat`.
    func stat() throws(Errno) -> FileStat {
        var st = ks_stat()
        _ = try valueOrErrno { ks_statx(rawValue, "", 1, &st) }
        return FileStat(st)
    }

    /// `fstatfs`'s file system type (`f_type`, a magic number).
    func fileSystemType() throws(Errno) -> Int {
        var type: Int64 = 0
        _ = try valueOrErrno { ks_fs_type(rawValue, &type) }
        return Int(type)
    }

    /// `ioctl(FS_IOC_GETVERSION)`: the inode generation (ENOTTY where the file system has none).
    func generation() throws(Errno) -> UInt32 {
        var value: UInt64 = 0
        _ = try valueOrErrno { ks_getversion(rawValue, &value) }
        return UInt32(truncatingIfNeeded: value)
    }

    /// `fsync`.
    func sync() throws(Errno) { _ = try valueOrErrno { fsync(rawValue) } }

    /// Asks the kernel to start reading the first `count` bytes in the background
    /// (`POSIX_FADV_WILLNEED`); a hint, so a failure is ignored.
    func willRead(_ count: Int) { _ = posix_fadvise(rawValue, 0, off_t(count), POSIX_FADV_WILLNEED) }

    /// `syncfs` of the file system holding this descriptor.
    func syncFileSystem() throws(Errno) { _ = try valueOrErrno { ks_syncfs(rawValue) } }

    /// Reads into a buffer; 0 at end of file.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
    }

    /// Copies from the current offsets to the end by `read` and `write` through one 1 MiB
    /// buffer (for where `copy_file_range` cannot); a failure names its call.
    func copyToEnd(to dest: FileDescriptor) throws(FailedCall) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
        defer { buffer.deallocate() }
        while true {
            let n: Int
            do throws(Errno) { n = try read(into: buffer) } catch { throw FailedCall(call: "read", errno: error) }
            if n == 0 { return }
            do throws(Errno) { try dest.writeAll(UnsafeRawBufferPointer(rebasing: buffer[..<n])) } catch {
                throw FailedCall(call: "write", errno: error)
            }
        }
    }

    /// Reads up to `count` bytes.
    func read(upTo count: Int) throws(Errno) -> [UInt8] {
        let buf = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        defer { buf.deallocate() }
        let n = try read(into: buf)
        return Array(buf[..<n])
    }

    /// `pread` of `count` bytes at `offset` (the file offset does not move).
    func read(at offset: UInt64, count: Int) throws(Errno) -> [UInt8] {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(count, 1), alignment: 16)
        defer { buffer.deallocate() }
        let n = try valueOrErrno(retryOnInterrupt: true) { pread(rawValue, buffer.baseAddress, count, off_t(offset)) }
        return Array(buffer[..<n])
    }

    /// Reads `count` bytes, fewer only at the end of the file.
    func read(exactly count: Int) throws(Errno) -> [UInt8] {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(count, 1), alignment: 16)
        defer { buffer.deallocate() }
        var done = 0
        while done < count {
            let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<count]))
            if n == 0 { break }
            done += n
        }
        return Array(buffer[..<done])
    }

    /// Reads the whole file from the current offset.
    func readAll() throws(Errno) -> [UInt8] {
        var result: [UInt8] = []
        while true {
            let chunk = try read(upTo: 1 << 16)
            if chunk.isEmpty { return result }
            result.append(contentsOf: chunk)
        }
    }

    /// Writes all bytes, handling short writes.
    func writeAll(_ bytes: UnsafeRawBufferPointer) throws(Errno) {
        var offset = 0
        while offset < bytes.count {
            let n = try valueOrErrno { Glibc.write(rawValue, bytes.baseAddress! + offset, bytes.count - offset) }
            offset += n
        }
    }

    /// Writes all bytes of an array.
    func writeAll(_ bytes: [UInt8]) throws(Errno) {
        var failure: Errno?
        bytes.withUnsafeBytes { buf in
            do throws(Errno) { try writeAll(buf) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// `ftruncate`.
    func truncate(_ size: UInt64) throws(Errno) { _ = try valueOrErrno { ftruncate(rawValue, off_t(size)) } }

    /// Moves the offset to the end; returns it.
    /// `lseek` to `offset` from the start.
    func seek(to offset: UInt64) throws(Errno) { _ = try valueOrErrno { lseek(rawValue, off_t(offset), SEEK_SET) } }

    /// `pwrite` of all of `bytes` at `offset` (the file offset does not move).
    func write(_ bytes: [UInt8], at offset: UInt64) throws(Errno) {
        var failure: Errno?
        bytes.withUnsafeBytes { buf in
            var done = 0
            while done < buf.count {
                do throws(Errno) {
                    done += try valueOrErrno { pwrite(rawValue, buf.baseAddress! + done, buf.count - done, off_t(offset) + off_t(done)) }
                } catch {
                    failure = error
                    return
                }
            }
        }
        if let failure { throw failure }
    }

    @discardableResult
    func seekToEnd() throws(Errno) -> UInt64 { UInt64(try valueOrErrno { lseek(rawValue, 0, SEEK_END) }) }

    /// `fchmod`.
    func setMode(_ mode: UInt32) throws(Errno) { _ = try valueOrErrno { fchmod(rawValue, mode_t(mode)) } }

    /// `futimens` with the given modification time; access time left alone, or set to the
    /// same time with `withAccessTime` (a FUSE server may take a lone mtime as "now").
    func setModificationTime(_ t: Timespec, withAccessTime: Bool = false) throws(Errno) {
        var times = [withAccessTime ? timespec(t) : timespec(tv_sec: 0, tv_nsec: ks_utime_omit()), timespec(t)]
        _ = try valueOrErrno { futimens(rawValue, &times) }
    }

    /// `flock(LOCK_EX|LOCK_NB)`; false when another process holds it.
    func tryLockExclusive() throws(Errno) -> Bool {
        do throws(Errno) {
            _ = try valueOrErrno { ks_flock(rawValue, ks_lock_ex_nb()) }
            return true
        } catch {
            if error == .wouldBlock { return false }
            throw error
        }
    }
}

extension FileStat {
    /// Converts the shim's flattened statx.
    init(_ st: ks_stat) {
        let fmt = mode_t(st.mode) & S_IFMT
        let kind: FileKind
        switch fmt {
        case S_IFREG: kind = .regular
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symlink
        default: kind = .special
        }
        self.init(kind: kind, mode: st.mode & 0o7777, size: st.size,
                  mtime: Timespec(seconds: st.mtime_sec, nanoseconds: Int64(st.mtime_nsec)),
                  ctime: Timespec(seconds: st.ctime_sec, nanoseconds: Int64(st.ctime_nsec)),
                  device: st.dev, inode: st.ino,
                  birthTime: st.has_btime != 0 ? Timespec(seconds: st.btime_sec, nanoseconds: Int64(st.btime_nsec)) : nil)
        links = st.nlink
    }
}

extension timespec {
    /// From a keepsync timestamp.
    init(_ t: Timespec) { self.init(tv_sec: Int(t.seconds), tv_nsec: Int(t.nanoseconds)) }
}
