import KeepSyncTestSupport
import Synchronization
@testable import KeepSyncCore

/// The simulated process's life: a crash can be armed to happen at the k-th "crash point"
/// from now (every mutating mirror call and every store append or compaction). From that
/// point on the process is dead: no further mirror change or store append takes effect,
/// as after `kill -9`, until the driver throws the manager away and restarts.
final class SimulationPower: Sendable {
    enum Reach { case alive, crashesNow, dead }

    private struct State {
        var remaining: Int?
        var crashed = false
        var points = 0
        var lastPoint = ""
        var rng: SplitMix64
    }

    private let state: Mutex<State>

    init(seed: UInt64) { state = Mutex(State(rng: SplitMix64(seed: seed, stream: 3))) }

    /// Crashes at the `k`-th crash point from now (k ≥ 1).
    func arm(after k: Int) { state.withLock { $0.remaining = k } }

    func disarm() { state.withLock { $0.remaining = nil } }

    var isArmed: Bool { state.withLock { $0.remaining != nil } }

    var crashed: Bool { state.withLock { $0.crashed } }

    /// Where the crash happened.
    var lastPoint: String { state.withLock { $0.lastPoint } }

    /// A new process after a restart.
    func revive() {
        state.withLock {
            $0.crashed = false
            $0.remaining = nil
        }
    }

    /// Called at each crash point, before the operation.
    func reach(_ what: @autoclosure () -> String) -> Reach {
        state.withLock { s in
            if s.crashed { return .dead }
            s.points += 1
            guard let r = s.remaining else { return .alive }
            if r > 1 {
                s.remaining = r - 1
                return .alive
            }
            s.remaining = nil
            s.crashed = true
            s.lastPoint = what()
            return .crashesNow
        }
    }

    /// A coin of the crash's own stream (what a torn operation left behind).
    func coin() -> Bool { state.withLock { $0.rng.chance(0.5) } }

    /// A random number of the crash's own stream.
    func draw(_ bound: Int) -> Int { state.withLock { $0.rng.below(bound) } }
}

/// Injected errors: each (operation, path, occurrence) gets a fault or not from a hash of
/// the seed, so the answer does not depend on the order in which the product asks.
final class SimulationFaults: Sendable {
    private struct State {
        var active = false
        var mirrorProbability = 0.0
        var sourceProbability = 0.0
        var occurrences: [String: UInt64] = [:]
        var fired: [String] = []
        var total = 0
    }

    /// The injected errno values and the codes the errno table maps them to.
    static let errnos: [(name: String, errno: Int32, code: KeepSyncError.Code)] = [
        ("ENOSPC", 28, .noSpace), ("EIO", 5, .io), ("EACCES", 13, .permissionDenied), ("ENOENT", 2, .notFound),
    ]

    private let state = Mutex(State())
    let seed: UInt64

    init(seed: UInt64) { self.seed = seed }

    func configure(mirror: Double, source: Double) {
        state.withLock {
            $0.mirrorProbability = mirror
            $0.sourceProbability = source
        }
    }

    var active: Bool {
        get { state.withLock { $0.active } }
        set { state.withLock { $0.active = newValue } }
    }

    /// Faults fired since the last call, in firing order.
    func takeFired() -> [String] {
        state.withLock { s in
            defer { s.fired.removeAll() }
            return s.fired
        }
    }

    var total: Int { state.withLock { $0.total } }

    /// The mirror's failure hook: any operation, any of the four errnos.
    func mirror(_ op: String, _ path: RelativePath) -> KeepSyncError? {
        decide(side: "mirror", op: op, path: path, errnos: Self.errnos)
    }

    /// The source's failure hook: reads only (the workload's own renames never fail),
    /// with an unreadable file or directory (EACCES) or a disk error (EIO).
    func source(_ op: InMemoryTree.Operation, _ path: RelativePath) -> KeepSyncError? {
        guard op == .open || op == .list else { return nil }
        return decide(side: "source", op: op.rawValue, path: path, errnos: [Self.errnos[1], Self.errnos[2]])
    }

