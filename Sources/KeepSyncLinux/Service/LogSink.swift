import KeepSyncCore

/// Where log lines go and how they look (SPEC "systemd"): under journald the sd-daemon
/// priority prefix (`<3>keepsync: error: …`, no time); anywhere else off a terminal
/// (cron, a pipe, a file) plain `keepsync: …` lines; in the foreground the local time and
/// the level, coloured on a TTY.
public enum LogSink {
    /// The three shapes of a line.
    public enum Style: Sendable, Equatable {
        /// `<N>keepsync: …`: stderr is the journal stream.
        case journal
        /// `keepsync: warning: …`: cron, a pipe, a file.
        case plain
        /// `12:00:01 warn  …`: a person watching.
        case foreground
    }

    /// True when stderr is a terminal.
    public static var stderrIsTerminal: Bool { Sys.isTerminal(.standardError) }

    /// True when stderr is the stream `$JOURNAL_STREAM` names (`DEVICE:INODE`, as
    /// sd-daemon(3) says to tell it): a child that inherited the variable but not the
    /// stream is not under journald.
    public static func stderrIsJournal(_ environment: [String: String]) -> Bool {
        guard let value = environment["JOURNAL_STREAM"] else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]),
              let st = try? FileDescriptor.standardError.stat() else { return false }
        return st.device == device && st.inode == inode
    }

    /// The style for this process: `foreground` when asked (or nil and on a terminal off
    /// the journal), else journal or plain.
    public static func style(foreground: Bool?, environment: [String: String]) -> Style {
        let journal = stderrIsJournal(environment)
        if foreground ?? (stderrIsTerminal && !journal) { return .foreground }
        return journal ? .journal : .plain
    }

    /// A logger for `level` in `style`.
    public static func logger(level: LogLevel, style: Style, progress: TerminalProgress? = nil) -> Logger {
        let colour = style == .foreground && stderrIsTerminal
        return Logger(level: level) { lvl, message in
            let text = line(lvl, message, style: style, colour: colour)
            if let progress { progress.print(text) } else { write(text) }
        }
    }

    /// Formats one line.
    public static func line(_ level: LogLevel, _ message: String, style: Style, colour: Bool) -> String {
        let label: String
        switch level {
        case .error: label = "error: "
        case .warning: label = "warning: "
        case .info: label = ""
        case .debug: label = "debug: "
        }
        switch style {
        case .plain:
            return "keepsync: \(label)\(message)\n"
        case .journal:
            let priority: Int
            switch level {
            case .error: priority = 3
            case .warning: priority = 4
            case .info: priority = 6
            case .debug: priority = 7
            }
            return "<\(priority)>keepsync: \(label)\(message)\n"
        case .foreground:
            break
        }
        let t = Sys.calendarTime(utc: false)
        let clock = [t.hour, t.minute, t.second].map { $0 < 10 ? "0\($0)" : "\($0)" }.joined(separator: ":")
        let tag: String
        switch level {
        case .error: tag = colour ? "\u{1B}[31merror\u{1B}[0m" : "error"
        case .warning: tag = colour ? "\u{1B}[33mwarn \u{1B}[0m" : "warn "
        case .info: tag = "info "
        case .debug: tag = colour ? "\u{1B}[2mdebug\u{1B}[0m" : "debug"
        }
        return "\(clock) \(tag) \(message)\n"
    }

    /// Writes text to stderr (one write unless the kernel takes less).
    public static func write(_ text: String) {
        try? FileDescriptor.standardError.writeAll(Array(text.utf8))
    }

    /// Writes all of the text to stdout.
    public static func writeOut(_ text: String) {
        try? FileDescriptor.standardOutput.writeAll(Array(text.utf8))
    }

    /// The current time as ISO 8601 UTC (`2026-12-02T10:49:07Z`).
    public static func utcTimestamp() -> String {
        let t = Sys.calendarTime(utc: true)
        func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(t.year)-\(two(t.month))-\(two(t.day))T\(two(t.hour)):\(two(t.minute)):\(two(t.second))Z"
    }
}
