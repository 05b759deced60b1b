import Foundation
import KeepSyncTestSupport
import Synchronization
@testable import KeepSyncCore

/// The knobs of one seed's run, drawn from the seed.
struct SimulationSettings: CustomStringConvertible {
    /// Driver steps of the workload phase.
    var steps: Int
    /// Source operations before the first start.
    var initialOperations: Int
    /// Per-operation fault probability on the mirror and on source reads while faults are on.
    var mirrorFaults: Double
    var sourceFaults: Double
    /// The mass-delete brake at its default (50%) instead of off.
    var brake: Bool
    /// `--exclude '*.o'`.
    var excludeObjects: Bool
    /// Crashes happen.
    var crashes: Bool
    /// Probability that a delivered batch overflows (some events dropped, `.rescan` instead).
    var overflow: Double
    /// Probability that a copy races a writer of its source file.
    var interference: Double
    /// nil: copies run inline; n: a concurrent executor of n workers whose copies the
    /// driver runs at moments (and in an order) the seed chooses.
    var heldCopies: Int?
    /// The mirror is on a file system `syncfs` does not reach (FUSE): every barrier is
    /// made of per-entry fsyncs. Drawn from a stream of its own (the seeds found before
    /// it keep their plan); `KEEPSYNC_SIM_PER_FILE_SYNC=0|1` sets it for every seed.
    var perFileSync = false
    /// The mirror keeps versions (`LocalMirror(…, versions:)`, SPEC "Versions"), on a file
    /// system with hard links (`hardLinks`) or without (a replaced file moved aside).
    /// Off unless the test or `KEEPSYNC_SIM_VERSIONS=1` turns it on; `hardLinks` drawn
    /// from a stream of its own.
    var versions = false
    var hardLinks = false

    init(_ rng: inout SplitMix64, steps: Int?) {
        self.steps = steps ?? rng.int(40...70)
        initialOperations = rng.int(0...10)
        let faulty = rng.chance(0.5)
        mirrorFaults = faulty ? rng.pick([0.02, 0.05, 0.1, 0.25]) : 0
        sourceFaults = faulty && rng.chance(0.5) ? mirrorFaults / 3 : 0
        brake = rng.chance(0.25)
        excludeObjects = rng.chance(0.2)
        crashes = rng.chance(0.7)
        overflow = rng.pick([0, 0.05, 0.15])
        interference = rng.pick([0, 0, 0.1, 0.3])
        heldCopies = rng.chance(0.5) ? nil : rng.int(1...4)
    }

    var description: String {
        "steps=\(steps) initial=\(initialOperations) mirrorFaults=\(mirrorFaults) sourceFaults=\(sourceFaults) "
            + "brake=\(brake) exclude=\(excludeObjects) crashes=\(crashes) overflow=\(overflow) interference=\(interference) "
            + "copies=\(heldCopies.map { "held(\($0))" } ?? "inline")" + (perFileSync ? " perFileSync" : "")
            + (versions ? " versions(\(hardLinks ? "links" : "moves"))" : "")
    }
}

/// Product log lines, collected for the trace. Lines of a process that was killed are
/// dropped: a dead manager's last asynchronous work (a failed record append reported by a
/// task of its own) would otherwise land in the trace at a moment no seed decides.
final class SimulationLog: Sendable {
    private let state = Mutex((lines: [String](), generation: 0))

    /// A new process: lines of earlier ones are dropped from now on.
    func newGeneration() -> Int {
        state.withLock { s in
            s.generation += 1
            return s.generation
        }
    }

    /// The process died.
    func kill() { state.withLock { $0.generation += 1 } }

    func append(_ line: String, generation: Int? = nil) {
        state.withLock { s in
            if let generation, generation != s.generation { return }
            s.lines.append(line)
        }
    }

    func take() -> [String] {
        state.withLock { s in
            defer { s.lines.removeAll() }
            return s.lines
        }
    }
}

/// One seed: a workload on an in-memory source, the real SyncManager / SyncEngine /
/// Planner / records over an in-memory mirror and store, events delivered in random
/// batches with overflow drops, injected faults, crashes with restarts; the invariants
/// checked after every step, and convergence checked at the end.
final class SimulationRun {
    struct Outcome {
        var seed: UInt64
        var trace: [String]
        var violations: [String]
        var stats: [String: Int]
    }

    static let timing = SyncManager<ManualClock>.Timing(settle: .milliseconds(20), maxDelay: .milliseconds(2000))
    static let objectExclude = try! ExcludeMatcher(patterns: [Array("*.o".utf8)])
    /// A mirror that holds everything, on a file system syncfs does not reach.
    static let fuseLimits: MirrorLimits = {
        var limits = MirrorLimits.none
        limits.syncfsReaches = false
        return limits
    }()
    static let perFileSyncForced: Bool? = {
        switch ProcessInfo.processInfo.environment["KEEPSYNC_SIM_PER_FILE_SYNC"] {
        case "1": true
        case "0": false
        default: nil
        }
    }()

