/// The manager's side of the records: flushing to the writer, its failure in status, compaction.
extension SyncManager {
    // MARK: Records

    /// Hands the records added so far (and a failed backlog) to the writer. With a
    /// concurrent executor the syncfs and the append run in order on a serial queue, so
    /// the actor never waits on the disk.
    func flushRecords() {
        unflushed = 0
        showRecordsFailure()
        retryCompaction(now: false)
        guard recordWriter.flush(retryingBacklog: true) else { return }
        lastAppendAt = now
        // A write that ran at once (an immediate scheduler) shows its outcome now.
        showRecordsFailure()
    }

    static var recordsError: String { "cannot write records: " }

    /// The root's "cannot write records" entry, as the writer's state says now: set while
    /// its writes fail, gone once one succeeded (another meaning in the slot stays).
    /// Returns true when it cleared the entry.
    @discardableResult
    func showRecordsFailure() -> Bool {
        let shown: Bool
        if case .records = rootError { shown = true } else { shown = false }
        if let failure = recordWriter.failure {
            rootError = .records(SyncManager.recordsError + failure.message)
        } else if shown {
            rootError = nil
            return true
        }
        return false
    }

    /// Shows the writer's failure again when a write failed or recovered since the last look
    /// (status, and a compaction after its drain: where reports used to land).
    func lookAtRecordWrites() {
        guard recordWriter.outcomes != seenRecordOutcomes else { return }
        seenRecordOutcomes = recordWriter.outcomes
        showRecordsFailure()
    }

    /// Waits until every record write handed to the queue is done.
    public func drainRecords() async {
        await recordWriter.drain()
    }

    /// Appends queued records and rewrites the store compactly.
    public func compactRecords() async throws {
        flushRecords()
        await recordWriter.drain()
        lookAtRecordWrites()
        try recordWriter.compactNow(engine.records)
    }

    /// Queues a rewrite of the store as the records, in turn with the appends, so that
    /// the log does not grow for as long as the agent runs; copies go on meanwhile.
    public func compactRecordsInBackground() {
        flushRecords()
        recordWriter.compact(engine.records)
        lastAppendAt = now
    }

    /// A compaction that failed (and nothing written since) is asked again, of the records
    /// as they are now: at once (`now`, a full pass), else once its retry delay passed.
    func retryCompaction(now: Bool) {
        guard recordWriter.owesCompaction else { return }
        if !now, let at = lastAppendAt, self.now < at + recordRetryDelay { return }
        recordWriter.compact(engine.records)
        lastAppendAt = self.now
        showRecordsFailure()
    }
}
