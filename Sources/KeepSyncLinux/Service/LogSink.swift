import KeepSyncCore

/// Where log lines go: journald style (`<N>` prefix, no time) or a terminal (local
/// time, level, colour only on a TTY).
public enum LogSink {
    /// True when stderr is a terminal.
    public static var stderrIsTerminal: Bool { Sys.isTerminal(.standardError) }

    /// A logger for `level`, in the foreground style when `foreground` is true.
    public static func logger(level: LogLevel, foreground: Bool, progress: TerminalProgress? = nil) -> Logger {
        let colour = foreground && stderrIsTerminal
        return Logger(level: level) { lvl, message in
            let text = line(lvl, message, foreground: foreground, colour: colour)
            if let progress { progress.print(text) } else { write(text) }
        }
    }

    /// Formats one line.
    public static func line(_ level: LogLevel, _ message: String, foreground: Bool, colour: Bool) -> String {
        let label: String
        switch level {
        case .error: label = "error: "
        case .warning: label = "warning: "
        case .info: label = ""
        case .debug: label = "debug: "
        }
        if !foreground {
            let priority: Int
            switch level {
            case .error: priority = 3
            case .warning: priority = 4
            case .info: priority = 6
            case .debug: priority = 7
            }
            return "<\(priority)>keepsync: \(label)\(message)\n"
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