    /// `KEEPSYNC_SIM_VERSIONS=1`: every seed keeps versions; `0`: none.
    static let versionsForced: Bool? = {
        switch ProcessInfo.processInfo.environment["KEEPSYNC_SIM_VERSIONS"] {
        case "1": true
        case "0": false
        default: nil
        }
    }()
    /// The versions directory of a run that keeps them (the default name).
    static let versionsDirectory = VersionSettings.defaultDirectory
    /// The versions' tags: this time (UTC) plus the manual clock's.
    static let versionEpoch: Int64 = 1_796_607_000

    let seed: UInt64
    let settings: SimulationSettings
    var rng: SplitMix64
    /// Decides background compactions, apart from `rng`.
    var compactions: SplitMix64
    /// Decides whether a crash is a power cut and what it keeps, apart from `rng`.
    var cuts: SplitMix64
    let source: InMemoryTree
    let mirrorTree: InMemoryTree
    let durable = InMemoryStore()
    let power: SimulationPower
    let faults: SimulationFaults
    let interference: SimulationInterference
    let mirror: SimulationMirror
    let store: SimulationStore
    let clock = ManualClock()
    let copies = SimulationCopies()
    let log = SimulationLog()
    var logger: Logger
    var options: SyncOptions
    var manager: SyncManager<ManualClock>?
    var workload: SimulationWorkload
    var history = SimulationHistory()
    /// The source as the workload left it: nobody else may change it (I4).
    var expectedSource: [RelativePath: InMemoryTree.Node] = [:]
    /// Events the kernel queued and the watcher has not delivered yet.
    var queue: [WatchEvent] = []
    /// Steps left while the agent is down after a crash.
    var down = 0
    var trace: [String] = []
    var violations: [String] = []
    var stats: [String: Int] = [:]
    var checkpoints = 0
    /// The incarnation of the mirror inode each record named when the oracle first saw
    /// it, per path (every record seen: a torn store brings old ones back).
    var recordIncarnations: [RelativePath: [(record: FileRecord, incarnation: UInt64)]] = [:]
    /// Faults that fired in this run (the live-convergence check needs none: a failed
    /// path is retried by the next full pass, not by itself).
    var faultsFired = 0
    let verbose: Bool
    /// Where the manager's own tasks run (nil: the global pool).
    let thread: ManagerThread?
    /// I10's oracle, when the mirror keeps versions.
    let versionOracle: SimulationVersionOracle?
    /// The version keepers of every start (their counts).
    var keepers: [VersionKeepingSteps] = []
    /// The agent this run is one mirror of (`SimulationAgent`), nil when it runs alone: the
    /// agent owns the workload and the watcher's queue, and feeds the managers.
    weak var agent: SimulationAgent?
    /// This mirror's number among the agent's, and the label of its trace lines.
    var member = 0
    var label = ""

    /// `perFileSync` forces the mirror's kind (nil: as the environment or the seed says).
    /// `versions` keeps versions (nil: as the environment says, else off). `sharedSource`:
    /// the source of several runs (`SimulationAgent`), which no source fault or concurrent
    /// writer touches (each would belong to no one mirror); `crashes` forces crashes on or off.
    init(seed: UInt64, steps: Int? = nil, perFileSync: Bool? = nil, versions: Bool? = nil, verbose: Bool = false,
         thread: ManagerThread? = nil, sharedSource: InMemoryTree? = nil, crashes: Bool? = nil) {
        self.seed = seed
        self.verbose = verbose
        self.thread = thread
        rng = SplitMix64(seed: seed)
        compactions = SplitMix64(seed: seed, stream: 5)
        cuts = SplitMix64(seed: seed, stream: 7)
        var settings = SimulationSettings(&rng, steps: steps)
        if sharedSource != nil {
            settings.sourceFaults = 0
            settings.interference = 0
        }
        if let crashes { settings.crashes = crashes }
        source = sharedSource ?? InMemoryTree(device: 1)
        var syncs = SplitMix64(seed: seed, stream: 8)
        settings.perFileSync = perFileSync ?? Self.perFileSyncForced ?? syncs.chance(0.3)
        settings.versions = versions ?? Self.versionsForced ?? false
        var links = SplitMix64(seed: seed, stream: 9)
        settings.hardLinks = settings.versions && links.chance(0.6)
        self.settings = settings
        mirrorTree = InMemoryTree(device: 2, syncfsReaches: !settings.perFileSync, hardLinks: settings.hardLinks)
        versionOracle = settings.versions ? SimulationVersionOracle(directory: Self.versionsDirectory, mirror: mirrorTree) : nil
        power = SimulationPower(seed: seed)
        faults = SimulationFaults(seed: seed)
        faults.configure(mirror: settings.mirrorFaults, source: settings.sourceFaults)
        interference = SimulationInterference(seed: seed, source: source)
        // Copies read a few bytes at a time, and the concurrent writer may act in between.
        let writer = interference
        if sharedSource == nil { source.reads.withLock { $0 = InMemoryTree.Reads(chunk: 16) { writer.betweenReads($0) } } }
        mirror = SimulationMirror(tree: mirrorTree, power: power, faults: faults, interference: interference,
                                  log: verbose ? log : nil)
        store = SimulationStore(durable: durable, power: power, mirror: mirrorTree, versions: versionOracle)
        workload = SimulationWorkload(tree: source)
        // As `SettingsResolver` does: the versions directory is an exclude of its own.
        let patterns = (settings.excludeObjects ? [Array("*.o".utf8)] : [])
            + (settings.versions ? [ExcludeMatcher.literal(Self.versionsDirectory)] : [])
        options = SyncOptions(maxDeletePercent: settings.brake ? 50 : 100,
                              excludes: patterns.isEmpty ? .none : try! ExcludeMatcher(patterns: patterns))
        logger = .silent
        let faults = self.faults
        mirrorTree.failure.withLock { $0 = { op, path in faults.mirror(op.rawValue, path) } }
        mirrorTree.tracksDurability()
        if sharedSource == nil { source.failure.withLock { $0 = { op, path in faults.source(op, path) } } }
        sourceChanged()
    }