    private func decide(side: String, op: String, path: RelativePath,
                        errnos: [(name: String, errno: Int32, code: KeepSyncError.Code)]) -> KeepSyncError? {
        state.withLock { s in
            guard s.active else { return nil }
            let p = side == "mirror" ? s.mirrorProbability : s.sourceProbability
            guard p > 0 else { return nil }
            let key = side + "/" + op + "/" + path.escaped
            let n = s.occurrences[key, default: 0]
            s.occurrences[key] = n + 1
            let words = [seed, SplitMix64.fold(Array(key.utf8)), n]
            guard SplitMix64.hashUnit(words) < p else { return nil }
            let e = errnos[Int(SplitMix64.hashUnit(words + [1]) * Double(errnos.count))]
            s.fired.append("\(side) \(op) \(path.escaped) \(e.name)")
            s.total += 1
            return KeepSyncError(e.code, "\(op): injected \(e.name)", path: path, errno: e.errno)
        }
    }
}

/// Another process writing a source file while keepsync copies it: when asked at the
/// start of a copy (after the source was opened), sometimes appends to the file.
final class SimulationInterference: Sendable {
    struct Write {
        var path: RelativePath
        var description: String
        var events: [WatchEvent]
        /// The file right after the write: several writes during one manager call are
        /// each a version the product may copy.
        var node: InMemoryTree.Node?
    }

    private struct State {
        var probability = 0.0
        var rng: SplitMix64
        var tag = 0
        var writes: [Write] = []
    }

    private let state: Mutex<State>
    let source: InMemoryTree

    init(seed: UInt64, source: InMemoryTree) {
        self.source = source
        state = Mutex(State(rng: SplitMix64(seed: seed, stream: 4)))
    }

    var probability: Double {
        get { state.withLock { $0.probability } }
        set { state.withLock { $0.probability = newValue } }
    }

    /// Called between two reads of a copy of `path`: maybe rewrite the file in place, same
    /// length, other bytes, so that the copy holds the start of one version and the rest
    /// of another unless the product notices; half of them put the mtime back (`touch -r`,
    /// `rsync --inplace -t`), so that only the ctime tells.
    func betweenReads(_ path: RelativePath) {
        state.withLock { s in
            guard s.probability > 0, s.rng.chance(s.probability / 4),
                  let node = source.node(path), node.kind == .regular, !node.content.isEmpty else { return }
            s.tag += 1
            let keepsMtime = s.rng.chance(0.5)
            source.writeFile(path, node.content.map { $0 &+ 1 }, mode: node.mode, mtime: keepsMtime ? node.mtime : nil)
            s.writes.append(Write(path: path, description: "concurrent rewrite in place of \(path.escaped)\(keepsMtime ? ", mtime put back," : "") mid-read",
                                  events: [.changed(path), .closedAfterWrite(path)], node: source.node(path)))
        }
    }

    /// Called when a copy of `path` starts: maybe rewrite the source file now.
    func copyStarts(_ path: RelativePath) {
        state.withLock { s in
            guard s.probability > 0, s.rng.chance(s.probability),
                  let node = source.node(path), node.kind == .regular else { return }
            s.tag += 1
            let extra = Array("+w\(s.tag);".utf8)
            source.writeFile(path, node.content + extra, mode: node.mode)
            s.writes.append(Write(path: path, description: "concurrent append \(path.escaped) (+\(extra.count) bytes)",
                                  events: [.changed(path), .closedAfterWrite(path)], node: source.node(path)))
        }
    }

    /// The writes made since the last call.
    func take() -> [Write] {
        state.withLock { s in
            defer { s.writes.removeAll() }
            return s.writes
        }
    }
}

/// The record store behind the crash points. `InMemoryStore` is durable per `apply`
/// (the contract: an append is fsynced before it returns), so a crash loses exactly the
/// batches not yet appended. Keeps the batches since the last compaction so that a
/// damaged store (a torn tail) can be modelled as losing the last few.
final class SimulationStore: BookmarkStorageProviding {
    let durable: InMemoryStore
    let power: SimulationPower
    private let log = Mutex<(base: RecordSet, batches: [[RecordChange]])>((RecordSet(), []))
    /// The mirror, for the check at each append (I9), and what it found.
    let mirror: InMemoryTree
    private let found = Mutex<[String]>([])
    /// Record changes checked against the mirror's durable state so far.
    private let checked = Mutex(0)

    /// I10, at each append, when the mirror keeps versions.
    let versions: SimulationVersionOracle?

    init(durable: InMemoryStore, power: SimulationPower, mirror: InMemoryTree, versions: SimulationVersionOracle? = nil) {
        self.durable = durable
        self.power = power
        self.mirror = mirror
        self.versions = versions
    }

