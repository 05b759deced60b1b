/// One mirror's whole life in the agent: its settings and host, the records' store and the
/// mirror root checked at start (both kept across generations), the current generation's
/// manager (and through it its engine, records, record writer and health; nil while the
/// link is paused), and what its status says. The agent holds one per mirror (SPEC
/// "Several mirrors"), all fed by one watcher through a `WatchFanout`.
struct MirrorLink<C: Clock> where C.Duration == Duration {
    /// This mirror's settings (the source's are the same in every link).
    var settings: Settings
    /// The machine as this mirror sees it (a remote mirror's connection is its own).
    let host: any AgentHost
    /// The records on disk.
    let store: any AgentRecordStore
    /// Releases the state directory's lock.
    let release: () -> Void
    /// The mirror root as prepared (checked and probed at start), or as recorded when it
    /// was away at start.
    let root: MirrorRoot?
    /// The source root's recorded identity.
    let identity: FileIdentity?
    /// The records the next generation starts from.
    var records: RecordSet
    /// The current generation's manager.
    var manager: SyncManager<C>?
    /// What it is doing (`paused` while its mirror is away or the source is lost).
    var state = AgentState.starting
    /// Why its mirror cannot be written now: the link waits for it to come back.
    var away: String?
    /// status.json in its state directory.
    var statusFile: StatusFile<C>
    /// When its last full pass ended (status.json), and how many it has seen.
    var lastFullSync: String?
    var seenPasses = 0
    /// Whether it has been watching since the agent started (its first pass done).
    var hasWatched = false
    /// Counts its versions for status.json (versions on); outlives a generation.
    var versionCounter: VersionCounter?
    /// When the mirror's host stopped answering (status wording), nil while it answers.
    var unreachableSince: String?
    /// When a rewrite of the records was last asked for, and the snapshot's size then.
    var compactionAsked: (at: C.Instant, snapshot: UInt64)?

    /// A link over prepared records.
    init(settings: Settings, host: any AgentHost, prepared: PreparedRecords, writer: any StatusWriter) {
        self.settings = settings
        self.host = host
        store = prepared.store
        release = prepared.release
        records = prepared.records
        records.root = FileIdentity(device: prepared.root.device, inode: prepared.root.inode)
        identity = records.root
        root = records.mirror
        away = prepared.mirrorAway
        statusFile = StatusFile(writer: writer)
    }

    /// The name status and the log give it.
    var name: String { settings.mirrorLabel }
}
