import KeepSyncTestSupport
@testable import KeepSyncCore

/// Two mirrors of one source, as the agent runs them (SPEC "Several mirrors", issue 41): one
/// workload and one watcher; each mirror a `SimulationRun` of its own (records, mirror tree,
/// faults, held copies, its own steps), its managers fed through a `WatchFanout`, its full
/// passes listing the source through one `SourceListings`. Mirror A crashes and loses power
/// at random points (what no barrier made durable goes; its manager restarts from its
/// records). Mirror B is paused at random as a link whose disk is unplugged (out of the
/// fan-out, its manager and trees gone) and resumed with a new manager from its records and
/// a full pass. Each run checks its own invariants; the agent adds I11 (while B is paused, A
/// converges on every change) and I12 (the fan-out holds the running managers and no other:
/// a paused B has nothing queued, nothing keeps its manager, nothing writes its mirror).
final class SimulationAgent {
    let seed: UInt64
    /// The agent's own choices and the workload's.
    var rng: SplitMix64
    let source = InMemoryTree(device: 1)
    var workload: SimulationWorkload
    let fanout = WatchFanout<ManualClock>()
    let listings = SourceListings()
    let a: SimulationRun
    let b: SimulationRun
    var runs: [SimulationRun] { [a, b] }
    let steps: Int
    /// Probability that a delivered batch overflows the kernel queue.
    let overflow: Double
    /// Events the kernel queued and the watcher has not handed to the fan-out yet.
    var queue: [WatchEvent] = []
    /// SIGUSR1's requests not made yet: the agent asks the mirrors in turn, and each
    /// mirror's loop runs meanwhile.
    var requests: [SimulationRun] = []
    /// While B is paused: its last manager (nothing may keep it), its mirror's write counts.
    weak var pausedManager: SyncManager<ManualClock>?
    var pausedWrites: [Int]?
    var trace: [String] = []
    var violations: [String] = []
    var stats: [String: Int] = [:]

    init(seed: UInt64, steps: Int? = nil, thread: ManagerThread? = nil) {
        self.seed = seed
        var rng = SplitMix64(seed: seed, stream: 11)
        self.steps = steps ?? rng.int(60...110)
        overflow = rng.pick([0, 0.05, 0.15])
        self.rng = rng
        workload = SimulationWorkload(tree: source)
        a = SimulationRun(seed: seed, steps: steps, versions: false, thread: thread, sharedSource: source, crashes: true)
        b = SimulationRun(seed: SplitMix64.mix(seed ^ 0xB), steps: steps, versions: false, thread: thread,
                          sharedSource: source, crashes: false)
        for (i, r) in runs.enumerated() {
            r.agent = self
            r.member = i
            r.label = i == 0 ? "A " : "B "
        }
    }

    func note(_ line: String) { trace.append(line) }

    func count(_ key: String, _ n: Int = 1) { stats[key, default: 0] += n }

    func violation(_ invariant: String, _ text: String) {
        let line = "\(invariant): \(text)"
        if violations.contains(line) { return }
        violations.append(line)
        trace.append("VIOLATION \(line)")
    }

    func run() async -> SimulationRun.Outcome {
        note("seed \(seed): steps=\(steps) overflow=\(overflow)")
        note("A: \(a.settings)")
        note("B: \(b.settings)")
        for _ in 0..<rng.int(0...10) {
            guard let (description, events) = workload.step(&rng) else { continue }
            note("op \(description) (before the start)")
            for r in runs { r.observeWorkload(events) }
        }
        // As `runGeneration`: every manager first, fed and begun, then their passes (at
        // each one's next round).
        await a.start(passNow: false)
        await b.start(passNow: false)
        checkFanout("start")
        for i in 0..<steps {
            await step(i)
            checkFanout("#\(i)")
        }
        await converge()
        for (key, n) in a.stats { stats["A." + key] = n }
        for (key, n) in b.stats { stats["B." + key] = n }
        stats["listingsListed"] = listings.counts.listed
        stats["listingsShared"] = listings.counts.shared
        stats["violations"] = violations.count + a.violations.count + b.violations.count
        return SimulationRun.Outcome(seed: seed, trace: trace,
                                     violations: violations + a.violations.map { "A " + $0 } + b.violations.map { "B " + $0 },
                                     stats: stats)
    }

