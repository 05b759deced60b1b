import CKeepSyncShims
import Glibc

/// The process's own facts and settings: argv, environ, its PID, the user's home
/// directory, the terminal, signal dispositions, malloc arenas.
enum ProcessEnvironment {
    /// argv without argv[0], as raw bytes: argv need not be UTF-8.
    static func arguments() -> [[UInt8]] {
        (1..<Int(CommandLine.argc)).compactMap { i in
            CommandLine.unsafeArgv[i].map { Array(UnsafeRawBufferPointer(start: $0, count: strlen($0))) }
        }
    }

    /// `environ` (later entries of a repeated name win).
    static func variables() -> [String: String] {
        var env: [String: String] = [:]
        var i = 0
        while let entry = environ[i] {
            let text = String(cString: entry)
            if let eq = text.firstIndex(of: "=") { env[String(text[..<eq])] = String(text[text.index(after: eq)...]) }
            i += 1
        }
        return env
    }

    /// `getpid`.
    static var processID: Int32 { getpid() }

    /// The home directory `getpwuid(getuid())` names, if any.
    static func passwordHome() -> [UInt8]? {
        guard let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir else { return nil }
        return Array(String(cString: dir).utf8)
    }

    /// `isatty`.
    static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) == 1 }

    /// `signal(number, SIG_IGN)`.
    static func ignoreSignal(_ number: Int32) { signal(number, SIG_IGN) }

    /// `mallopt(M_ARENA_MAX, count)`.
    static func limitMallocArenas(_ count: Int32) { _ = ks_mallopt_arena_max(count) }

    /// `malloc_trim(0)`: returns freed heap pages to the system.
    static func releaseFreedMemory() { _ = ks_malloc_trim() }

    /// `exit`.
    static func exit(_ code: Int32) -> Never { Glibc.exit(code) }

    /// `readlink("/proc/self/exe")`: the running binary's absolute path.
    static func executablePath() -> [UInt8]? {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        guard n > 0 else { return nil }
        return buf[..<n].map { UInt8(bitPattern: $0) }
    }

    /// `CLOCK_MONOTONIC` in microseconds (sd_notify's `MONOTONIC_USEC=`).
    static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }
}