    // MARK: Running

    func run() async -> Outcome {
        note("seed \(seed): \(settings)")
        for _ in 0..<settings.initialOperations { workloadStep(delivering: false) }
        await start()
        for i in 0..<settings.steps {
            await step(i)
        }
        await converge()
        if settings.perFileSync {
            count("perFileSyncSeeds")
            count("perFileSyncFsyncs", mirrorTree.count(.sync))
        }
        if let versionOracle {
            count("versionSeeds")
            count("versionsLinked", keepers.reduce(0) { $0 + $1.kept.linked })
            count("versionsMoved", keepers.reduce(0) { $0 + $1.kept.moved })
            for (key, n) in versionOracle.counts { count(key, n) }
        }
        note("stats \(stats.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))")
        return Outcome(seed: seed, trace: trace, violations: violations, stats: stats)
    }

    func note(_ line: String) {
        traced(line)
        // A failed record append on the manager's serial queue is reported by a task of its
        // own (`recordsFailed`), at a moment no seed decides: kept out of the trace.
        for l in log.take() {
            if l.contains("cannot write records") || l.contains("records are written again") { continue }
            traced(l)
        }
    }

    /// A line of this run's trace, or of its agent's (labelled).
    func traced(_ line: String) {
        if let agent { agent.trace.append(label + line) } else { trace.append(line) }
    }

    func count(_ key: String, _ n: Int = 1) { stats[key, default: 0] += n }

    func violation(_ invariant: String, _ text: String) {
        if collected != nil {
            collected!.append((invariant, text))
            return
        }
        let line = "\(invariant): \(text)"
        // One line per distinct problem (a lasting problem is reported where it starts).
        if violations.contains(line) { return }
        violations.append(line)
        traced("VIOLATION \(line)")
    }

    /// Violations found while `collecting` runs: reported in sorted order, so the checks
    /// may walk dictionaries in any order and the trace stays the same.
    var collected: [(String, String)]?

    func collecting(_ body: () -> Void) {
        collected = []
        body()
        let found = collected!.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
        collected = nil
        for (invariant, text) in found { violation(invariant, text) }
    }

    // MARK: Steps

    func step(_ i: Int) async {
        if manager == nil {
            if down <= 0 { await start() } else { down -= 1 }
        }
        let c = settings.crashes
        let f = settings.mirrorFaults > 0 || settings.sourceFaults > 0
        let h = settings.heldCopies != nil
        // Drawn from a stream of its own, so that the seeds found before it keep their plan.
        if let manager, compactions.chance(0.02) {
            note("#\(i) the log is long: compact the records in turn with the appends, copies going on")
            count("backgroundCompactions")
            await manager.compactRecordsInBackground()
            await afterManagerCall("background compaction")
            return
        }
        switch rng.weighted([45, 22, 20, c ? 3 : 0, c ? 1 : 0, f ? 3 : 0, 1, 1, h ? 14 : 0]) {
        case 8:
            await runHeldCopy()
        case 0:
            workloadStep(delivering: true)
        case 1:
            await deliver()
        case 2:
            await advanceAndProcess()
        case 3:
            let k = rng.int(1...16)
            power.arm(after: k)
            note("#\(i) arm a crash at the \(k)th crash point from now")
        case 4:
            guard manager != nil else { return }
            note("#\(i) kill -9 between operations")
            crash()
        case 5:
            faults.active.toggle()
            interference.probability = faults.active ? settings.interference : 0
            note("#\(i) faults \(faults.active ? "on" : "off")")
        case 6:
            guard let manager else { return }
            note("#\(i) SIGUSR1")
            await manager.requestFullResync()
            await afterManagerCall("SIGUSR1")
        case 7:
            guard manager != nil else { return }
            note("#\(i) SIGTERM: finish the copies in flight, compact the records, restart")
            while copies.count > 0, manager != nil { await runHeldCopy() }
            guard let manager else { return }
            do { try await manager.compactRecords() } catch { note("  compaction failed: \(error)") }
            await afterManagerCall("stop")
            if self.manager != nil {
                dropManager()
                queue.removeAll()
                await start()
            }
        default:
            break
        }
    }