    // MARK: Steps

    func step(_ i: Int) async {
        let paused = b.manager == nil
        switch rng.weighted([48, paused ? 0 : 40, paused ? 0 : 3, paused ? 6 : 0, paused ? 4 : 0, 2, requests.isEmpty ? 0 : 8, 2]) {
        case 0:
            await a.step(i)
        case 1:
            await b.step(i)
        case 2:
            await pause(i)
        case 3:
            await checkA(while: "#\(i)")
            await resume(i, passNow: rng.chance(0.5))
        case 4:
            await checkA(while: "#\(i)")
        case 5:
            await resyncAll(i)
        case 6:
            await nextRequest()
        default:
            await restart(i)
        }
    }

    /// SIGTERM, changes while the agent is stopped, and `run` again: as `runGeneration`,
    /// every manager is made and begun before any pass runs. A paused B stays paused.
    func restart(_ i: Int) async {
        note("#\(i) SIGTERM: the agent stops, then runs again")
        count("restarts")
        for r in runs {
            while r.copies.count > 0, r.manager != nil { await r.runHeldCopy() }
            guard let manager = r.manager else { continue }
            await manager.drainRecords()
            r.log.kill()
            r.dropManager()
        }
        requests.removeAll()
        queue.removeAll()
        for _ in 0..<rng.int(0...4) {
            guard let (description, events) = workload.step(&rng) else { continue }
            count("ops")
            note("op \(description) (while stopped)")
            for r in runs { r.observeWorkload(events) }
        }
        a.power.revive()
        for r in runs where r !== b || pausedWrites == nil { await r.start(passNow: false) }
    }

    /// A workload operation: the watcher queues its events (for whoever is in the fan-out
    /// when they are handed on).
    func workloadStep() {
        guard let (description, events) = workload.step(&rng) else { return }
        count("ops")
        note("op \(description) → \(events.count) events")
        queue += events
        for r in runs { r.observeWorkload(events) }
    }

    /// The watcher hands the oldest queued events to every manager in the fan-out (as
    /// `SyncManager.feed`); sometimes the kernel queue overflows: a stretch of them is lost
    /// and `.rescan` comes in their place.
    func deliver(all: Bool = false) async {
        guard !queue.isEmpty else { return }
        let n = all ? queue.count : rng.int(1...queue.count)
        var batch = Array(queue.prefix(n))
        queue.removeFirst(n)
        var text = "deliver \(n)"
        if !all, rng.chance(overflow) {
            let i = rng.below(batch.count), j = rng.int(i + 1...batch.count)
            batch.replaceSubrange(i..<j, with: [.rescan(reason: "inotify event queue overflowed")])
            text += ", \(j - i) dropped → rescan"
            count("overflows")
        }
        let managers = fanout.managers
        note(text + " to \(managers.count) mirror(s): " + batch.map(SimulationRun.describe).joined(separator: " "))
        for manager in managers {
            for event in batch { await manager.receive(event) }
        }
        for r in runs {
            guard let manager = r.manager, managers.contains(where: { $0 === manager }) else { continue }
            await r.afterManagerCall("receive")
        }
    }

    /// SIGUSR1 (a reload too), as `Agent.requestFullResyncs`: each mirror is asked in
    /// turn, the seed deciding how many now and when the others (their loops run meanwhile).
    func resyncAll(_ i: Int) async {
        note("#\(i) SIGUSR1: every mirror's full pass")
        count("resyncsOfAll")
        requests = runs
        for _ in 0..<rng.int(0...2) { await nextRequest() }
    }

    func nextRequest() async {
        guard !requests.isEmpty else { return }
        let r = requests.removeFirst()
        guard let manager = r.manager else { return }
        note("SIGUSR1 reaches \(r.label)")
        await manager.requestFullResync()
        await r.afterManagerCall("SIGUSR1")
    }

    // MARK: The links

