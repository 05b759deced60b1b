/// What applying one scan or pass keeps from one step to the next: its summary, the
/// brake, the directories whose entries changed, the copies batched for the next group
/// and the groups in flight, and where a directory's finish goes. Made by each `apply`
/// and `fullPass`; the engine itself keeps nothing of a pass between calls.
struct PassApplication {
    /// Where the finishes of a stretch of steps go (see `SyncEngine.applyAll`).
    enum FinishPolicy {
        /// Made at the stretch's end: one stat and one attribute call for all.
        case atStretchEnd
        /// Kept, with the others of the round, for the round's end (`apply(_ scans:)`).
        case atRoundEnd([SyncEngine.Finish])
    }

    var summary = SyncSummary()
    var brake: MassDeleteBrake
    /// The brake holds this pass's deletions (known once all of them are).
    var hold = false
    /// Directories whose entries changed, until their finish.
    var dirty: Set<RelativePath> = []
    /// Whether finishes are remembered: later steps may change those directories' entries
    /// (a rename out of one, deletions after renames), and they are then fixed again.
    var remembersFinishes = true
    var finished: Set<RelativePath> = []
    var refix: Set<RelativePath> = []
    /// Directories whose entries cannot be worked on (failed, or held by the brake).
    var blocked: [RelativePath] = []

    /// Copies are handed back to the caller (`run`: the manager's queue) in
    /// `summary.deferredCopies`, not installed in the engine's groups (`sync`).
    let defersCopies: Bool
    /// Directories a copy handed back goes into: their finish is the caller's too, once
    /// the copies landed (`SyncSummary.deferredFinishes`).
    var deferredInto: Set<RelativePath> = []
    /// Copies waiting for their group commit, and their size.
    var batch: [RelativePath] = []
    var batchBytes: UInt64 = 0
    /// The files the next group commit takes (`MirrorProviding.firstGroupFiles`, doubling).
    var groupLimit = 0
    /// Directory finishes waiting for the batch (their mtimes must follow the renames).
    var waitingFinishes: [SyncEngine.Finish] = []
    /// Group installs under way beside the walk (at most the mirror's `passGroups` or
    /// `concurrentGroups` less one), oldest first, each with the directory finishes that
    /// wait for it.
    var inFlight: [(group: any PendingInstall, finishes: [SyncEngine.Finish])] = []
    /// Directory finishes the stretch of steps under way keeps for its end, nil outside one.
    var stretchFinishes: [SyncEngine.Finish]?
    /// Where the stretches' finishes go.
    var finishes: FinishPolicy
    /// Directories and links made at once ahead of their steps (`makeAhead`).
    var madeAhead: [RelativePath: Result<FileStat, any Error>]
    /// The copies of the pass: made, and planned so far.
    var progress = PassProgress()
    /// Record slots a streamed full pass wrote (their records are not stale); nil outside one.
    var writes: BitSet?

    init(brake: MassDeleteBrake, defersCopies: Bool = false, finishes: FinishPolicy = .atStretchEnd,
         madeAhead: [RelativePath: Result<FileStat, any Error>] = [:]) {
        self.brake = brake
        self.defersCopies = defersCopies
        self.finishes = finishes
        self.madeAhead = madeAhead
    }

    func isBlocked(_ p: RelativePath) -> Bool {
        blocked.contains { p != $0 && p.isWithin($0) }
    }

    mutating func markDirty(_ p: RelativePath) {
        guard let parent = p.parent else { return }
        dirty.insert(parent)
        if finished.contains(parent) { refix.insert(parent) }
    }
}
