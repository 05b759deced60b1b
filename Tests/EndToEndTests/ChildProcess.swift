import KeepSyncTestSupport

/// Runs a program as a child process with raw byte arguments and an explicit
/// environment, capturing stdout, stderr and the exit status, with a timeout.
enum ChildProcess {
    /// `ChildSpawning.run` of `executable` and `arguments`, as a `ProcessResult`.
    static func run(_ executable: [UInt8], arguments: [[UInt8]], environment: [String: String],
                    timeout: Duration = .seconds(30)) throws -> ProcessResult {
        let outcome = try ChildSpawning.run([executable] + arguments, environment: environment, timeout: timeout)
        return ProcessResult(status: outcome.status, stdout: outcome.stdout, stderr: outcome.stderr, timedOut: outcome.timedOut)
    }
}