    /// Runs one held copy work item (the seed picks which) and waits until the manager has
    /// taken its results.
    func runHeldCopy() async {
        guard let manager, copies.count > 0, let work = copies.take(rng.below(copies.count)) else { return }
        note("run a held copy (\(copies.count) more held)")
        work()
        // The item ends by hopping onto the actor (`copiesFinished`): wait for that, so
        // the next step sees its effect (bounded: a lost completion is a hang, I7).
        var finished = false
        for _ in 0..<1_000_000 {
            if await manager.simulationWorkers() == copies.count {
                finished = true
                break
            }
            await Task.yield()
        }
        if !finished { violation("I7", "a copy's completion never reached the manager") }
        await afterManagerCall("copy")
    }

    func workloadStep(delivering: Bool) {
        if let agent { return agent.workloadStep() }
        guard let (description, events) = workload.step(&rng) else { return }
        count("ops")
        let live = delivering && manager != nil
        note("op \(description) → \(events.count) events\(live ? "" : " (not watched)")")
        if live { queue += events }
        observeWorkload(events)
    }

    /// The workload changed the source (the watcher saw `events`): remember what it holds.
    func observeWorkload(_ events: [WatchEvent]) {
        for case .moved(let from, let to) in events where source.node(to)?.kind == .directory {
            history.directoryMoved(from: from, to: to)
        }
        sourceChanged()
    }

    /// The source changed on purpose: remember everything it holds.
    func sourceChanged() {
        expectedSource = source.nodes
        history.observe(expectedSource)
    }

    /// Hands the oldest queued events to the manager; sometimes the kernel queue overflows:
    /// a stretch of them is lost and the watcher reports `.rescan` in their place.
    func deliver() async {
        if let agent { return await agent.deliver() }
        guard let manager, !queue.isEmpty else { return }
        let n = rng.int(1...queue.count)
        var batch = Array(queue.prefix(n))
        queue.removeFirst(n)
        var text = "deliver \(n)"
        if rng.chance(settings.overflow) {
            let i = rng.below(batch.count), j = rng.int(i + 1...batch.count)
            batch.replaceSubrange(i..<j, with: [.rescan(reason: "inotify event queue overflowed")])
            text += ", \(j - i) dropped → rescan"
            count("overflows")
        }
        note(text + ": " + batch.map(Self.describe).joined(separator: " "))
        for event in batch { await manager.receive(event) }
        await afterManagerCall("receive")
    }

    func advanceAndProcess() async {
        guard let manager else { return }
        let ms = [0, rng.int(1...19), 20, rng.int(21...80), 2_000][rng.weighted([2, 4, 3, 3, 1])]
        clock.advance(by: .milliseconds(ms))
        note("+\(ms)ms processDue")
        await manager.processDue()
        await afterManagerCall("processDue")
    }

    static func describe(_ e: WatchEvent) -> String {
        switch e {
        case .changed(let p): return "changed(\(p.escaped))"
        case .closedAfterWrite(let p): return "closed(\(p.escaped))"
        case .removed(let p): return "removed(\(p.escaped))"
        case .moved(let a, let b): return "moved(\(a.escaped)→\(b.escaped))"
        case .rescan: return "rescan"
        }
    }

    /// After any call into the manager: writes a concurrent writer made, faults fired, a
    /// crash, then the checkpoint.
    func afterManagerCall(_ what: String) async {
        // Record appends run on the manager's serial queue: let them land first, and give
        // a failure's report (a task of its own) a chance to arrive.
        if let manager {
            // Inline copies end on a task of their own: let their completions land.
            if settings.heldCopies == nil { await manager.waitForCopies() }
            await manager.drainRecords()
            for _ in 0..<8 { await Task.yield() }
        }
        for w in interference.take() {
            note("  \(w.description)")
            if manager != nil, !power.crashed { queue += w.events }
            count("interference")
            if w.description.hasSuffix("mid-read") { count("midReadRewrites") }
            if w.description.contains("mtime put back") { count("midReadRewritesKeepingMtime") }
            if let node = w.node { history.observe([w.path: node]) }
            sourceChanged()
        }
        let fired = faults.takeFired()
        if !fired.isEmpty {
            faultsFired += fired.count
            count("faults", fired.count)
            note("  faults: " + fired.joined(separator: ", "))
        }
        if power.crashed {
            note("  killed at crash point: \(power.lastPoint)")
            crash()
        } else if let manager {
            let s = await manager.snapshot()
            // With a concurrent executor a failed record append sets the root's error from a
            // task of its own, at a moment no seed decides: the root's entry is left out.
            let errors = s.errors.keys.filter { settings.heldCopies == nil || !$0.isRoot }.sorted().map(\.escaped)
            note("  pending=\(s.pending) passes=\(s.fullPasses) held=\(s.heldDeletes) errors=\(errors) mirror=\(mirrorDigest())")
        }
        checkpoint(what)
    }

