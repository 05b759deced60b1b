import Glibc
import KeepSyncCore

/// The calls the inotify watcher needs: the inotify instance, `poll`, a wake pipe and a
/// typed directory listing. Thin wrappers, no policy.
enum Inotify {
    /// One parsed `struct inotify_event`.
    struct Event: Equatable, Sendable {
        /// The watch descriptor; -1 for a queue overflow.
        var wd: Int32
        /// The `IN_*` bits.
        var mask: UInt32
        /// Pairs a MOVED_FROM with its MOVED_TO; 0 otherwise.
        var cookie: UInt32
        /// The entry's name with the NUL padding trimmed; empty for events on the directory itself.
        var name: [UInt8]

        /// True when any bit of `bits` is set.
        func has(_ bits: UInt32) -> Bool { mask & bits != 0 }
    }

    /// One directory entry and whether it is a directory (never following a symlink).
    struct Entry: Sendable {
        /// The name bytes.
        var name: [UInt8]
        /// True for a directory.
        var isDirectory: Bool
    }

    /// Size of the read buffer: many events per read, and at least 16 + NAME_MAX + 1.
    static let bufferSize = 64 * 1024

    // The `IN_*` bits, as the `UInt32` masks the calls and events use.
    static let create = UInt32(IN_CREATE)
    static let delete = UInt32(IN_DELETE)
    static let modify = UInt32(IN_MODIFY)
    static let attrib = UInt32(IN_ATTRIB)
    static let closeWrite = UInt32(IN_CLOSE_WRITE)
    static let movedFrom = UInt32(IN_MOVED_FROM)
    static let movedTo = UInt32(IN_MOVED_TO)
    static let deleteSelf = UInt32(IN_DELETE_SELF)
    static let moveSelf = UInt32(IN_MOVE_SELF)
    static let unmount = UInt32(IN_UNMOUNT)
    static let overflow = UInt32(IN_Q_OVERFLOW)
    static let ignored = UInt32(IN_IGNORED)
    static let isDirectory = UInt32(IN_ISDIR)
    static let onlyDirectory = UInt32(IN_ONLYDIR)
    static let dontFollow = UInt32(IN_DONT_FOLLOW)
    static let excludeUnlinked = UInt32(IN_EXCL_UNLINK)

