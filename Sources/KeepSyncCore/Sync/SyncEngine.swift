import Dispatch

/// A full verify-and-repair pass over the protocols: walk source and mirror side by
/// side, feed every path through the Planner, apply (as the walk goes, `fullPass`), then
/// forget stale records.
public final class SyncEngine {
    let source: any FileSystemProviding
    let mirror: any MirrorProviding
    let store: any BookmarkStorageProviding
    /// The records as the store holds them.
    public private(set) var records: RecordSet
    /// Options of the passes (`reconfigure` changes them between passes).
    public private(set) var options: SyncOptions
    let logger: Logger
    /// Paths warned about as skipped (special, or unholdable), once per process.
    var warned: Set<RelativePath> = []
    /// Where record changes go once their mirror change is made (written durably, in
    /// order, where its scheduler says).
    public let recordWriter: RecordWriter
    /// Called after each file this engine copies itself, with the pass's progress.
    public var onCopy: ((PassProgress) -> Void)?
    /// Batch size for record appends: at least this, and two of the mirror's groups (each
    /// append waits on a mirror barrier, a round trip on a remote one: 21 of them in a
    /// 20,000-file remote pass).
    static let batchSize = 1024
    /// Record changes that go out as one append.
    var recordBatch: Int { max(Self.batchSize, 2 * mirror.groupFiles) }
    /// A group commit's size: at most the mirror's `groupFiles` files, or this many bytes.
    static let groupBytes: UInt64 = 128 << 20

    /// Parallel staging for the engine's own group commits (`sync`); serial by default.
    public var io: ParallelIO = .serial
    /// Threads listing directories ahead of a scan; serial by default.
    public var scanIO: ParallelIO = .serial
    /// Beaten by scans and once per step applied (see `Heartbeat`).
    public var heartbeat: Heartbeat?
    /// A directory finish waiting for the groups that hold its entries.
    typealias Finish = (path: RelativePath, source: FileStat, dirty: Bool)

    /// Finishes several directories, in order: their mode and mtime set in one
    /// `setAttributesAll`, then each one's record (only where that succeeded).
    func finishAll(_ finishes: [Finish], _ pass: inout PassApplication) {
        var planned: [(state: PathState, actions: [SyncAction])] = []
        for (f, stat) in zip(finishes, mirror.statEach(finishes.map(\.path))) {
            do {
                guard let m = try stat.get(), m.kind == .directory else { continue }
                let actions = planner.finishDirectory(path: f.path, source: f.source, mirror: m,
                                                      record: records.table[f.path], entriesChanged: f.dirty)
                planned.append((PathState(path: f.path, source: f.source, record: nil, mirror: m), actions))
            } catch { report(error, path: f.path, into: &pass.summary) }
        }
        var changes: [(path: RelativePath, mode: UInt32?, mtime: Timespec?)] = []
        for p in planned {
            for case .setAttributes(let path, let mode, let mtime) in p.actions { changes.append((path, mode, mtime)) }
        }
        var failed: [RelativePath: any Error] = [:]
        for (change, result) in zip(changes, mirror.setAttributesAll(changes)) {
            switch result {
            case .success: pass.summary.attributesSet += 1
            case .failure(let error): failed[change.path] = error
            }
        }
        for p in planned {
            if let error = failed[p.state.path] {
                report(error, path: p.state.path, into: &pass.summary)
                continue
            }
            do {
                for action in p.actions {
                    if case .setAttributes = action { continue }
                    try execute(action, state: p.state, &pass)
                }
            } catch { report(error, path: p.state.path, into: &pass.summary) }
        }
    }

