import Glibc
import KeepSyncTestSupport
import Testing

/// stderr's shape: journald priorities when not a terminal, levels, foreground lines.
@Suite(.serialized, .offThePool)
struct LoggingTests {
    /// The `<N>` prefix of a line, if any.
    static func priority(_ line: String) -> Int? {
        guard line.hasPrefix("<"), let close = line.firstIndex(of: ">") else { return nil }
        return Int(line[line.index(after: line.startIndex)..<close])
    }

    @Test func withoutATerminalEveryLineHasAJournaldPriority() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        try FS.mkfifo(sandbox.source / "fifo")
        let result = try sandbox.sync("-v")
        #expect(result.status == 0, "\(result)")
        #expect(!result.stderrLines.isEmpty)
        for line in result.stderrLines {
            #expect(Self.priority(line).map { (3...7).contains($0) } == true, "no <N> prefix: \(line)")
        }
        #expect(result.stderrLines.contains { $0.hasPrefix("<4>") && $0.contains("fifo") }, "\(result)")
        #expect(result.stderrLines.contains { $0.hasPrefix("<7>") }, "-v must log at debug: \(result)")
    }

    @Test func logLevelErrorSilencesASuccessfulSync() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        try FS.mkfifo(sandbox.source / "fifo")
        let result = try sandbox.sync("--log-level", "error")
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
    }

    @Test func foregroundLinesCarryNoPriorityPrefixAndErrorsStillSayKeepsyncError() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        let ok = try sandbox.sync("--foreground")
        #expect(ok.status == 0, "\(ok)")
        #expect(ok.stderrLines.allSatisfy { Self.priority($0) == nil }, "\(ok)")
        let bad = try sandbox.keepsync("sync", "--source", sandbox.source, "--state", sandbox.state, "--foreground")
        #expect(bad.status == 2, "\(bad)")
        #expect(bad.stderrLines.contains { $0.hasPrefix("keepsync: error:") && $0.contains("--mirror") }, "\(bad)")
    }
}
