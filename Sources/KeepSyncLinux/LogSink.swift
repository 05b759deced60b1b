import Glibc
import KeepSyncCore

/// Where log lines go: journald style (`<N>` prefix, no time) or a terminal (local
/// time, level, colour only on a TTY).
public enum LogSink {
    /// True when stderr is a terminal.
    public static var stderrIsTerminal: Bool { isatty(2) == 1 }

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
        var now = time(nil)
        var tm = Glibc.tm()
        localtime_r(&now, &tm)
        let clock = [tm.tm_hour, tm.tm_min, tm.tm_sec].map { $0 < 10 ? "0\($0)" : "\($0)" }.joined(separator: ":")
        let tag: String
        switch level {
        case .error: tag = colour ? "\u{1B}[31merror\u{1B}[0m" : "error"
        case .warning: tag = colour ? "\u{1B}[33mwarn \u{1B}[0m" : "warn "
        case .info: tag = "info "
        case .debug: tag = colour ? "\u{1B}[2mdebug\u{1B}[0m" : "debug"
        }
        return "\(clock) \(tag) \(message)\n"
    }

    /// Writes text to stderr in one call.
    public static func write(_ text: String) {
        var bytes = Array(text.utf8)
        bytes.withUnsafeMutableBytes { buf in _ = Glibc.write(2, buf.baseAddress, buf.count) }
    }

    /// Writes text to stdout in one call.
    public static func writeOut(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        bytes.withUnsafeMutableBytes { buf in
            while offset < buf.count {
                let n = Glibc.write(1, buf.baseAddress! + offset, buf.count - offset)
                if n <= 0 { break }
                offset += n
            }
        }
    }

    /// The current time as ISO 8601 UTC (`2026-12-02T10:49:07Z`).
    public static func utcTimestamp() -> String {
        var now = time(nil)
        var tm = Glibc.tm()
        gmtime_r(&now, &tm)
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(tm.tm_year + 1900)-\(two(tm.tm_mon + 1))-\(two(tm.tm_mday))T\(two(tm.tm_hour)):\(two(tm.tm_min)):\(two(tm.tm_sec))Z"
    }
}