    // MARK: Crash and restart

    /// The process dies: the manager, its queue and unflushed records are gone; the
    /// source, the mirror (temp files included) and the appended records stay.
    func crash() {
        count("crashes")
        log.kill()
        dropManager()
        queue.removeAll()
        copies.discardAll()
        mirrorTree.abandonStaging()
        if cuts.chance(0.5) {
            // A power cut, not just a killed process: what no barrier made durable may go.
            let mode = cuts.pick(InMemoryTree.PowerCut.allCases)
            let before = mirrorTree.nodes
            let cut = mirrorTree.powerCut(mode) { self.cuts.chance(0.5) }
            note("  power cut, \(mode.rawValue): \(cut.kept) of \(cut.pending) changes kept, \(cut.dataLost) files emptied")
            count("powerCuts")
            count("powerCutChangesLost", cut.pending - cut.kept)
            count("powerCutFilesEmptied", cut.dataLost)
            versionOracle?.cut(before: before, after: mirrorTree.nodes)
            checkRecordedChangesSurvived(before)
            checkpoint("after a power cut", afterCut: true)
        }
        power.revive()
        if rng.chance(0.1) {
            let lost = store.tearTail(rng.int(1...3))
            note("  store damaged: last \(lost) batches torn off")
            count("storeDamage")
        }
        down = rng.chance(0.5) ? 0 : rng.int(1...4)
    }

    /// The manager goes (killed, stopped, or its mirror away): out of the agent's fan-out.
    func dropManager() {
        if let manager { agent?.leaves(manager, member: member) }
        manager = nil
    }

    /// What `run` does at start: load the records, a new engine and manager, a full resync
    /// (its pass at once, or with `passNow` false at the manager's next round). One of the
    /// agent's mirrors lists the source through the shared listings and joins the fan-out
    /// first, as `Agent.makeManager` and `drive` do.
    func start(passNow: Bool = true) async {
        let records: RecordSet
        do { records = try store.load() } catch {
            violation("I6", "the store does not load: \(error)")
            records = RecordSet()
        }
        count("starts")
        let log = self.log, power = self.power, generation = log.newGeneration()
        logger = Logger(level: verbose ? .debug : .warning) { level, message in
            // A killed process says nothing more.
            if power.crashed { return }
            log.append("  log \(level): \(message)", generation: generation)
        }
        // One mirror for both: on a per-file-sync mirror it keeps what the next barrier owes.
        let clock = self.clock
        let local = LocalMirror(mirror, limits: settings.perFileSync ? Self.fuseLimits : .none,
                                versions: settings.versions ? (.inMirror(Self.versionsDirectory), { @Sendable in
                                    Self.versionEpoch + clock.now.offset.components.seconds
                                }, nil) : nil)
        if let keeper = local.steps as? VersionKeepingSteps { keepers.append(keeper) }
        let executor = settings.heldCopies.map { copies.executor(limit: $0) } ?? .inline
        let tree: any FileSystemProviding = agent.map { SharedListingTree(base: source, listings: $0.listings, member: member) } ?? source
        let engine = SyncEngine(source: tree, mirror: local, store: store, records: records, options: options, logger: logger,
                                recordScheduler: executor.recordScheduler ?? .serialQueue())
        let manager = SyncManager(engine: engine, clock: clock, timing: Self.timing,
                                  executor: executor, logger: logger, thread: thread)
        self.manager = manager
        down = 0
        note("start with \(records.table.count) records")
        agent?.joins(manager, member: member)
        await manager.requestFullResync()
        if passNow { await manager.processDue() }
        await afterManagerCall("startup")
    }

    // MARK: Convergence

    func converge() async {
        note("quiet: faults off, no more crashes")
        faults.active = false
        interference.probability = 0
        power.disarm()
        while manager == nil { await start() }
        guard let manager else { return }
        // Reports of failed record appends still on their way (see `note`) land now, not
        // after the final pass cleared the errors.
        if settings.heldCopies != nil {
            await manager.drainRecords()
            for _ in 0..<1_000 { await Task.yield() }
        }

        // The live path alone: every queued event delivered, time passes.
        if !queue.isEmpty {
            let batch = queue
            queue.removeAll()
            note("deliver the remaining \(batch.count): " + batch.map(Self.describe).joined(separator: " "))
            for event in batch { await manager.receive(event) }
            await afterManagerCall("receive")
        }
        await settle("live")
        let held = await manager.snapshot().heldDeletes
        if held > 0 { count("heldAtQuiet") }
        if faultsFired == 0 && held == 0 {
            count("liveChecked")
            expectMirrorEqualsSource("live")
        }

        // The full pass a user (or the next start) would run.
        if settings.brake {
            var o = options
            o.allowMassDelete = true
            await manager.reconfigure(timing: Self.timing, options: o)
        }
        note("full resync")
        await manager.requestFullResync()
        await settle("final")
        expectMirrorEqualsSource("final")
        await expectRecordsTrue()
        let errors = await manager.snapshot().errors
        if !errors.isEmpty {
            violation("I7", "errors remain after convergence: " + errors.keys.sorted().map { "\($0.escaped): \(errors[$0]!)" }.joined(separator: "; "))
        }

        // Converged means stable: one more full pass changes nothing in the mirror.
        let before = Self.writeCounts(mirrorTree)
        await manager.requestFullResync()
        await settle("stable")
        let after = Self.writeCounts(mirrorTree)
        if before != after {
            violation("I1", "a full pass after convergence still changed the mirror: \(Self.diffCounts(before, after))")
        }
        checkSourceUntouched(final: true)
    }

