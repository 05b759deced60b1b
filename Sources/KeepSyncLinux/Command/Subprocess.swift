import KeepSyncCore

/// Runs a helper program (systemctl) to completion through the one spawner
/// (`Sys.runCaptured`): stdout discarded, stderr returned.
enum Subprocess {
    /// Exit status (128 + signal when killed) and what it wrote to stderr.
    static func run(_ argv: [String], timeout: Duration = .seconds(120)) throws -> (status: Int32, stderr: String) {
        let run: CapturedRun
        do throws(Errno) { run = try Sys.runCaptured(argv.map { Array($0.utf8) }, input: [], timeout: timeout) } catch {
            throw KeepSyncError(.io, "cannot run \(argv[0]): \(error.text)")
        }
        if run.timedOut { throw KeepSyncError(.io, "\(argv[0]) did not end within \(timeout)") }
        return (run.status, String(decoding: run.stderr, as: UTF8.self))
    }
}
