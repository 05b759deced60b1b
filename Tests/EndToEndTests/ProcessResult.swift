/// What a finished child process left behind.
struct ProcessResult: CustomStringConvertible {
    /// The exit code, or 128 + signal number when killed by a signal.
    var status: Int32
    var stdout: [UInt8]
    var stderr: [UInt8]
    var timedOut: Bool

    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    var stderrText: String { String(decoding: stderr, as: UTF8.self) }
    var stdoutLines: [String] { stdoutText.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }
    var stderrLines: [String] { stderrText.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }

    /// stderr lines that are `keepsync: error:` messages (with or without a `<N>` prefix).
    var errorLines: [String] { stderrLines.filter { $0.contains("keepsync: error:") } }

    var description: String {
        "exit \(status)\(timedOut ? " (timed out)" : "")\n--- stdout ---\n\(stdoutText)--- stderr ---\n\(stderrText)"
    }
}