    /// Processes until idle (bounded: a manager that never goes idle is a hang, I7).
    func settle(_ what: String) async {
        guard let manager else { return }
        for _ in 0..<300 {
            if copies.count > 0 {
                await runHeldCopy()
                continue
            }
            if await manager.isIdle { return }
            if let deadline = await manager.nextDeadline(), clock.now < deadline {
                clock.advance(by: clock.now.duration(to: deadline))
            }
            await manager.processDue()
            await afterManagerCall(what)
        }
        violation("I7", "\(what): the manager is not idle after 300 rounds (pending \(await manager.snapshot().pending))")
    }

    static let writeOperations: [InMemoryTree.Operation] = [.install, .makeDirectory, .makeSymlink, .remove, .rename, .setAttributes]

    static func writeCounts(_ tree: InMemoryTree) -> [Int] { writeOperations.map { tree.count($0) } }

    static func diffCounts(_ a: [Int], _ b: [Int]) -> String {
        zip(writeOperations, zip(a, b)).filter { $0.1.0 != $0.1.1 }.map { "\($0.0.rawValue) +\($0.1.1 - $0.1.0)" }
            .joined(separator: ", ")
    }

    // MARK: Invariants

    /// A path the mirror does not mirror: excluded, or a special file.
    func isIgnored(_ path: RelativePath, _ node: InMemoryTree.Node) -> Bool {
        node.kind == .special || options.excludes.excludes(path, isDirectory: node.kind == .directory)
    }

    /// True when the source holds a special file at `path` or at one of its ancestors:
    /// keepsync skips it and leaves whatever the mirror holds there alone (the planner
    /// neither replaces nor removes it), so the mirror is not compared there.
    func isUnderSpecial(_ path: RelativePath, _ nodes: [RelativePath: InMemoryTree.Node]) -> Bool {
        var p: RelativePath? = path
        while let q = p, !q.isRoot {
            if nodes[q]?.kind == .special { return true }
            p = q.parent
        }
        return false
    }

    /// I2, I4, I10 and the per-step half of I5, after every step.
    func checkpoint(_ what: String, afterCut: Bool = false) {
        checkpoints += 1
        let appends = store.takeFindings()
        count("recordsCheckedAtAppend", appends.checked)
        collecting {
            for problem in appends.problems {
                let colon = problem.firstIndex(of: ":")!
                violation(String(problem[..<colon]), String(problem[problem.index(colon, offsetBy: 2)...]) + " (\(what))")
            }
            checkSourceUntouched(final: false)
            checkMirrorFilesAreVersions(what)
            checkRecordsTruthful((try? durable.load()) ?? RecordSet(), "stored", what)
            checkVersionsKept(what, afterCut: afterCut)
        }
    }

    /// I10 at any instant (a power cut included): every version a recorded change owed is
    /// in the versions directory.
    func checkVersionsKept(_ what: String, afterCut: Bool) {
        guard let versionOracle else { return }
        let (missing, checked) = versionOracle.missing()
        if afterCut { count("versionsCheckedAcrossCuts", checked) }
        for (path, content) in missing {
            violation("I10", "the old content of \(content.kind == .symlink ? "link" : "file") \(path.escaped) (\(content.bytes.count) bytes), owed by a recorded change, is gone from the versions directory (\(what))")
        }
    }

    /// True for the versions directory and what is in it (never mirrored nor compared).
    func isVersionPath(_ path: RelativePath) -> Bool {
        settings.versions && path.isWithin(Self.versionsDirectory)
    }

    /// I4: the source is exactly what the workload made of it; keepsync wrote nothing.
    func checkSourceUntouched(final: Bool) {
        for op in Self.writeOperations + [.barrier] {
            let n = source.count(op), expected = op == .rename ? (agent?.workload ?? workload).renames : 0
            if n != expected { violation("I4", "source \(op.rawValue) called \(n) times (the workload made \(expected))") }
        }
        if source.nodes != expectedSource {
            let now = source.nodes
            let changed = Set(now.keys).union(expectedSource.keys).filter { now[$0] != expectedSource[$0] }.sorted()
            violation("I4", "the source changed under keepsync at \(changed.prefix(5).map(\.escaped))")
            expectedSource = now
        }
    }

