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

extension ExitCode {
    /// The exit code for a command that failed with `error`: configuration errors are
    /// usage errors (2), refusals are 3, anything else 1.
    public init(failure error: any Error) {
        switch (error as? KeepSyncError)?.code {
        case .configuration?: self = .usage
        case .unsafe?: self = .unsafe
        default: self = .failure
        }
    }
}

extension ExitCode {
    /// The worse of two outcomes (several mirrors): 3 over 2 over 1 over 0.
    public func worst(_ other: ExitCode) -> ExitCode { other.rawValue > rawValue ? other : self }
}