    /// An engine over the given seams with the records already loaded; its record writes
    /// run where `recordScheduler` puts them (`.serialQueue()` beside concurrent copies:
    /// the manager's actor never waits on the disk).
    public init(source: any FileSystemProviding, mirror: any MirrorProviding, store: any BookmarkStorageProviding,
                records: RecordSet, options: SyncOptions, logger: Logger = .silent,
                recordScheduler: RecordScheduler = .immediate) {
        self.source = source
        self.mirror = mirror
        self.store = store
        self.records = records
        self.options = options
        self.logger = logger
        recordWriter = RecordWriter(mirror: mirror, store: store, scheduler: recordScheduler, logger: logger)
    }

    /// Takes new options (SIGHUP) for the passes that follow.
    public func reconfigure(_ options: SyncOptions) {
        self.options = options
    }

    var planner: Planner { Planner(deleteEnabled: options.deleteEnabled, limits: limits) }

    /// What the mirror's file system holds, as the records say (the probe's result).
    public var limits: MirrorLimits { records.mirror?.limits ?? .none }

    /// Paths the mirror cannot hold, with why, as the passes and events found them.
    public private(set) var skipped: [RelativePath: String] = [:]

    // MARK: Scan

    /// Compares source, records and mirror below `scope`; changes nothing. Warns once
    /// per process about each special file.
    public func scan(_ scope: RelativePath = .root) throws -> SyncScan {
        let scan = try scanner().scan(scope)
        noteSpecial(scan)
        noteSkipped(scan)
        return scan
    }

    /// A scanner over the records as they are now.
    func scanner() -> TreeScanner {
        TreeScanner(source: source, mirror: mirror, records: records, options: options, io: scanIO, heartbeat: heartbeat)
    }

    /// Warns once per process about each special file a scan met.
    func noteSpecial(_ scan: SyncScan) {
        for path in scan.specialFiles where warned.insert(path).inserted {
            logger.warning("skipping \(path.escaped): not a regular file, directory or symlink")
        }
    }

    // MARK: Apply

    /// True when the options' brake holds this scan's deletions.
    public func brakeHolds(_ scan: SyncScan) -> Bool { MassDeleteBrake(options).holds(scan) }

    /// Applies a scan: every step in order, errors per path, records appended in
    /// batches after the mirror changes they describe are durable.
    /// With `deferCopies`, file copies are not made but listed in
    /// `summary.deferredCopies`, for the caller to install (`MirrorProviding.install`) and
    /// record (`recordCopy`).
    /// `brake` holds the deletions of a pass with too many (nil: the options' brake).
    public func apply(_ scan: SyncScan, deferCopies: Bool = false, brake: MassDeleteBrake? = nil) -> SyncSummary {
        var pass = PassApplication(brake: brake ?? MassDeleteBrake(options), defersCopies: deferCopies)
        apply(scan, &pass)
        return pass.summary
    }

    /// Applies a scan with `pass` (made for it, or carrying a round's state from the scan
    /// before).
    func apply(_ scan: SyncScan, _ pass: inout PassApplication) {
        pass.summary.skippedUnholdable = scan.unholdable.count
        pass.hold = pass.brake.holds(scan)
        pass.progress = PassProgress(planned: scan.plannedCopies, planComplete: true)
        // Room for the records the pass adds, made at once: the index is rebuilt once, not
        // at each doubling.
        var adding = records.table[scan.scope] == nil ? 1 : 0
        for step in scan.steps {
            if case .path(let state, _, _) = step, state.record == nil, state.source != nil { adding += 1 }
        }
        records.table.reserveCapacity(records.table.count + adding)
        for error in scan.unreadable { report(error, path: error.path ?? scan.scope, into: &pass.summary) }
        applyAll(Self.ordered(scan), &pass)
        close(&pass, staleRecords: scan.staleRecords)
        // A directory fixed again by the close, from a fresh stat, needs no finish from the
        // scan's older one at the round's end.
        if case .atRoundEnd(var kept) = pass.finishes, !pass.refix.isEmpty {
            let applied = pass
            kept.removeAll { applied.refix.contains($0.path) && !applied.isBlocked($0.path) }
            pass.finishes = .atRoundEnd(kept)
        }
    }