    /// A mirror's new manager: fed from now on, its pass's listings begun before its pass
    /// (as `makeManager` and `drive`).
    func joins(_ manager: SyncManager<ManualClock>, member: Int) {
        fanout.add(manager)
        listings.begin(member)
    }

    /// A mirror's manager goes (killed, or its mirror away): as `drive` when it returns.
    func leaves(_ manager: SyncManager<ManualClock>, member: Int) {
        fanout.remove(manager)
        listings.end(member)
    }

    // MARK: B's pauses

    /// B's disk is unplugged: as `runLink`, what its stopped manager still writes lands
    /// first, then the manager leaves the fan-out and goes with its trees. Copies not
    /// started never run.
    func pause(_ i: Int) async {
        guard let manager = b.manager else { return }
        note("#\(i) B's disk is unplugged: B pauses")
        count("pauses")
        b.copies.discardAll()
        await manager.drainRecords()
        b.log.kill()
        b.dropManager()
        pausedManager = manager
        pausedWrites = SimulationRun.writeCounts(b.mirrorTree)
        b.checkpoint("paused")
    }

    /// B's disk is back: a new manager from its records and a full pass (at once, or at
    /// its next round), as `waitForMirror` and `drive`.
    func resume(_ i: Int, passNow: Bool) async {
        guard b.manager == nil else { return }
        checkPaused("before B's return")
        note("#\(i) B's disk is back: B resumes")
        count("resumes")
        pausedWrites = nil
        await b.start(passNow: passNow)
    }

    /// I12 while B is paused: nothing keeps its manager (nothing queues for it) and nothing
    /// writes its mirror.
    func checkPaused(_ what: String) {
        count("pausedChecks")
        if pausedManager != nil {
            violation("I12", "B's manager is still held while B is paused (\(what))")
        }
        if let before = pausedWrites, before != SimulationRun.writeCounts(b.mirrorTree) {
            violation("I12", "B's mirror was written while B was paused: \(SimulationRun.diffCounts(before, SimulationRun.writeCounts(b.mirrorTree))) (\(what))")
        }
    }

    /// I12: the fan-out holds each running manager once, and no other.
    func checkFanout(_ what: String) {
        let held = fanout.managers.map(ObjectIdentifier.init)
        let running = runs.compactMap(\.manager).map(ObjectIdentifier.init)
        if held.count != Set(held).count || Set(held) != Set(running) {
            violation("I12", "the fan-out holds \(held.count) manager(s) while \(running.count) mirror(s) run (\(what))")
        }
    }

    /// I11: while B is paused, A takes every change and converges on it. A's faults stop and
    /// a crash armed on it is called off for the check (a crashed A restarts first); after
    /// faults a full pass of A's is what repairs, else the live path alone.
    func checkA(while what: String) async {
        guard b.manager == nil else { return }
        checkPaused(what)
        let faulty = a.faults.active
        a.faults.active = false
        a.power.disarm()
        defer { a.faults.active = faulty }
        while a.manager == nil { await a.start() }
        await deliver(all: true)
        await a.settle("A while B is paused")
        guard let manager = a.manager else { return }
        var live = true
        if a.faultsFired > 0 {
            live = false
            note("a full pass of A's (faults fired)")
            await manager.requestFullResync()
            await a.settle("A while B is paused")
        }
        count("independenceChecks")
        guard await manager.snapshot().heldDeletes == 0 else { return count("independenceHeldByBrake") }
        if live { count("independenceChecksLive") }
        a.expectMirrorEqualsSource("A while B is paused", invariant: "I11")
    }

    // MARK: Quiet

    /// The source goes quiet: B comes back, every request and event is delivered, then each
    /// mirror converges on its own (live path, full pass, stable), B after its full pass.
    func converge() async {
        note("quiet")
        if b.manager == nil {
            await checkA(while: "at quiet")
            await resume(steps, passNow: true)
        }
        while !requests.isEmpty { await nextRequest() }
        await deliver(all: true)
        await a.converge()
        await b.converge()
        checkFanout("quiet")
        a.expectMirrorEqualsSource("final, after B's")
    }
}