    /// I2 (and the mirror half of I3): every file and link in the mirror is a complete
    /// copy of some version of its source file; nothing excluded or special appears.
    func checkMirrorFilesAreVersions(_ what: String) {
        // A cut that lost a directory's rename and kept a change inside it lands that
        // change under the directory's old name: it is the version the new name held.
        let lost = mirrorTree.directoryRenamesLost
        func names(_ path: RelativePath) -> [RelativePath] {
            [path] + lost.compactMap { path != $0.from ? path.rebased(from: $0.from, to: $0.to) : nil }
        }
        for (mirrorPath, node) in mirrorTree.nodes {
            // A version is judged at the path it was kept for.
            var path = mirrorPath
            if isVersionPath(mirrorPath) {
                guard node.kind != .directory else { continue }
                guard let original = versionOracle?.original(of: mirrorPath) else {
                    violation("I10", "\(mirrorPath.escaped) in the versions directory names no version (\(what))")
                    continue
                }
                path = original
            }
            if TemporaryName.matches(path.name) && !history.wasEverInSource(path) { continue }
            if options.excludes.excludes(path, isDirectory: node.kind == .directory) {
                violation("I3", "excluded \(mirrorPath.escaped) appeared in the mirror (\(what))")
            }
            switch node.kind {
            case .regular where !names(path).contains(where: { history.isVersion(node.content, at: $0) }):
                let preview = String(decoding: node.content.prefix(40), as: UTF8.self)
                violation("I2", "mirror \(mirrorPath.escaped) holds \(node.content.count) bytes \"\(preview)\" that no source file at that path ever held (\(what))")
            case .symlink where !names(path).contains(where: { history.isTarget(node.target, at: $0) }):
                violation("I2", "mirror link \(mirrorPath.escaped) -> \(ByteEscaping.escape(node.target)) never existed in the source (\(what))")
            case .special:
                violation("I2", "mirror \(mirrorPath.escaped) is a special file (\(what))")
            default:
                break
            }
        }
    }

    /// I8 (Durable): a power cut undoes nothing a stored record describes. Every stored
    /// record that was true of the mirror right before the cut (its inode at its path, of
    /// its kind) is true after it, with the same bytes for a file.
    func checkRecordedChangesSurvived(_ before: [RelativePath: InMemoryTree.Node]) {
        let after = mirrorTree.nodes
        var checked = 0
        collecting {
            for (path, r) in ((try? durable.load()) ?? RecordSet()).table where !path.isRoot {
                guard let was = before[path], was.inode == r.mirrorInode, was.kind == r.kind else { continue }
                checked += 1
                guard let now = after[path], now.inode == was.inode, now.kind == was.kind else {
                    violation("I8", "\(path.escaped) is recorded as mirror inode \(r.mirrorInode) (\(r.kind)), and the power cut took it: the mirror holds \(after[path].map { "inode \($0.inode) (\($0.kind))" } ?? "nothing") there")
                    continue
                }
                if now.content != was.content || now.target != was.target {
                    violation("I8", "\(path.escaped) is recorded, and the power cut changed its bytes (\(was.content.count) -> \(now.content.count))")
                }
            }
        }
        count("recordsCheckedAcrossCuts", checked)
    }

    /// I5 at any instant: a record whose mirror inode is still at its path tells the
    /// truth about it (that inode holds the source version the record names). A record
    /// whose inode is gone is stale, and the planner copies again: allowed. So is one whose
    /// inode number was handed out again after a power cut (ext4 reuses them): it names
    /// an object that is gone, and the planner checks kind, size and mtime before trusting.
    func checkRecordsTruthful(_ set: RecordSet, _ which: String, _ what: String) {
        for (path, r) in set.table {
            guard let m = mirrorTree.node(path), m.inode == r.mirrorInode else { continue }
            let now = mirrorTree.incarnation(ofInode: m.inode)
            if let seen = recordIncarnations[path]?.first(where: { $0.record == r }) {
                guard seen.incarnation == now else { continue }
            } else {
                recordIncarnations[path, default: []].append((r, now))
            }
            if m.kind != r.kind {
                violation("I5", "\(which) record of \(path.escaped) says \(r.kind), mirror inode \(m.inode) is \(m.kind) (\(what))")
                continue
            }
            switch r.kind {
            case .regular:
                let v = SimulationHistory.Version(inode: r.inode, size: r.size, mtime: r.mtime)
                guard let contents = history.contents(of: v) else {
                    violation("I5", "\(which) record of \(path.escaped) names a source version that never existed (inode \(r.inode) size \(r.size) mtime \(r.mtime.seconds)) (\(what))")
                    continue
                }
                if !contents.contains(m.content) {
                    violation("I5", "\(which) record of \(path.escaped) claims mirror inode \(m.inode) holds source inode \(r.inode) size \(r.size) mtime \(r.mtime.seconds), but it holds other bytes (\(what))")
                }
            case .symlink:
                if r.linkTarget != m.target {
                    violation("I5", "\(which) record of link \(path.escaped) says target \(ByteEscaping.escape(r.linkTarget ?? [])), mirror has \(ByteEscaping.escape(m.target)) (\(what))")
                }
            default:
                break
            }
        }
    }

