/// `keepsync sync`: one pass, then exit. Takes the lock, checks the source, scans,
/// applies (the brake on), records the root, compacts the records when anything
/// changed, writes status.json, and says what it did.
public struct SyncCommand<C: Clock> where C.Duration == Duration {
    let settings: Settings
    let host: any AgentHost
    let statusWriter: any StatusWriter
    let progress: any ProgressDisplay
    let clock: C
    let logger: Logger

    /// A pass over `settings` on `host`; `clock` paces the progress line.
    public init(settings: Settings, host: any AgentHost, statusWriter: any StatusWriter, progress: any ProgressDisplay,
                clock: C, logger: Logger) {
        self.settings = settings
        self.host = host
        self.statusWriter = statusWriter
        self.progress = progress
        self.clock = clock
        self.logger = logger
    }

    /// Runs the pass: `.success`, or `.failure` when items failed; throws `.unsafe` when
    /// deletions were held or the source was refused.
    public func run() throws -> ExitCode {
        // Both trees are read from the disk while the records load (on 1M entries, 1.6 s).
        let stopReading = host.readAhead(settings)
        let prepared: PreparedRecords
        do {
            defer { stopReading() }
            prepared = try host.prepare(settings, logger: logger, heartbeat: nil, pausingForMirror: false) { records, message in
                writeStatus(state: .refused(reason: message), records: records, summary: nil, extraErrors: [(path: ".", message: message)])
            }
        }
        defer { prepared.release() }
        let store = prepared.store, records = prepared.records, rootStat = prepared.root
        let trees = try host.openTrees(settings, limits: records.mirror?.limits ?? .none, cancellation: CancellationFlag(), live: false)
        guard let opened = try trees.source.stat(.root), opened.device == rootStat.device, opened.inode == rootStat.inode else {
            throw KeepSyncError(.unsafe, "source \(settings.sourceName) changed while it was being opened; nothing done")
        }
        settings.warnIfSourceHoldsVersions(trees.source, logger: logger)
        let engine = SyncEngine(source: trees.source, mirror: trees.mirror, store: store, records: records,
                                options: settings.options, logger: logger)
        engine.io = host.copies.io
        engine.scanIO = host.copies.scanIO
        let started = clock.now
        if progress.isActive {
            var drawn: C.Instant?
            let clock = self.clock, progress = self.progress
            engine.onCopy = { p in
                let now = clock.now
                guard drawn.map({ $0.duration(to: now) >= .milliseconds(100) }) ?? true else { return }
                drawn = now
                progress.update(ByteSize.progress(files: p.copied.files, totalFiles: p.planned.files, bytes: p.copied.bytes,
                                                  totalBytes: p.planned.bytes, seconds: ByteSize.seconds(started.duration(to: now)),
                                                  totalKnown: p.planComplete))
            }
        }
        let (scan, passSummary) = try engine.fullPass()
        var summary = passSummary
        // Records that could not be written fail the run (the writer keeps why).
        if var failure = engine.recordWriter.failure {
            if failure.path == nil { failure.path = .root }
            summary.errors.append(failure)
        }
        progress.finish(nil)
        try engine.recordRoot(FileIdentity(device: opened.device, inode: opened.inode))
        if summary != SyncSummary() || records.wasDamaged {
            // Not over a barrier that failed: the records would claim what a power cut takes.
            // (A failed write is listed already: its cause, not twice.)
            do { try engine.recordWriter.compactNow(engine.records) } catch {
                var failure = (error as? KeepSyncError) ?? KeepSyncError(.io, "\(error)")
                if failure.path == nil { failure.path = .root }
                if !summary.errors.contains(failure) { summary.errors.append(failure) }
            }
        }
        // status.json's "versions": listed once, after the thinning.
        var versionSummary: VersionSummary?
        if let versions = settings.versions, let kept = VersionStore.of(trees.mirror) {
            kept.store.thin(now: kept.now(), keep: versions.keepSeconds, logger: logger)
            do { versionSummary = try kept.store.summary() } catch {
                logger.warning("versions: cannot read \(kept.store.directory.escaped): \(error)")
            }
        }
        let held = summary.heldDeletes
        logger.info(Self.describe(summary))
        writeStatus(state: .stopped, records: engine.records, summary: summary, extraErrors: [],
                    kept: (scan.keptFiles, scan.keptBytes), skipped: engine.skipped.keys.sorted(), versions: versionSummary)
        if !summary.errors.isEmpty {
            logger.error("\(summary.errors.count) item\(summary.errors.count == 1 ? "" : "s") failed")
        }
        if held > 0 {
            // A refusal, like every exit 3: one error line with the reason and the way out.
            throw KeepSyncError(.unsafe, "held \(held) deletions: more than \(settings.configuration.maxDeletePercent)% of the mirror's \(scan.mirrorEntries) entries; check, then rerun with --allow-mass-delete to apply them")
        }
        return summary.errors.isEmpty ? .success : .failure
    }

    /// `sync done: 3 files copied (1.2 KiB), 1 removed`.
    public static func describe(_ s: SyncSummary) -> String {
        var parts = ["\(s.copiedFiles) file\(s.copiedFiles == 1 ? "" : "s") copied (\(ByteSize.human(s.copiedBytes)))"]
        if s.renamed > 0 { parts.append("\(s.renamed) renamed") }
        if s.createdDirectories > 0 { parts.append("\(s.createdDirectories) directories created") }
        if s.createdLinks > 0 { parts.append("\(s.createdLinks) links made") }
        if s.removedEntries > 0 { parts.append("\(s.removedEntries) removed") }
        if s.skippedSpecial > 0 { parts.append("\(s.skippedSpecial) special files skipped") }
        if s.skippedUnholdable > 0 {
            parts.append("\(s.skippedUnholdable) path\(s.skippedUnholdable == 1 ? "" : "s") the mirror cannot hold skipped")
        }
        if !s.errors.isEmpty { parts.append("\(s.errors.count) failed") }
        return "sync done: " + parts.joined(separator: ", ")
    }

    func writeStatus(state: AgentState, records: RecordSet, summary: SyncSummary?,
                     extraErrors: [(path: String, message: String)], kept: (files: Int, bytes: UInt64) = (0, 0),
                     skipped: [RelativePath] = [], versions: VersionSummary? = nil) {
        var report = StatusReport(
            state: state.name, pid: host.processID, source: settings.sourceName, mirror: settings.mirrorName,
            files: records.table.regularFiles + kept.files, bytes: records.table.regularBytes + kept.bytes, pending: 0,
            lastFullSync: summary == nil ? nil : host.timestamp(), heldDeletes: summary?.heldDeletes ?? 0,
            errors: extraErrors + (summary?.errors ?? []).map { (path: ($0.path ?? .root).escaped, message: $0.message) })
        report.mirrorLimits = records.mirror?.limits
        report.skipped = skipped.map(\.escaped)
        report.versions = versions
        // What a pass could not send waits for the next one: no lag is counted between runs.
        report.remote = settings.remote?.host
        statusWriter.write(report, waits: true)
    }
}
