import KeepSyncCore

/// The process as the executable sees it: its arguments and environment as they came,
/// the limits it runs under, its exit.
public enum LinuxProcess {
    /// argv without argv[0], as raw bytes: argv need not be UTF-8.
    public static var arguments: [[UInt8]] { ProcessEnvironment.arguments() }

    /// The environment (later entries of a repeated name win).
    public static var environment: [String: String] { ProcessEnvironment.variables() }

    /// Sets the process up for a long run: two malloc arenas (copy and scan threads would
    /// each get one of their own; two are plenty and keep the resident set small) and the
    /// open-file limit raised towards its hard limit.
    public static func prepare() {
        ProcessEnvironment.limitMallocArenas(2)
        Sys.raiseOpenFileLimit()
    }

    /// The user's home: `HOME`, else the password database's, else `/`.
    public static func home(environment: [String: String]) -> [UInt8] {
        if let h = environment["HOME"], !h.isEmpty { return Array(h.utf8) }
        return ProcessEnvironment.passwordHome() ?? [0x2F]
    }

    /// Ends the process with `code`.
    public static func exit(_ code: ExitCode) -> Never { ProcessEnvironment.exit(code.rawValue) }
}