    /// Applies the scans of a live round, disjoint scopes in path order, each as `apply`
    /// does with its brake. On a batching mirror the new directories and links each scan
    /// starts with are made first, all of them in one call each: a remote burst of 150
    /// new directories made one round trip each before (25 ms apiece, copies held). The
    /// directories their stretches finish are finished together at the end (one stat and
    /// one attribute call; two round trips a scan before, 20-150 ms in a remote burst).
    public func apply(_ scans: [(scan: SyncScan, brake: MassDeleteBrake)], deferCopies: Bool) -> [SyncSummary] {
        // The finish policy: on a batching mirror, what the stretches finish waits for the
        // round's end; the directories and links are made ahead for every scan at once.
        let batching = mirror.batchesEntries && scans.count > 1
        var madeAhead: [RelativePath: Result<FileStat, any Error>] = [:]
        if batching {
            var directories: [(path: RelativePath, mode: UInt32)] = []
            var links: [(path: RelativePath, target: [UInt8], mtime: Timespec)] = []
            for (scan, brake) in scans {
                let stretch = Self.stretch(Self.ordered(scan)[...], PassApplication(brake: brake, defersCopies: deferCopies))
                directories += stretch.directories
                links += stretch.links
            }
            madeAhead = makeAhead(directories, links)
        }
        var finishes: PassApplication.FinishPolicy = batching ? .atRoundEnd([]) : .atStretchEnd
        var summaries: [SyncSummary] = []
        for (scan, brake) in scans {
            var pass = PassApplication(brake: brake, defersCopies: deferCopies, finishes: finishes, madeAhead: madeAhead)
            apply(scan, &pass)
            summaries.append(pass.summary)
            (finishes, madeAhead) = (pass.finishes, pass.madeAhead)
        }
        if case .atRoundEnd(let kept) = finishes, !kept.isEmpty {
            var pass = PassApplication(brake: MassDeleteBrake(options), defersCopies: deferCopies)
            finishAll(kept, &pass)
            recordWriter.flush()
            // An error goes with the scan whose scope holds its path.
            for error in pass.summary.errors {
                let i = error.path.flatMap { p in scans.lastIndex { p.isWithin($0.scan.scope) } } ?? scans.count - 1
                summaries[i].errors.append(error)
            }
            summaries[summaries.count - 1].attributesSet += pass.summary.attributesSet
        }
        return summaries
    }

