import KeepSyncCore

/// What `sync` and `run` do first: take the lock, load the records, apply the
/// vanished-or-replaced-source and -mirror rules, create the mirror (on a first run),
/// probe what its file system holds (once per mirror) and record that with the mirror root.
struct PreparedState {
    /// The single-instance lock (released by the caller).
    let lock: StateLock
    /// The record store.
    let store: JournalBookmarkStore
    /// The records as loaded, the mirror root (as probed, now or on its first run) in them.
    let records: RecordSet
    /// The source root's stat, checked safe.
    let root: FileStat
    /// Why the recorded mirror cannot be written now (missing or replaced), when
    /// `pausingForMirror` let preparation go on without it.
    private(set) var mirrorAway: String?

    /// Prepares, or throws `.configuration` (exit 2) / `.unsafe` (exit 3) after calling
    /// `refused` with the message, leaving the mirror untouched. The load beats `heartbeat`.
    /// `pausingForMirror` (`run`): a recorded mirror that is missing or replaced is no
    /// refusal but `mirrorAway`, nothing written there.
    init(_ settings: Settings, logger: Logger, heartbeat: Heartbeat? = nil, remote: RemoteRoot? = nil,
         pausingForMirror: Bool = false, refused: (RecordSet, String) -> Void) throws {
        try HostPaths.makeDirectories(settings.state, mode: 0o700)
        lock = try StateLock(stateDirectory: settings.state)
        do {
            store = try JournalBookmarkStore(directory: settings.state, heartbeat: heartbeat)
            var records = try store.load()
            logger.debug("loaded \(records.table.count) records from \(HostPaths.display(settings.state))")
            if records.wasDamaged {
                logger.warning("the records in \(HostPaths.display(settings.state)) were damaged; comparing source and mirror in full")
            }
            let rootStat = HostPaths.stat(settings.source)
            let rootIsEmpty = rootStat?.kind == .directory
                ? ((try? PosixFileSystem(rootPath: settings.source).list(.root).isEmpty) ?? false) : false
            try SourceSafety.require(settings, root: rootStat, rootIsEmpty: rootIsEmpty, records: records, refused: refused)
            root = rootStat!
            if let remote {
                mirrorAway = try Self.prepareRemote(remote, settings: settings, records: &records, store: store, logger: logger,
                                                    pausing: pausingForMirror, refused: refused)
                self.records = records
                return
            }
            let current = MirrorProbe.currentMirrorRoot(settings.mirror)
            if let away = Self.away(settings, records: records, current: current, pausing: pausingForMirror) {
                mirrorAway = away
                self.records = records
                return
            }
            try MirrorSafety.require(settings, records: records, current: current, refused: refused)
            try HostPaths.makeDirectories(settings.mirror, mode: 0o755)
            var probed: MirrorRoot
            // Once per mirror: what was found for this one stands, and a restart writes
            // nothing there (not even the root's ctime moves). A first run, another mirror
            // (adopted with --accept-new-mirror) or none recorded is probed.
            if let recorded = records.mirror, let current, recorded.isSameRoot(as: current) {
                probed = recorded
            } else {
                do { probed = try MirrorProbe.probe(settings.mirror) } catch {
                    // A full or read-only mirror cannot be tried: what was found before stands
                    // (run waits for it to take writes again, as for any full mirror).
                    guard let fallback = records.mirror ?? MirrorProbe.currentMirrorRoot(settings.mirror) else { throw error }
                    logger.warning("cannot try what the mirror's file system holds (\((error as? KeepSyncError)?.message ?? "\(error)")); \(records.mirror == nil ? "assuming it holds everything" : "using what was found before")")
                    probed = fallback
                }
            }
            let summary = probed.limits.summary
            let where_ = "mirror on \(probed.limits.fileSystem.isEmpty ? "this file system" : probed.limits.fileSystem)"
            if summary.isEmpty { logger.debug("\(where_): holds everything") } else { logger.info("\(where_): \(summary)") }
            // Device numbers of a FUSE mount change at each mount: the recorded one stays.
            if let old = records.mirror, old.isSameRoot(as: probed), !probed.limits.stableInodes { probed.identity = old.identity }
            if records.mirror != probed { try store.apply([.setMirror(probed)]) }
            records.mirror = probed
            self.records = records
        } catch {
            lock.release()
            throw error
        }
    }

    /// The remote mirror's root: checked as a local one (nothing written to a missing or
    /// replaced directory while records exist), made on a first run. A host that cannot be
    /// reached is no reason to refuse `run` once a root was recorded: the agent waits for
    /// it (its passes check the root again); with nothing recorded it is an error.
    /// Returns why the mirror is away when `pausing` let it be.
    private static func prepareRemote(_ remote: RemoteRoot, settings: Settings, records: inout RecordSet,
                                      store: JournalBookmarkStore, logger: Logger, pausing: Bool,
                                      refused: (RecordSet, String) -> Void) throws -> String? {
        let current: MirrorRoot?
        do { current = try remote.current() } catch let error as KeepSyncError where error.code == .unreachable {
            guard records.mirror != nil else { throw error }
            logger.warning("\(error.message): the mirror is checked once it answers")
            return nil
        }
        if let away = away(settings, records: records, current: current, pausing: pausing) { return away }
        try MirrorSafety.require(settings, records: records, current: current, refused: refused)
        try remote.checkRsync(logger: logger)
        var root = current
        if root == nil {
            try remote.make()
            root = try remote.current()
        }
        guard var root else { throw KeepSyncError(.io, "the mirror directory on \(remote.target.host) vanished as it was made") }
        // --accept-new-mirror adopts what is there now.
        if let old = records.mirror, old.isSameRoot(as: root) { root.identity = old.identity }
        if records.mirror != root { try store.apply([.setMirror(root)]) }
        records.mirror = root
        return nil
    }

    /// Why a recorded mirror root cannot be written now, when `pausing` and the records
    /// hold that root (`run` then waits for it); nil otherwise (`MirrorSafety.require`
    /// decides: records without a mirror root are refused, as `sync` refuses).
    private static func away(_ settings: Settings, records: RecordSet, current: MirrorRoot?, pausing: Bool) -> String? {
        guard pausing, records.mirror != nil else { return nil }
        return MirrorSafety.problem(settings, records: records, current: current)
    }
}
