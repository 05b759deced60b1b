import Foundation
import Glibc
import Testing
import KeepSyncTestSupport

/// What `sync` and `run` print on stderr: journald lines (`<N>`, no time, no progress)
/// when stderr is not a terminal; on a pseudo-terminal, time and level on every line,
/// a single live progress line that ends in the summary, and a clean Ctrl-C.
@Suite(.serialized, .offThePool)
struct ForegroundOutputTests {
    /// A plain line (cron, a pipe, a file): `keepsync: `, a level label but for info, no `<N>`.
    static var plainLine: Regex<(Substring, Substring?)> { #/^keepsync: (error: |warning: |debug: )?[^<]/# }
    static var timestamp: Regex<Substring> { #/[0-9]{2}:[0-9]{2}:[0-9]{2}/# }
    /// `HH:MM:SS level message` (the level padded to 5, colour already stripped).
    static var foregroundLine: Regex<(Substring, Substring)> { #/^[0-9]{2}:[0-9]{2}:[0-9]{2} (info |warn |error|debug) \S/# }
    static var sgr: Regex<Substring> { #/\x1B\[[0-9;]*m/# }

    /// Lines as a terminal finally shows them: a carriage return goes back to the
    /// start of the line and `ESC[K` erases it, so only what follows the last `\r`
    /// stays; SGR colour codes removed; a leading `^C` (the tty's echo) dropped.
    static func visibleLines(_ text: String) -> [String] {
        text.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: false).compactMap { raw in
            var line = String(raw.split(separator: "\r", omittingEmptySubsequences: false).last ?? "")
            line = line.replacingOccurrences(of: "\u{1B}[K", with: "").replacing(sgr, with: "")
            if line.hasPrefix("^C") { line.removeFirst(2) }
            return line.isEmpty ? nil : line
        }
    }

    /// Runs `keepsync ARGS` on a new pseudo-terminal until it exits.
    static func onTerminal(_ sandbox: Sandbox, _ arguments: [any CommandArgument],
                           timeout: Duration = .seconds(60)) async throws -> (status: Int32?, terminal: PseudoTerminal) {
        let pty = try PseudoTerminal()
        let child = try BackgroundChild(sandbox.binary, arguments: arguments.map(\.argumentBytes),
                                        environment: sandbox.environment, output: .terminal(pty.slavePath))
        let status = await child.waitForExit(timeout: timeout) { pty.drain() }
        if status == nil { child.killNow() }
        pty.drain()
        return (status, pty)
    }

    // MARK: Not a terminal

    @Test func withoutATerminalEverySyncLineIsPlainWithNoTimestampNorProgress() throws {
        let sandbox = try Sandbox()
        try sandbox.writeManyFiles(300, size: 20_000)
        try FS.mkfifo(sandbox.source / "fifo")
        let result = try sandbox.sync("-v")
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
        #expect(!result.stderr.contains(0x0D), "a carriage return (progress line) on a stderr that is not a terminal:\n\(result)")
        #expect(!result.stderr.contains(0x1B), "an escape sequence on a stderr that is not a terminal:\n\(result)")
        try #require(!result.stderrLines.isEmpty)
        for line in result.stderrLines {
            #expect(line.contains(Self.plainLine), "not a plain keepsync: line: \(line)")
            #expect(!line.contains(Self.timestamp), "a timestamp in a plain line: \(line)")
        }
        #expect(result.stderrLines.contains { $0.hasPrefix("keepsync: warning: ") && $0.contains("fifo") }, "\(result)")
        #expect(result.stderrLines.contains { $0.hasPrefix("keepsync: sync done: 300 files copied") }, "\(result)")
        #expect(result.stderrLines.contains { $0.hasPrefix("keepsync: debug: ") }, "-v logs at debug: \(result)")
    }

    @Test func withoutATerminalEveryRunLineIsPlainWithNoTimestampNorProgress() async throws {
        let sandbox = try Sandbox()
        try sandbox.writeManyFiles(300, size: 20_000)
        let agent = try sandbox.spawnRun(["-v"])
        let watching = await eventually(timeout: .seconds(30)) {
            sandbox.statusJSON?["state"] as? String == "watching" || agent.poll() != nil
        }
        try #require(watching && agent.poll() == nil, "not watching\n\(agent.diagnostics)")
        try FS.writeFile(sandbox.source / "later.txt", "written while watching\n")
        let mirrored = await eventually(timeout: .seconds(20)) { sandbox.differencesFromSource().isEmpty }
        #expect(mirrored, "\(sandbox.differencesFromSourceSummary())\n\(agent.diagnostics)")
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")

        let stderr = try FS.readFile(agent.stderrPath!)
        #expect(!stderr.contains(0x0D), "a carriage return (progress line) on a stderr that is not a terminal:\n\(agent.diagnostics)")
        #expect(!stderr.contains(0x1B), "an escape sequence on a stderr that is not a terminal:\n\(agent.diagnostics)")
        let lines = agent.stderrLines
        try #require(!lines.isEmpty)
        for line in lines {
            #expect(line.contains(Self.plainLine), "not a plain keepsync: line: \(line)")
            #expect(!line.contains(Self.timestamp), "a timestamp in a plain line: \(line)")
        }
        #expect(lines.contains { $0.hasPrefix("keepsync: debug: copied later.txt") },
                "-v shows the live copy of later.txt:\n\(agent.diagnostics)")
        #expect(lines.contains { $0.hasPrefix("keepsync: stopped") }, "no stop summary:\n\(agent.diagnostics)")
        #expect(try FS.readFile(agent.stdoutPath!).isEmpty, "run printed on stdout")
    }

    @Test func foregroundWithoutATerminalHasTimeAndLevelButNoColourNorProgress() throws {
        let sandbox = try Sandbox()
        try sandbox.writeManyFiles(300, size: 20_000)
        let result = try sandbox.sync("--foreground", "-v")
        #expect(result.status == 0, "\(result)")
        #expect(!result.stderr.contains(0x0D), "a progress line although stderr is not a terminal:\n\(result)")
        #expect(!result.stderr.contains(0x1B), "colour although stderr is not a terminal:\n\(result)")
        try #require(!result.stderrLines.isEmpty)
        for line in result.stderrLines {
            #expect(line.contains(Self.foregroundLine), "not `HH:MM:SS level message`: \(line)")
        }
        #expect(result.stderrLines.contains { $0.contains("info  sync done: 300 files copied") }, "\(result)")
    }

    // MARK: On a terminal

    @Test func onATerminalSyncDrawsOneLiveProgressLineThatEndsInTheSummary() async throws {
        let sandbox = try Sandbox()
        try sandbox.writeManyFiles(300, size: 20_000)
        try FS.mkfifo(sandbox.source / "fifo")
        let (status, pty) = try await Self.onTerminal(sandbox, ["sync"] + sandbox.paths)
        #expect(status == 0, "exit \(status.map(String.init) ?? "none: killed after 60 s")\n\(pty.visible)")
        try sandbox.expectMirrorEqualsSource(ignoring: [bytes("fifo")])
        let text = pty.text
        // Colour on a terminal: the skipped fifo's warning.
        #expect(text.contains(#/\x1B\[[0-9;]*m\s*warn/#), "no coloured warning on a terminal:\n\(pty.visible)")
        #expect(Self.visibleLines(text).contains { $0.contains(#/^[0-9:]{8} warn  .*fifo/#) }, "\(pty.visible)")

        // The live line: redrawn in place, files of the total.
        let redraws = text.components(separatedBy: "\r\u{1B}[Ksyncing: ").dropFirst()
        #expect(!redraws.isEmpty, "no live progress line (\\r\\e[Ksyncing: …) on a terminal:\n\(pty.visible)")
        let lines = redraws.map { String($0.prefix { $0 != "\r" && $0 != "\n" }) }
        for line in lines {
            // files done/total, bytes done/total
            #expect(line.contains(#/^[0-9]+/300 files, [0-9.]+ (B|KiB|MiB|GiB)/[0-9.]+ (B|KiB|MiB|GiB)/#),
                    "progress line without files and bytes done of total: syncing: \(line)")
        }
        #expect(lines.contains { $0.contains(#/, [0-9.]+ (B|KiB|MiB|GiB)/s, ETA [0-9]+s$/#) },
                "no progress line shows a rate and an ETA: \(lines)")
        // It ends in the summary: erased, and the summary is the last thing shown.
        let visible = Self.visibleLines(text)
        #expect(visible.last?.contains("info  sync done: 300 files copied") == true,
                "the output does not end in the summary line; final screen:\n\(visible.joined(separator: "\n"))\nraw:\n\(pty.visible)")
        #expect(!visible.contains { $0.contains("syncing:") }, "a progress line left on screen:\n\(visible.joined(separator: "\n"))")
        for line in visible {
            #expect(line.contains(Self.foregroundLine), "not `HH:MM:SS level message` on a terminal: \(line)")
            #expect(!line.contains(#/^<[0-9]>/#), "a journald prefix on a terminal: \(line)")
        }
    }

    @Test func onATerminalCtrlCStopsRunCleanlyWithAStoppedSummary() async throws {
        let sandbox = try Sandbox()
        try sandbox.writeManyFiles(300, size: 20_000)
        let pty = try PseudoTerminal()
        let agent = try BackgroundChild(sandbox.binary, arguments: (["run"] + sandbox.paths).map(\.argumentBytes),
                                        environment: sandbox.environment, output: .terminal(pty.slavePath))
        let watching = await eventually(timeout: .seconds(30)) {
            pty.drain()
            return sandbox.statusJSON?["state"] as? String == "watching" || agent.poll() != nil
        }
        try #require(watching && agent.poll() == nil, "not watching (exit \(agent.exitStatus.map(String.init) ?? "none"))\n\(pty.visible)")
        try FS.writeFile(sandbox.source / "later.txt", "written while watching\n")
        let mirrored = await eventually(timeout: .seconds(20)) { pty.drain(); return sandbox.differencesFromSource().isEmpty }
        #expect(mirrored, "\(sandbox.differencesFromSourceSummary())\n\(pty.visible)")

        pty.type([3])   // ^C: the terminal sends SIGINT to its foreground process group
        let status = await agent.waitForExit(timeout: .seconds(10)) { pty.drain() }
        #expect(status == 0, "exit \(status.map(String.init) ?? "none: still running 10 s after ^C")\n\(pty.visible)")
        if status == nil { agent.killNow() }
        #expect(sandbox.statusJSON?["state"] as? String == "stopped")
        #expect(try sandbox.strayTemporaryFiles().isEmpty)

        let visible = Self.visibleLines(pty.text)
        #expect(visible.contains { $0.contains(#/^[0-9:]{8} info  stopped after [0-9]+s: /#) },
                "no `stopped after …` summary after ^C:\n\(visible.joined(separator: "\n"))")
        #expect(visible.contains { $0.contains("initial sync done") }, "\(visible.joined(separator: "\n"))")
        #expect(!visible.contains { $0.contains("syncing:") }, "a progress line left on screen:\n\(visible.joined(separator: "\n"))")
        for line in visible {
            #expect(line.contains(Self.foregroundLine), "not `HH:MM:SS level message` on a terminal: \(line)")
        }
    }

    // MARK: Debug

    /// `-v` and `--log-level debug` show every copy, whether files are copied one by
    /// one or several at a time.
    @Test(arguments: [["-v"], ["--log-level", "debug"]])
    func debugLoggingShowsACopiedLineForEveryFile(_ flags: [String]) throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        try FS.writeFile(sandbox.source / "second.txt", "2\n")
        let result = try sandbox.sync(flags)
        #expect(result.status == 0, "\(result)")
        let files = try sandbox.sourceSnapshot().regularFiles.map { String(decoding: $0, as: UTF8.self) }
        let missing = files.filter { path in
            !result.stderrLines.contains { $0.hasPrefix("keepsync: debug: copied \(path)") }
        }
        #expect(missing.isEmpty,
                "no debug line `copied PATH` with \(flags.joined(separator: " ")) for \(missing.count) of \(files.count) copied files: \(missing)\n\(result)")
    }

    @Test func onATerminalDebugLinesShowTheCopiesWithTimeAndLevel() async throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "only.txt", "one file\n")
        let (status, pty) = try await Self.onTerminal(sandbox, ["sync", "--log-level", "debug"] + sandbox.paths)
        #expect(status == 0, "\(pty.visible)")
        let visible = Self.visibleLines(pty.text)
        #expect(visible.contains { $0.contains(#/^[0-9:]{8} debug copied only\.txt/#) }, "\(visible.joined(separator: "\n"))")
        for line in visible {
            #expect(line.contains(Self.foregroundLine), "not `HH:MM:SS level message` on a terminal: \(line)")
        }
    }
}
