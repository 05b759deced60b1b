/// The process exit codes of SPEC.
public enum ExitCode: Int32, Sendable {
    /// Success.
    case success = 0
    /// Items failed (`sync`), differences found (`check`), no status file (`status`).
    case failure = 1
    /// Usage or configuration error.
    case usage = 2
    /// Refused for safety.
    case unsafe = 3
}
