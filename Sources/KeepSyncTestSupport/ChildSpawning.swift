#if canImport(Glibc)
import Glibc
#endif
import KeepSyncCore

/// What every test that spawns a child repeats: C strings for argv and envp, the spawn
/// attributes a child needs, and reaping. Arguments and environment are bytes.
public enum ChildSpawning {
    /// NUL-terminated copies of `list`, then nil, as `posix_spawn` takes them; pass to `release`.
    public static func cStrings(_ list: [[UInt8]]) -> [UnsafeMutablePointer<CChar>?] {
        list.map { bytes in
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            for (i, b) in bytes.enumerated() { p[i] = CChar(bitPattern: b) }
            p[bytes.count] = 0
            return p
        } + [nil]
    }

    /// `KEY=value` strings of `environment`, sorted by key, as `cStrings`.
    public static func environmentStrings(_ environment: [String: String]) -> [UnsafeMutablePointer<CChar>?] {
        cStrings(environment.sorted { $0.key < $1.key }.map { Array("\($0.key)=\($0.value)".utf8) })
    }

    /// Frees what `cStrings` made.
    public static func release(_ list: [UnsafeMutablePointer<CChar>?]) {
        for p in list { p?.deallocate() }
    }

    /// `posix_spawn_file_actions_addclosefrom_np` (glibc >= 2.34; Swift's Glibc module does
    /// not import the _np declaration): descriptors other tests are creating right now must
    /// not leak into a long-lived child.
    public typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    /// The function, where glibc has it.
    public static let addCloseFrom: AddCloseFrom? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
    }()

    /// The child must not inherit the test runner's signal mask or ignored signals
    /// (strace would never see the SIGTERM that detaches it); returns the spawn flags.
    public static func resetSignals(_ attributes: inout posix_spawnattr_t) -> Int32 {
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGPIPE, SIGQUIT] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        return Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
    }

    /// `posix_spawn` of `argv` (`argv[0]` an absolute path) with `environment`, signals
    /// reset (`resetSignals`) and no descriptor above 2 inherited: `fileActions` sets up
    /// 0, 1 and 2; `flags` are added to the spawn flags. The child's pid.
    public static func spawn(_ argv: [[UInt8]], environment: [String: String], flags: Int32 = 0,
                             fileActions: (inout posix_spawn_file_actions_t) -> Void) throws(Failure) -> pid_t {
        let cArgs = cStrings(argv)
        let cEnv = environmentStrings(environment)
        defer {
            release(cArgs)
            release(cEnv)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        fileActions(&actions)
        // Descriptors other tests are creating right now must not leak into this child.
        if let closeFrom = addCloseFrom { _ = closeFrom(&actions, 3) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(resetSignals(&attributes) | flags))
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, cArgs[0]!, &actions, &attributes, cArgs, cEnv)
        guard rc == 0 else { throw Failure(description: "posix_spawn \(ByteEscaping.escape(argv.first ?? [])): errno \(rc)") }
        return pid
    }

    /// An exit status from a `waitpid` status: the code, or 128 + the signal that ended it.
    public static func exitStatus(_ waitStatus: Int32) -> Int32 {
        waitStatus & 0x7f == 0 ? (waitStatus >> 8) & 0xff : 128 + (waitStatus & 0x7f)
    }

    /// `waitpid` until `pid` ends: its exit status.
    public static func reap(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return exitStatus(status)
    }

    /// `waitpid(WNOHANG)`: the exit status once `pid` ended, nil while it runs.
    public static func poll(_ pid: pid_t) -> Int32? {
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
        return exitStatus(status)
    }
}
