import KeepSyncCore

/// The watcher's end of its bounded event stream. The stream holds at most its buffer's
/// limit of events (`.bufferingOldest`); an event that finds it full is not lost silently:
/// it and everything after it are covered by one `.rescan`, owed until there is room.
final class EventOutbox {
    /// The reason the owed rescan gives.
    static let overflowReason = "changes came faster than they were handled"

    private let continuation: AsyncStream<WatchEvent>.Continuation
    private let logger: Logger
    /// True when an event found the stream full and the rescan covering it is not sent yet.
    private(set) var owesRescan = false

    /// An outbox yielding to `continuation` (made with a bounded buffering policy).
    init(_ continuation: AsyncStream<WatchEvent>.Continuation, logger: Logger) {
        self.continuation = continuation
        self.logger = logger
    }

    /// Yields `event`, unless a rescan is owed (it covers this event too). The stream full:
    /// a rescan is owed from now on.
    func emit(_ event: WatchEvent) {
        if owesRescan { return }
        if case .dropped = continuation.yield(event) {
            owesRescan = true
            logger.warning("inotify: events wait faster than they are handled; a full rescan follows")
        }
    }

    /// Tries to send the owed rescan; true when none is owed any more.
    @discardableResult
    func settleRescan() -> Bool {
        guard owesRescan else { return true }
        if case .enqueued = continuation.yield(.rescan(reason: EventOutbox.overflowReason)) {
            owesRescan = false
        }
        return !owesRescan
    }

    /// Ends the stream.
    func finish() {
        continuation.finish()
    }
}
