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

    /// `posix_spawn` of the program at `argv[0]` with our environment: stdin and stdout on
    /// /dev/null, stderr onto `stderr`. The child's pid.
    static func spawn(_ argv: [String], stderr: FileDescriptor) throws(Errno) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, stderr.rawValue, 2)
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for p in cArgs { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ)
        guard rc == 0 else { throw Errno(rawValue: rc) }
        return pid
    }

    /// `waitpid` until the child ends: its exit status, or 128 + the signal that ended it.
    static func waitForExit(_ pid: pid_t) throws(Errno) -> Int32 {
        var raw: Int32 = 0
        _ = try valueOrErrno { waitpid(pid, &raw, 0) }
        return raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    }

    /// `getpid`.
    static func processID() -> Int32 { getpid() }

    /// `kill(pid, 0)`: true when the process exists, ours to signal or not.
    static func processExists(_ pid: Int32) -> Bool { kill(pid, 0) == 0 || errno == EPERM }

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