    /// Carries out one action against the mirror and the records; a copy goes into the
    /// pass's next group, or back to the caller.
    func execute(_ action: SyncAction, state: PathState, _ pass: inout PassApplication) throws {
        switch action {
        case .copyFile(let path):
            if pass.defersCopies {
                pass.summary.deferredCopies.append(path)
                if let parent = path.parent { pass.deferredInto.insert(parent) }
                return
            }
            pass.batch.append(path)
            pass.batchBytes += state.source?.size ?? 0
            if pass.groupLimit == 0 { pass.groupLimit = min(mirror.firstGroupFiles, mirror.groupFiles) }
            if pass.batch.count >= pass.groupLimit || pass.batchBytes >= SyncEngine.groupBytes {
                pass.groupLimit = min(pass.groupLimit * 2, mirror.groupFiles)
                commitBatch(&pass)
            }
        case .makeDirectory(let path, let mode):
            let st = try pass.madeAhead.removeValue(forKey: path)?.get() ?? mirror.makeDirectory(path, mode: mode)
            pass.summary.createdDirectories += 1
            logger.debug("created directory \(path.escaped) (inode \(st.inode))")
        case .makeSymlink(let path, let target):
            let st = try pass.madeAhead.removeValue(forKey: path)?.get()
                ?? mirror.makeSymlink(path, target: target, mtime: state.source?.mtime ?? Timespec(seconds: 0, nanoseconds: 0))
            pass.summary.createdLinks += 1
            if let s = state.source { change(.put(FileRecord(path: path, source: s, linkTarget: target, mirrorInode: st.inode)), &pass) }
            logger.debug("linked \(path.escaped)")
        case .remove(let path):
            try mirror.remove(path)
            pass.summary.removedEntries += 1
            logger.info("removed \(path.escaped)")
            for p in records.table.paths(within: path) { change(.remove(p)) }
        case .setAttributes(let path, let mode, let mtime):
            try mirror.setAttributes(path, mode: mode, mtime: mtime)
            pass.summary.attributesSet += 1
        case .updateRecord(let record):
            change(.put(record), &pass)
        case .dropRecord(let path):
            change(.remove(path))
        case .skipSpecial:
            pass.summary.skippedSpecial += 1
        case .skipUnholdable:
            break
        case .renameFrom(let old, let path):
            guard let s = state.source else { return }
            do {
                try mirror.rename(old, to: path)
            } catch {
                logger.debug("\(old.escaped) -> \(path.escaped) not renamed (\(error)); copying")
                return try execute(.copyFile(path), state: state, &pass)
            }
            guard let m = try mirror.stat(path) else { return }
            if m.mode != s.mode { try mirror.setAttributes(path, mode: s.mode, mtime: nil) }
            change(.remove(old))
            change(.put(FileRecord(path: path, source: s, mirrorInode: m.inode)), &pass)
            pass.summary.renamed += 1
            logger.info("renamed \(old.escaped) to \(path.escaped)")
        }
    }

    /// Keeps the scan's unholdable paths (what it covered is replaced) and warns once per
    /// path per process.
    func noteSkipped(_ scan: SyncScan) {
        skipped = skipped.filter { !$0.key.isWithin(scan.scope) }
        for (path, reason) in scan.unholdable {
            skipped[path] = reason
            if warned.insert(path).inserted { logger.warning("skipping \(path.escaped): \(reason)") }
        }
    }

    static let tooLargeReason = "too large for the mirror's file system"

    /// A file the mirror's file system refused as too large (EFBIG): skipped like a name
    /// it cannot hold, warned about once, its record gone; the limit learned (and kept
    /// with the mirror root), so that no pass copies a file that size again.
    public func skipTooLarge(_ path: RelativePath, size: UInt64) {
        skipped[path] = Self.tooLargeReason
        if warned.insert(path).inserted { logger.warning("skipping \(path.escaped): \(Self.tooLargeReason)") }
        if records.table[path] != nil { change(.remove(path)) }
        guard size > 0, var mirror = records.mirror, (mirror.limits.maxFileSize ?? .max) >= size else { return }
        mirror.limits.maxFileSize = size - 1
        change(.setMirror(mirror))
    }

    /// Records a finished copy.
    public func recordCopy(_ result: CopyResult) {
        change(.put(FileRecord(path: result.path, source: result.source, mirrorInode: result.installed.inode)))
    }

    /// Records a copy the pass made itself.
    func recordCopy(_ result: CopyResult, _ pass: inout PassApplication) {
        change(.put(FileRecord(path: result.path, source: result.source, mirrorInode: result.installed.inode)), &pass)
    }

    /// Sets directories' modes and mtimes from the source after their entries changed, and
    /// their records: one stat and one attribute call for all on a batching mirror. Returns
    /// the errors (a directory gone from either side is skipped).
    public func fixDirectories(_ paths: [RelativePath]) -> [KeepSyncError] {
        var finishes: [Finish] = []
        for path in paths {
            if let s = (try? source.stat(path)) ?? nil, s.kind == .directory { finishes.append((path, s, true)) }
        }
        var pass = PassApplication(brake: MassDeleteBrake(options))
        finishAll(finishes, &pass)
        return pass.summary.errors
    }

