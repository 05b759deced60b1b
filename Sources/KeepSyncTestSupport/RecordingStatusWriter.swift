import KeepSyncCore
import Synchronization

/// A status writer that keeps every report written; it can be told to fail.
public final class RecordingStatusWriter: StatusWriter {
    private let state = Mutex<(reports: [StatusReport], failing: Bool, failed: Bool)>(([], false, false))

    /// A writer that succeeds.
    public init() {}

    /// Records the report (unless failing).
    public func write(_ report: StatusReport, waits: Bool) {
        state.withLock { s in
            s.failed = s.failing
            if !s.failing { s.reports.append(report) }
        }
    }

    /// True when the last write failed.
    public var lastWriteFailed: Bool { state.withLock { $0.failed } }

    /// Makes writes fail (or succeed again).
    public func setFailing(_ failing: Bool) { state.withLock { $0.failing = failing } }

    /// Every report written, in order.
    public var reports: [StatusReport] { state.withLock { $0.reports } }

    /// The states written, repeats folded.
    public var states: [String] {
        reports.map(\.state).reduce(into: []) { out, s in if out.last != s { out.append(s) } }
    }
}
