/// One mirror's whole life in the agent: the records' store and the mirror root checked
/// at start (both kept across generations), the current generation's manager (and
/// through it its engine, records, record writer and health; nil while mirroring is
/// paused), and what status says of it. The agent holds one; several mirrors (SPEC
/// "Several mirrors") hold one each, fed by one watcher (`SyncManager.feed`).
struct MirrorLink<C: Clock> where C.Duration == Duration {
    /// The records on disk.
    let store: any AgentRecordStore
    /// The mirror root as prepared (checked and probed at start).
    let root: MirrorRoot?
    /// The current generation's manager.
    var manager: SyncManager<C>?
    /// When the mirror's host stopped answering (status wording), nil while it answers.
    var unreachableSince: String?
    /// When a rewrite of the records was last asked for, and the snapshot's size then.
    var compactionAsked: (at: C.Instant, snapshot: UInt64)?
}