    /// I9, at each append: records follow the mirror. A record that is true of the
    /// mirror now (its inode at its path; for a removal, nothing there) is true of what
    /// the disk holds: the entry, its directories and a file's data made durable first.
    private func checkDescribedIsDurable(_ changes: [RecordChange]) {
        guard let disk = mirror.durability else { return }
        let live = mirror.nodes
        var problems: [String] = []
        var n = 0
        for change in changes {
            switch change {
            case .put(let r) where !r.path.isRoot:
                guard let node = live[r.path], node.inode == r.mirrorInode, node.kind == r.kind else { continue }
                n += 1
                if disk.entries[r.path]?.inode != r.mirrorInode {
                    problems.append("I9: \(r.path.escaped) was recorded (mirror inode \(r.mirrorInode)) while its entry was not durable")
                } else if disk.unsyncedData.contains(node.inode) {
                    problems.append("I9: \(r.path.escaped) was recorded while its data was not durable")
                }
            case .remove(let path) where !path.isRoot:
                guard live[path] == nil else { continue }
                n += 1
                if disk.absences[path] != nil { problems.append("I9: the removal of \(path.escaped) was recorded while it was not durable") }
            default:
                break
            }
        }
        checked.withLock { $0 += n }
        if !problems.isEmpty { found.withLock { $0 += problems } }
    }

    /// What the appends' checks found since the last call, and how many they checked.
    func takeFindings() -> (problems: [String], checked: Int) {
        (found.withLock { f in defer { f.removeAll() }; return f }, checked.withLock { c in defer { c = 0 }; return c })
    }

    func load() throws -> RecordSet { try durable.load() }

    func apply(_ changes: [RecordChange]) throws {
        switch power.reach("store append (\(changes.count) changes)") {
        case .alive: break
        case .crashesNow:
            // Killed right after the append's fsync, or right before it.
            if power.coin() { try append(changes) }
            throw KeepSyncError(.io, "the process was killed")
        case .dead: throw KeepSyncError(.io, "the process was killed")
        }
        try append(changes)
    }

    private func append(_ changes: [RecordChange]) throws {
        checkDescribedIsDurable(changes)
        if let versions {
            versions.appending(changes, after: (try? durable.load()) ?? RecordSet())
            let problems = versions.takeProblems()
            if !problems.isEmpty { found.withLock { $0 += problems } }
        }
        try durable.apply(changes)
        log.withLock { $0.batches.append(changes) }
    }

    func compact(_ set: RecordSet) throws {
        switch power.reach("store compaction") {
        case .alive: break
        case .crashesNow:
            // The snapshot's rename either happened or not.
            if power.coin() { try replace(set) }
            throw KeepSyncError(.io, "the process was killed")
        case .dead: throw KeepSyncError(.io, "the process was killed")
        }
        try replace(set)
    }

    private func replace(_ set: RecordSet) throws {
        try durable.compact(set)
        log.withLock { $0 = (set, []) }
    }

    /// Damage: the last `lost` batches of the log are torn off (a torn tail is detected
    /// and discarded); returns how many were lost.
    func tearTail(_ lost: Int) -> Int {
        let (set, dropped) = log.withLock { l -> (RecordSet, Int) in
            let keep = max(0, l.batches.count - lost)
            var set = l.base
            for batch in l.batches.prefix(keep) { for c in batch { set.apply(c) } }
            let dropped = l.batches.count - keep
            l = (set, [])
            return (set, dropped)
        }
        var damaged = set
        damaged.wasDamaged = dropped > 0
        try? durable.compact(damaged)
        return dropped
    }
}

/// A concurrent copy executor whose work the driver runs, one item at a time, in an
/// order the seed chooses: copies in flight while events arrive, deterministically.
final class SimulationCopies: Sendable {
    private let works = Mutex<[@Sendable () -> Void]>([])

    func executor(limit: Int) -> CopyExecutor {
        CopyExecutor(limit: limit, recordScheduler: .held()) { [self] work in works.withLock { $0.append(work) } }
    }

    var count: Int { works.withLock { $0.count } }

    /// Takes the `index`-th held work item out.
    func take(_ index: Int) -> (@Sendable () -> Void)? {
        works.withLock { w in index < w.count ? w.remove(at: index) : nil }
    }

    /// The process died: copies not started never run.
    func discardAll() { works.withLock { $0.removeAll() } }
}

extension SyncManager {
    /// The engine's in-memory records (white-box, for the simulation's checks).
    func simulationRecords() -> RecordSet { engine.records }

    /// Copy work items handed to the executor and not finished.
    func simulationWorkers() -> Int { copies.workers }
}
