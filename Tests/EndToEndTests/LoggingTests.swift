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

    /// Runs `keepsync sync -v` with stderr appended to `log` (a file whose device and
    /// inode are known before it starts) and `JOURNAL_STREAM` as given.
    static func syncLoggingTo(_ sandbox: Sandbox, _ log: [UInt8], journalStream: String?) throws -> (ProcessResult, [String]) {
        var environment = sandbox.environment
        environment["JOURNAL_STREAM"] = journalStream
        let script = "exec \"$0\" sync \"$@\" 2>>\"$KEEPSYNC_TEST_LOG\""
        environment["KEEPSYNC_TEST_LOG"] = String(decoding: log, as: UTF8.self)
        let arguments: [[UInt8]] = [Array("-c".utf8), Array(script.utf8), sandbox.binary]
            + (sandbox.paths + ["-v"] as [any CommandArgument]).map(\.argumentBytes)
        let result = try ChildProcess.run(Array("/bin/sh".utf8), arguments: arguments, environment: environment, timeout: .seconds(60))
        let lines = String(decoding: try FS.readFile(log), as: UTF8.self).split(separator: "\n").map(String.init)
        return (result, lines)
    }

    @Test func offATerminalAndOutsideJournaldLinesArePlain() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        try FS.mkfifo(sandbox.source / "fifo")
        // A pipe (the harness's), and a file with JOURNAL_STREAM naming another stream (a
        // child of a service writing to a file inherits the variable, not the stream).
        let piped = try sandbox.sync("-v")
        #expect(piped.status == 0, "\(piped)")
        let log = sandbox.root / "cron.log"
        try FS.writeFile(log, "")
        let other = try #require(FS.lstat(sandbox.root / "home"))
        let (result, filed) = try Self.syncLoggingTo(sandbox, log, journalStream: "\(other.device):\(other.inode)")
        #expect(result.status == 0, "\(result)")
        for (what, lines) in [("a pipe", piped.stderrLines), ("a file", filed)] {
            #expect(!lines.isEmpty, "\(what): no lines")
            for line in lines {
                #expect(Self.priority(line) == nil && line.hasPrefix("keepsync: "), "\(what): not a plain line: \(line)")
            }
            #expect(lines.contains { $0.hasPrefix("keepsync: warning: ") && $0.contains("fifo") }, "\(what): \(lines)")
            #expect(lines.contains { $0.hasPrefix("keepsync: debug: ") }, "\(what): -v must log at debug: \(lines)")
            #expect(lines.contains { $0.hasPrefix("keepsync: sync done") }, "\(what): \(lines)")
        }
    }

    @Test func underJournaldEveryLineHasItsPriority() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        try FS.mkfifo(sandbox.source / "fifo")
        // stderr is the stream JOURNAL_STREAM names, as systemd sets it up.
        let log = sandbox.root / "journal-stream"
        try FS.writeFile(log, "")
        let stream = try #require(FS.lstat(log))
        let (result, lines) = try Self.syncLoggingTo(sandbox, log, journalStream: "\(stream.device):\(stream.inode)")
        #expect(result.status == 0, "\(result)")
        #expect(!lines.isEmpty)
        for line in lines {
            #expect(Self.priority(line).map { (3...7).contains($0) } == true, "no <N> prefix: \(line)")
        }
        #expect(lines.contains { $0.hasPrefix("<4>keepsync: warning: ") && $0.contains("fifo") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("<7>keepsync: debug: ") }, "-v must log at debug: \(lines)")
        #expect(lines.contains { $0.hasPrefix("<6>keepsync: sync done") }, "\(lines)")
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
