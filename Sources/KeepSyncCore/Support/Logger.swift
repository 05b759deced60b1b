/// A small logger value: a threshold and a sink. Injected, never global.
public struct Logger: Sendable {
    /// Messages above this level are dropped.
    public var level: LogLevel
    /// Where lines go.
    public var sink: @Sendable (LogLevel, String) -> Void

    /// A logger writing to `sink`.
    public init(level: LogLevel, sink: @escaping @Sendable (LogLevel, String) -> Void) {
        self.level = level
        self.sink = sink
    }

    /// A logger that drops everything.
    public static let silent = Logger(level: .error) { _, _ in }

    /// Logs at `level` when enabled; the message is built only then.
    public func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        if level <= self.level { sink(level, message()) }
    }

    /// Logs an error.
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    /// Logs a warning.
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    /// Logs information.
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    /// Logs a debug detail.
    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
}

extension Logger {
    /// This logger with `prefix` before every line (one mirror's lines among several).
    public func prefixed(_ prefix: String) -> Logger {
        let sink = self.sink
        return Logger(level: level) { level, line in sink(level, prefix + line) }
    }
}