    /// `inotify_init1(IN_NONBLOCK | IN_CLOEXEC)`.
    static func initialize() throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) })
    }

    /// `inotify_add_watch` on `path` (absolute, or `/proc/self/fd/N`); returns the watch descriptor.
    static func addWatch(_ inotify: FileDescriptor, path: [UInt8], mask: UInt32) throws(Errno) -> Int32 {
        try withCPath(path) { (p) throws(Errno) -> Int32 in
            try valueOrErrno { inotify_add_watch(inotify.rawValue, p, mask) }
        }
    }

    /// The `/proc/self/fd/N` path naming an open descriptor.
    static func procPath(_ fd: FileDescriptor) -> [UInt8] {
        Array("/proc/self/fd/\(fd.rawValue)".utf8)
    }

    /// True when `/proc/self/fd` is available.
    static var hasProcFileDescriptors: Bool {
        withCPath(Array("/proc/self/fd".utf8)) { access($0, F_OK) == 0 }
    }

    /// The current `fs.inotify.max_user_watches`, when readable.
    static func maxUserWatches() -> Int? {
        guard let fd = try? Sys.open(.currentDirectory, Array("/proc/sys/fs/inotify/max_user_watches".utf8), O_RDONLY) else {
            return nil
        }
        defer { fd.close() }
        guard let bytes = try? fd.readAll() else { return nil }
        return Int(String(decoding: bytes.filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
    }

    /// `inotify_rm_watch`; errors (a watch already gone) are ignored.
    static func removeWatch(_ inotify: FileDescriptor, _ wd: Int32) {
        _ = inotify_rm_watch(inotify.rawValue, wd)
    }

    /// Reads and parses one batch of events into `buffer`'s storage; nil when none are queued.
    /// A truncated record (which the kernel never produces) throws EIO.
    static func read(_ inotify: FileDescriptor, buffer: inout [UInt8]) throws(Errno) -> [Event]? {
        if buffer.count < bufferSize { buffer = [UInt8](repeating: 0, count: bufferSize) }
        var failure: Errno?
        var events: [Event]?
        buffer.withUnsafeMutableBytes { raw in
            let count: Int
            do throws(Errno) {
                count = try valueOrErrno { Glibc.read(inotify.rawValue, raw.baseAddress, raw.count) }
            } catch {
                if error != .wouldBlock { failure = error }
                return
            }
            guard let parsed = parse(UnsafeRawBufferPointer(rebasing: raw[..<count])) else {
                failure = Errno(rawValue: EIO)
                return
            }
            events = parsed
        }
        if let failure { throw failure }
        return events
    }

    /// Parses `struct inotify_event` records; nil when a record runs past the end.
    private static func parse(_ bytes: UnsafeRawBufferPointer) -> [Event]? {
        var events: [Event] = []
        var offset = 0
        while offset < bytes.count {
            guard offset + 16 <= bytes.count else { return nil }
            let wd = bytes.loadUnaligned(fromByteOffset: offset, as: Int32.self)
            let mask = bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
            let cookie = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
            let length = Int(bytes.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
            let start = offset + 16
            guard start + length <= bytes.count else { return nil }
            var end = start
            while end < start + length, bytes[end] != 0 { end += 1 }
            events.append(Event(wd: wd, mask: mask, cookie: cookie, name: Array(bytes[start..<end])))
            offset = start + length
        }
        return events
    }

    /// `poll` for input on two descriptors; EINTR reads as "nothing ready". A closed or
    /// invalid descriptor throws EBADF.
    static func poll(_ first: FileDescriptor, _ second: FileDescriptor, timeoutMilliseconds: Int32) throws(Errno) -> (first: Bool, second: Bool) {
        var fds = [pollfd(fd: first.rawValue, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: second.rawValue, events: Int16(POLLIN), revents: 0)]
        let ready = fds.withUnsafeMutableBufferPointer { Glibc.poll($0.baseAddress, 2, timeoutMilliseconds) }
        if ready < 0 {
            let e = Errno.current
            if e == .interrupted { return (false, false) }
            throw e
        }
        let invalid = Int16(POLLNVAL)
        if fds[0].revents & invalid != 0 || fds[1].revents & invalid != 0 { throw Errno(rawValue: EBADF) }
        let input = Int16(POLLIN | POLLERR | POLLHUP)
        return (fds[0].revents & input != 0, fds[1].revents & input != 0)
    }

    /// A pipe whose ends are close-on-exec (`Sys.pipe`, from the start) and non-blocking.
    static func makePipe() throws(Errno) -> (read: FileDescriptor, write: FileDescriptor) {
        let pair = try Sys.pipe()
        do throws(Errno) {
            for fd in [pair.read, pair.write] {
                let flags = try valueOrErrno { fcntl(fd.rawValue, F_GETFL) }
                _ = try valueOrErrno { fcntl(fd.rawValue, F_SETFL, flags | O_NONBLOCK) }
            }
        } catch {
            pair.read.close()
            pair.write.close()
            throw error
        }
        return pair
    }

    /// Blocks the calling thread for `milliseconds` (the watcher thread, when `poll` itself
    /// fails and so cannot be the wait).
    static func pause(milliseconds: UInt32) {
        usleep(milliseconds * 1000)
    }

    /// Writes one byte to a wake pipe; a full pipe is already awake, so errors are ignored.
    static func wake(_ fd: FileDescriptor) {
        var byte: UInt8 = 1
        _ = Glibc.write(fd.rawValue, &byte, 1)
    }

    /// The entries of an open directory (without `.` and `..`), typed from `d_type`, or by
    /// `fstatat(AT_SYMLINK_NOFOLLOW)` where the file system does not fill it in. The
    /// descriptor stays open and owned by the caller.
    static func entries(_ dir: FileDescriptor) throws(Errno) -> [Entry] {
        var result: [Entry] = []
        try Sys.forEachEntry(dir) { (raw, type) throws(Errno) in
            let name = Array(raw)
            var isDirectory = Int(type) == DT_DIR
            if Int(type) == DT_UNKNOWN {
                isDirectory = (try? Sys.lstat(dir, name))??.kind == .directory
            }
            result.append(Entry(name: name, isDirectory: isDirectory))
        }
        return result
    }
}