    /// Sets one directory's mode and mtime from the source after its entries changed, and
    /// its record; its errors thrown (nothing when it is gone from either side).
    public func fixDirectory(_ path: RelativePath) throws {
        var pass = PassApplication(brake: MassDeleteBrake(options))
        try fixDirectory(path, writingInto: &pass)
    }

    /// `fixDirectory` at a pass's close: its record's slot counts among the pass's writes.
    func fixDirectory(_ path: RelativePath, writingInto outer: inout PassApplication) throws {
        guard let s = try source.stat(path), s.kind == .directory,
              let m = try mirror.stat(path), m.kind == .directory else { return }
        var pass = PassApplication(brake: outer.brake)
        pass.writes = outer.writes
        defer { outer.writes = pass.writes }
        for action in planner.finishDirectory(path: path, source: s, mirror: m, record: records.table[path], entriesChanged: true) {
            try execute(action, state: PathState(path: path, source: s, record: nil, mirror: m), &pass)
        }
    }

    /// Applies a live rename to the mirror and the records when the mirror holds
    /// exactly what was recorded at `from` and the source object at `to` is that same
    /// object. Returns false (nothing changed) otherwise.
    public func applyRename(from: RelativePath, to: RelativePath) throws -> Bool {
        guard !from.isRoot, !to.isRoot, !to.isWithin(from), let record = records.table[from],
              let sourceNow = try source.stat(to), sourceNow.device == record.device, sourceNow.inode == record.inode,
              sourceNow.kind == record.kind,
              // The kind too: after a power cut the number may name another object (ext4 reuses them).
              let mirrorNow = try mirror.stat(from), limits.recordedInode(mirrorNow.inode) == record.mirrorInode,
              mirrorNow.kind == record.kind,
              let parent = to.parent, let mirrorParent = try mirror.stat(parent), mirrorParent.kind == .directory,
              planner.unholdable(to, kind: sourceNow.kind) == nil
        else { return false }
        // A case-only rename on a mirror without case: `to` names `from` itself.
        let sameName = from.parent == to.parent && limits.caseKey(from.name) == limits.caseKey(to.name)
        if !sameName, let existing = try mirror.stat(to), existing.kind == .directory {
            try mirror.remove(to)
        }
        try mirror.rename(from, to: to)
        for path in records.table.paths(within: to) where !path.isWithin(from) { change(.remove(path)) }
        for path in records.table.paths(within: from) {
            guard let r = records.table[path] else { continue }
            var moved = r
            moved.path = path.rebased(from: from, to: to)!
            change(.remove(path))
            change(.put(moved))
        }
        logger.debug("renamed \(from.escaped) to \(to.escaped) in the mirror")
        return true
    }

    func report(_ error: any Error, path: RelativePath, into summary: inout SyncSummary) {
        let e = (error as? KeepSyncError) ?? KeepSyncError(.io, "\(error)", path: path)
        var withPath = e
        if withPath.path == nil { withPath.path = path }
        summary.errors.append(withPath)
        logger.error("\(withPath.description)")
    }

    /// Queues a record change; written in batches.
    func change(_ c: RecordChange) {
        var c = c
        // Where mirror inodes do not survive a remount, records keep none.
        if case .put(var r) = c, !limits.stableInodes, r.mirrorInode != 0 {
            r.mirrorInode = 0
            c = .put(r)
        }
        records.apply(c)
        if recordWriter.add(c) >= recordBatch { recordWriter.flush() }
    }

    /// Queues a record change a pass makes; a put counts among a streamed pass's writes.
    func change(_ c: RecordChange, _ pass: inout PassApplication) {
        change(c)
        if case .put(let r) = c, pass.writes != nil, let slot = records.table.slotIndex(of: r.path) { pass.writes?.insert(slot) }
    }

    /// Records the source root's identity when it differs from the stored one.
    public func recordRoot(_ identity: FileIdentity) throws {
        guard records.root != identity else { return }
        records.root = identity
        try store.apply([.setRoot(identity)])
    }
}