    /// I5 after convergence: every record (stored and in memory) names an entry the mirror
    /// holds, with that inode and kind, describing the source as it is; every mirrored
    /// entry has a record; what is stored equals what is in memory.
    func expectRecordsTrue() async {
        guard let manager else { return }
        let live = await manager.simulationRecords()
        let stored = (try? store.load()) ?? RecordSet()
        collecting {
            checkRecordsTruthful(live, "in-memory", "final")
            checkRecordsTruthful(stored, "stored", "final")
        }
        for (which, set) in [("in-memory", live), ("stored", stored)] {
            for (path, r) in set.table.sorted(by: { $0.key < $1.key }) {
                guard let m = mirrorTree.node(path) else {
                    violation("I5", "\(which) record of \(path.escaped) but the mirror has nothing there")
                    continue
                }
                if m.inode != r.mirrorInode || m.kind != r.kind {
                    violation("I5", "\(which) record of \(path.escaped) claims mirror inode \(r.mirrorInode) (\(r.kind)), the mirror has \(m.inode) (\(m.kind))")
                }
                if let s = (try? source.stat(path)) ?? nil, !r.describes(source: s) {
                    violation("I5", "\(which) record of \(path.escaped) does not describe the converged source")
                }
            }
            let sourceNodes = source.nodes
            let mirrorNodes = mirrorTree.nodes
            for path in mirrorNodes.keys.sorted() where set.table[path] == nil && !isIgnored(path, mirrorNodes[path]!)
                && !isUnderSpecial(path, sourceNodes) {
                violation("I5", "mirror \(path.escaped) has no \(which) record after convergence")
            }
        }
        if live.table != stored.table {
            let diff = Set(live.table.keys).union(stored.table.keys).filter { live.table[$0] != stored.table[$0] }.sorted()
            violation("I5", "stored records differ from the in-memory ones after convergence at \(diff.prefix(5).map(\.escaped))")
        }
    }

    /// I1: the mirror equals the source (names, kind, content, mode, mtime, link targets),
    /// special and excluded paths aside; I3: no temp file is left. A difference is reported
    /// as `invariant` when given.
    func expectMirrorEqualsSource(_ what: String, invariant: String? = nil) {
        let s = source.nodes, m = mirrorTree.nodes
        var diffs: [String] = []
        for path in Set(s.keys).union(m.keys).sorted() where !isVersionPath(path) {
            let a = s[path], b = m[path]
            // A special file is not mirrored: whatever the mirror holds there is not compared.
            if isUnderSpecial(path, s) { continue }
            if let a, isIgnored(path, a) {
                if let b { diffs.append("\(path.escaped): excluded, yet in the mirror as \(b.kind)") }
                continue
            }
            guard let a else {
                if let b, TemporaryName.matches(path.name) {
                    diffs.append("temp file \(path.escaped) left in mirror (\(b.content.count) bytes)")
                } else {
                    diffs.append("\(path.escaped): extra in mirror")
                }
                continue
            }
            guard let b else { diffs.append("\(path.escaped): missing in mirror"); continue }
            guard a.kind == b.kind else { diffs.append("\(path.escaped): kind \(a.kind) vs \(b.kind)"); continue }
            if a.mode != b.mode { diffs.append("\(path.escaped): mode \(String(a.mode, radix: 8)) vs \(String(b.mode, radix: 8))") }
            if a.mtime != b.mtime { diffs.append("\(path.escaped): mtime \(a.mtime.seconds).\(a.mtime.nanoseconds) vs \(b.mtime.seconds).\(b.mtime.nanoseconds)") }
            // A rewrite that kept size and mtime, which no copy saw under way, is one the
            // quick check cannot tell (SPEC Verifies: metadata only): the mirror may keep
            // another content of that same version.
            if a.kind == .regular, a.content != b.content,
               !(history.contents(of: .init(inode: a.inode, size: UInt64(a.content.count), mtime: a.mtime))?.contains(b.content) ?? false) {
                diffs.append("\(path.escaped): content")
            }
            if a.kind == .symlink, a.target != b.target { diffs.append("\(path.escaped): link target") }
        }
        if !diffs.isEmpty {
            violation(invariant ?? (what == "live" ? "I1 (live)" : "I1"), "\(what): mirror differs from source: " + diffs.joined(separator: "; "))
        }
    }

    /// A short fingerprint of the mirror for the trace: a sum of per-entry hashes, so the
    /// dictionary's order does not matter.
    func mirrorDigest() -> String {
        var sum: UInt64 = 0
        for (path, n) in mirrorTree.nodes {
            var h = SplitMix64.fold(path.bytes)
            h = SplitMix64.mix(h ^ UInt64(n.kind.rawValue) ^ UInt64(n.mode) << 8 ^ n.inode << 24)
            h = SplitMix64.mix(h ^ UInt64(bitPattern: n.mtime.seconds) ^ SplitMix64.fold(n.content))
            h = SplitMix64.mix(h ^ SplitMix64.fold(n.target))
            sum &+= h
        }
        return String(sum & 0xFFFF_FFFF, radix: 16)
    }
}
