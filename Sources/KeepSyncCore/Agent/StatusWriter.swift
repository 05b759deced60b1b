/// Where status.json goes.
public protocol StatusWriter: Sendable {
    /// Writes `report` in order with earlier writes; `waits`: returns once it is written
    /// (exit, error), else the write may happen later, off the caller's thread.
    func write(_ report: StatusReport, waits: Bool)
    /// True when the last write failed (a full disk): the same report is then written again.
    var lastWriteFailed: Bool { get }
}
