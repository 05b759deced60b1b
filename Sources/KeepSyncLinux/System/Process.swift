import CKeepSyncShims
import Glibc

/// Processes, terminals and the clock: the calls the command layer makes outside a tree.
extension Sys {
    /// `pipe2(O_CLOEXEC)`: both ends close-on-exec from the start, so that a child spawned
    /// meanwhile by another thread (an ssh master that stays) never holds a copy.
    static func pipe() throws(Errno) -> (read: FileDescriptor, write: FileDescriptor) {
        var fds: [Int32] = [-1, -1]
        _ = try valueOrErrno { ks_pipe_cloexec(&fds) }
        return (FileDescriptor(rawValue: fds[0]), FileDescriptor(rawValue: fds[1]))
    }

    /// `getpid`.
    static func processID() -> Int32 { getpid() }

    /// `kill(pid, 0)`: true when the process exists, ours to signal or not.
    static func processExists(_ pid: Int32) -> Bool { kill(pid, 0) == 0 || errno == EPERM }

    /// `kill(pid, 0) == 0`: the process exists and is ours to signal.
    static func canSignal(_ pid: Int32) -> Bool { kill(pid, 0) == 0 }

    /// `kill(pid, signal)`, best effort.
    static func send(_ signal: Int32, to pid: Int32) { _ = kill(pid, signal) }

    /// `mkdtemp` of `prefix` + 6 random characters (mode 0700); its path.
    static func makeTemporaryDirectory(_ prefix: [UInt8]) throws(Errno) -> [UInt8] {
        var template = (prefix + Array("XXXXXX".utf8)).map { CChar(bitPattern: $0) } + [0]
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { throw Errno.current }
        return template.dropLast().map { UInt8(bitPattern: $0) }
    }

    /// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
    static func threadCPUTime() -> Duration {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return .seconds(ts.tv_sec) + .nanoseconds(ts.tv_nsec)
    }

    /// `usleep`.
    static func sleep(microseconds: UInt32) { _ = usleep(microseconds) }

    /// `isatty`.
    static func isTerminal(_ fd: FileDescriptor) -> Bool { isatty(fd.rawValue) == 1 }

    /// `getcwd`; nil when it cannot be had (the directory was removed).
    static func currentDirectory() -> [UInt8]? {
        guard let p = getcwd(nil, 0) else { return nil }
        defer { free(p) }
        return Array(UnsafeRawBufferPointer(start: p, count: strlen(p)))
    }

    /// The wall-clock time broken down, in local time or UTC (`localtime_r`, `gmtime_r`).
    static func calendarTime(utc: Bool) -> CalendarTime {
        var now = time(nil)
        var parts = tm()
        if utc { gmtime_r(&now, &parts) } else { localtime_r(&now, &parts) }
        return CalendarTime(year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday),
                            hour: Int(parts.tm_hour), minute: Int(parts.tm_min), second: Int(parts.tm_sec))
    }
}

/// A moment as a calendar shows it.
struct CalendarTime: Equatable {
    /// The year, e.g. 2026.
    var year: Int
    /// 1 ... 12.
    var month: Int
    /// 1 ... 31.
    var day: Int
    /// 0 ... 23.
    var hour: Int
    /// 0 ... 59.
    var minute: Int
    /// 0 ... 60.
    var second: Int
}
