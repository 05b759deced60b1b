/// Sends the agent's `STATUS=` lines only when they change, and READY=1 once.
struct StatusPublisher {
    let notifier: any Notifier
    /// True once READY=1 was sent.
    private(set) var readySent = false
    private var lastLine = ""

    init(notifier: any Notifier) {
        self.notifier = notifier
    }

    /// `STATUS=line`, unless it was the last one sent.
    mutating func notify(_ line: String) {
        guard line != lastLine else { return }
        lastLine = line
        notifier.status(line)
    }

    /// `READY=1` with `STATUS=line`.
    mutating func ready(_ line: String) {
        readySent = true
        lastLine = line
        notifier.ready(status: line)
    }
}

/// Writes one mirror's status.json only when it changes (or its last write failed), at
/// most once a second unless forced or the state changed (a script that saw READY=1 reads
/// `watching`).
struct StatusFile<C: Clock> where C.Duration == Duration {
    let writer: any StatusWriter
    private var lastJSON = ""
    private var lastWrite: C.Instant?
    private var lastState = ""

    init(writer: any StatusWriter) {
        self.writer = writer
    }

    /// Writes `report` when it changed and a second passed since the last write or its
    /// state changed, or when `force` (which also waits for the write).
    mutating func write(_ report: StatusReport, force: Bool, now: C.Instant) {
        let json = report.json
        guard json != lastJSON || writer.lastWriteFailed,
              force || report.state != lastState || lastWrite.map({ $0.duration(to: now) >= .seconds(1) }) ?? true
        else { return }
        // A new state is on disk before the caller goes on (READY=1 follows `watching`).
        let waits = force || report.state != lastState
        lastJSON = json
        lastState = report.state
        lastWrite = now
        writer.write(report, waits: waits)
    }
}
