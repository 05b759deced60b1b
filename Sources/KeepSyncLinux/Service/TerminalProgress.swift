import KeepSyncCore
import Synchronization

/// The single live progress line on a terminal's stderr. Log lines written through
/// `print` clear it first and redraw it after, so the two never interleave. Inactive
/// (prints lines only) when stderr is not a terminal.
public final class TerminalProgress: ProgressDisplay {
    private let state = Mutex((line: "", shown: false))
    /// True when a progress line may be drawn.
    public let isActive: Bool

    /// A progress line, drawn only when `enabled` and stderr is a terminal.
    public init(enabled: Bool) {
        isActive = enabled && ProcessEnvironment.isTerminal(2)
    }

    /// Writes a log line, keeping the progress line below it.
    public func print(_ text: String) {
        state.withLock { s in
            if s.shown { LogSink.write("\r\u{1B}[K") }
            LogSink.write(text)
            if s.shown { LogSink.write(s.line) }
        }
    }

    /// Replaces the progress line.
    public func update(_ line: String) {
        guard isActive else { return }
        state.withLock { s in
            s.line = line
            s.shown = true
            LogSink.write("\r\u{1B}[K" + line)
        }
    }

    /// Removes the progress line, leaving `summary` (if any) as an ordinary line.
    public func finish(_ summary: String? = nil) {
        guard isActive else { return }
        state.withLock { s in
            if s.shown { LogSink.write("\r\u{1B}[K") }
            s.shown = false
            s.line = ""
            if let summary { LogSink.write(summary + "\n") }
        }
    }
}
