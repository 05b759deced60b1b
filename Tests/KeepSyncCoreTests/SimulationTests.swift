import Foundation
import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// The deterministic simulation (Dropbox's CanopyCheck/Trinity idea): per seed, random
/// operations on an in-memory source; the watcher's events delivered to the real
/// SyncManager (real SyncEngine, Planner and records) in random batches, with overflow
/// drops, injected ENOSPC/EIO/EACCES/ENOENT, a writer racing the copies, and crashes at any
/// mirror or store operation followed by a restart from the stored records. I2, I4 and I5
/// are checked after every step; I1, I3, I5 and I7 once the source is quiet.
///
/// `KEEPSYNC_SIM_SEEDS=N` runs N fixed seeds (default 2,000), then 500 more from a base
/// that changes every run (printed; `KEEPSYNC_SIM_BASE=B` replays that range,
/// `KEEPSYNC_SIM_ROTATING=N` sets its size), so coverage grows from run to run.
/// `KEEPSYNC_SIM_SEED=S` runs one and
/// prints its trace (`KEEPSYNC_SIM_VERBOSE=1`: with debug log and every mirror call);
/// `KEEPSYNC_SIM_STEPS=K` overrides the steps per seed (to shrink a failure);
/// `KEEPSYNC_SIM_LIST=1` prints one line per seed (trace fingerprint, violations). A failing
/// seed prints the command that replays it. The summary line's `traceDigest` is the same in
/// every process for the same seeds and product.
@Suite("Simulation")
struct SimulationTests {
    static let defaultSeeds = 2_000
    static let defaultRotatingSeeds = 500

    /// The minimal seeds (and steps) of the bugs found, replayed by SimulationRegressionTests.
    static let bugASeed: (seed: UInt64, steps: Int) = (618, 1)    // fixed in 89099e1
    static let bugBSeed: (seed: UInt64, steps: Int) = (472, 1)    // fixed: excluded entries fix their directory
    static let bugCSeed: (seed: UInt64, steps: Int) = (7931, 3)   // fixed: failed record appends are retried

    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    static var steps: Int? { environment["KEEPSYNC_SIM_STEPS"].flatMap { Int($0) } }

    static func seconds(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        return "\(ms / 1000).\(String(ms % 1000 + 1000).dropFirst())"
    }

    static func replay(_ seed: UInt64) -> String {
        let steps = self.steps.map { "KEEPSYNC_SIM_STEPS=\($0) " } ?? ""
        return "replay: KEEPSYNC_SIM_SEED=\(seed) \(steps)swift test --filter SimulationTests"
    }

    /// Runs seeds on threads of their own (all cores but one, which stays for the tests
    /// running beside them in this process); returns the outcomes in seed order.
    static func runSeeds(_ seeds: [UInt64], steps: Int?, versions: Bool? = nil, verbose: Bool = false) async -> [SimulationRun.Outcome] {
        await onThreads(seeds) { seed, thread in
            await SimulationRun(seed: seed, steps: steps, versions: versions, verbose: verbose, thread: thread).run()
        }
    }

    /// Runs `body` for each seed as `runSeeds` does, on threads of their own.
    static func onThreads(_ seeds: [UInt64],
                          _ body: @escaping @Sendable (UInt64, ManagerThread) async -> SimulationRun.Outcome) async -> [SimulationRun.Outcome] {
        let width = max(1, min(ProcessInfo.processInfo.activeProcessorCount - 1, 8, seeds.count))
        let threads = (0..<width).map { _ in ManagerThread() }
        defer { for t in threads { t.stop() } }
        var outcomes: [SimulationRun.Outcome] = []
        outcomes.reserveCapacity(seeds.count)
        await withTaskGroup(of: [SimulationRun.Outcome].self) { group in
            for (slot, thread) in threads.enumerated() {
                let mine = stride(from: slot, to: seeds.count, by: width).map { seeds[$0] }
                group.addTask(executorPreference: thread) {
                    var done: [SimulationRun.Outcome] = []
                    for seed in mine {
                        done.append(await body(seed, thread))
                    }
                    return done
                }
            }
            for await some in group { outcomes += some }
        }
        return outcomes.sorted { $0.seed < $1.seed }
    }

    @Test("every seed keeps the invariants: no torn or foreign file, source untouched, true records, convergence")
    func seeds() async {
        let env = Self.environment
        let seeds: [UInt64]
        var rotating: [UInt64] = []
        var single = false
        if let one = env["KEEPSYNC_SIM_SEED"].flatMap({ UInt64($0) }) {
            seeds = [one]
            single = true
        } else {
            let n = env["KEEPSYNC_SIM_SEEDS"].flatMap { Int($0) } ?? Self.defaultSeeds
            seeds = Array(0..<UInt64(max(0, n)))
            // Above the fixed range; from the wall clock unless replayed.
            let base = env["KEEPSYNC_SIM_BASE"].flatMap { UInt64($0) }
                ?? 1_000_000 + UInt64(Date().timeIntervalSince1970 * 1000) % 1_000_000_000_000
            let count = env["KEEPSYNC_SIM_ROTATING"].flatMap { Int($0) } ?? Self.defaultRotatingSeeds
            rotating = Array(base..<base + UInt64(max(0, count)))
            print("simulation: rotating seeds \(base)..<\(base + UInt64(rotating.count)) (replay: KEEPSYNC_SIM_BASE=\(base) swift test --filter SimulationTests)")
        }
        let started = ContinuousClock.now
        let all = await Self.runSeeds(seeds + rotating, steps: Self.steps, verbose: single && env["KEEPSYNC_SIM_VERBOSE"] != nil)
        let elapsed = ContinuousClock.now - started
        let outcomes = Array(all.prefix(seeds.count))

        var totals: [String: Int] = [:]
        for o in outcomes { for (k, v) in o.stats { totals[k, default: 0] += v } }
        // One fingerprint of every trace: equal across processes when replays are exact.
        var digest: UInt64 = 0
        for o in outcomes {
            var one: UInt64 = 0
            for line in o.trace { one = SplitMix64.mix(one ^ SplitMix64.fold(Array(line.utf8))) }
            if env["KEEPSYNC_SIM_LIST"] != nil { print("seed \(o.seed) trace \(String(one, radix: 16)) violations \(o.violations.count)") }
            digest = SplitMix64.mix(digest ^ one)
        }
        totals["traceDigest\(String(digest & 0xFFFFFF, radix: 16))"] = 1
        print("simulation: \(outcomes.count) seeds (and \(rotating.count) rotating) in \(Self.seconds(elapsed))s; "
              + totals.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
        if single, let o = outcomes.first { print(o.trace.joined(separator: "\n")) }
        if !rotating.isEmpty {
            var more: [String: Int] = [:]
            for o in all.dropFirst(seeds.count) { for (k, v) in o.stats { more[k, default: 0] += v } }
            print("simulation: \(rotating.count) rotating seeds: "
                  + more.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
        }
        // The machinery fired: a default run that crashed, faulted, overflowed, damaged the
        // store and compacted nowhere would prove nothing.
        if seeds.count >= Self.defaultSeeds {
            var keys = ["crashes", "faults", "overflows", "storeDamage", "backgroundCompactions", "interference", "midReadRewrites",
                        "midReadRewritesKeepingMtime", "powerCuts", "recordsCheckedAcrossCuts", "recordsCheckedAtAppend"]
            if SimulationRun.perFileSyncForced != false { keys.append("perFileSyncSeeds") }
            for key in keys {
                #expect(totals[key, default: 0] > 0, "no \(key) in \(seeds.count) seeds")
            }
        }

        for o in all where !o.violations.isEmpty {
            let shown = o.violations.prefix(3).joined(separator: "\n  ")
            Issue.record(Comment(rawValue: "seed \(o.seed): \(o.violations.count) violation(s)\n  \(shown)\n\(Self.replay(o.seed))"))
        }
    }

    /// Seeds of `versionsSurvivePowerCuts` (`KEEPSYNC_SIM_VERSION_SEEDS=N` for more).
    static let defaultVersionSeeds = 600

    @Test("with versions kept, every seed keeps the invariants, and after every power cut each recorded change's old content is in the versions directory (I10)")
    func versionsSurvivePowerCuts() async {
        let env = Self.environment
        let single = env["KEEPSYNC_SIM_SEED"].flatMap { UInt64($0) }
        let n = env["KEEPSYNC_SIM_VERSION_SEEDS"].flatMap { Int($0) } ?? Self.defaultVersionSeeds
        // Apart from `seeds()`'s fixed range, which runs without versions.
        let seeds = single.map { [$0] } ?? Array(UInt64(50_000)..<UInt64(50_000 + max(0, n)))
        let started = ContinuousClock.now
        let outcomes = await Self.runSeeds(seeds, steps: Self.steps, versions: true,
                                           verbose: single != nil && env["KEEPSYNC_SIM_VERBOSE"] != nil)
        var totals: [String: Int] = [:]
        for o in outcomes { for (k, v) in o.stats { totals[k, default: 0] += v } }
        let keys = ["versionSeeds", "versionsLinked", "versionsMoved", "versionsOwed", "versionsCheckedAcrossCuts", "versionsNotOwedMoved",
                    "versionsLostBeforeTheirRecord", "versionsUnknownOld", "powerCuts", "crashes", "perFileSyncSeeds"]
        print("simulation with versions: \(outcomes.count) seeds in \(Self.seconds(ContinuousClock.now - started))s; "
              + keys.map { "\($0)=\(totals[$0, default: 0])" }.joined(separator: " "))
        if single != nil, let o = outcomes.first { print(o.trace.joined(separator: "\n")) }
        if seeds.count >= Self.defaultVersionSeeds {
            // The mode really ran: versions by link and by move, owed and checked across cuts.
            for key in ["versionsLinked", "versionsMoved", "versionsOwed", "versionsCheckedAcrossCuts", "powerCuts", "perFileSyncSeeds"] {
                #expect(totals[key, default: 0] > 0, "no \(key) in \(seeds.count) seeds")
            }
            #expect(totals["versionSeeds"] == seeds.count)
        }
        for o in outcomes where !o.violations.isEmpty {
            let shown = o.violations.prefix(3).joined(separator: "\n  ")
            Issue.record(Comment(rawValue: "seed \(o.seed) (versions): \(o.violations.count) violation(s)\n  \(shown)\n"
                                 + "replay: KEEPSYNC_SIM_SEED=\(o.seed) swift test --filter SimulationTests/versionsSurvivePowerCuts"))
        }
    }

    @Test("the same seed gives the same trace")
    func sameSeedSameTrace() async {
        let seeds: [UInt64] = Array(0..<40) + [1_000_003, 77_777_777, UInt64.max]
        let first = await Self.runSeeds(seeds, steps: nil)
        let second = await Self.runSeeds(seeds, steps: nil)
        for (a, b) in zip(first, second) {
            #expect(a.trace.count > 10)
            guard a.trace != b.trace else { continue }
            let i = (0..<min(a.trace.count, b.trace.count)).first { a.trace[$0] != b.trace[$0] } ?? min(a.trace.count, b.trace.count)
            Issue.record("seed \(a.seed): traces differ at line \(i):\n  \(i < a.trace.count ? a.trace[i] : "(end)")\n  \(i < b.trace.count ? b.trace[i] : "(end)")\n\(Self.replay(a.seed))")
        }
    }

    @Test("different seeds give different runs")
    func seedsDiffer() async {
        let outcomes = await Self.runSeeds([1, 2, 3], steps: nil)
        #expect(Set(outcomes.map(\.trace)).count == 3)
    }

    // MARK: The checks themselves

    @Test("the power-cut model keeps what a barrier made durable, and what the cut's mode says of the rest",
          arguments: InMemoryTree.PowerCut.allCases)
    func powerCutModel(_ mode: InMemoryTree.PowerCut) throws {
        let source = InMemoryTree(device: 1), mirror = InMemoryTree(device: 2)
        for name in ["durable", "lone", "staged"] { source.writeFile(RelativePath(name), Array("\(name) bytes".utf8)) }
        mirror.tracksDurability()
        _ = try mirror.install(RelativePath("durable"), from: try source.open(RelativePath("durable")))
        try mirror.barrier()
        // After the barrier: a lone install (fsynced before its rename), and a staged copy
        // renamed without a barrier (the bug a group commit must not have).
        _ = try mirror.install(RelativePath("lone"), from: try source.open(RelativePath("lone")))
        let staged = try mirror.stage(RelativePath("staged"), from: try source.open(RelativePath("staged")), durable: false)
        _ = try mirror.publish(staged)
        var coin = false
        let cut = mirror.powerCut(mode) { coin.toggle(); return coin }
        // Pending: the lone temp file and its rename, the staged one and its rename.
        #expect(cut.pending == 4)
        #expect(mirror.node(RelativePath("durable"))?.content == Array("durable bytes".utf8), "a barrier's work never goes")
        let lone = mirror.node(RelativePath("lone"))?.content, published = mirror.node(RelativePath("staged"))?.content
        switch mode {
        case .nothingKept:
            #expect(lone == nil && published == nil && cut.kept == 0)
        case .everythingKept:
            #expect(lone == Array("lone bytes".utf8) && published == Array("staged bytes".utf8) && cut.dataLost == 0)
        case .renamesKeptDataLost:
            #expect(lone == Array("lone bytes".utf8), "a lone install's data was fsynced before its rename")
            #expect(published == [] && cut.dataLost == 1, "the rename stays, the unsynced data goes")
        case .randomSubset:
            // Kept, lost, kept, lost: both temp files stay, neither rename does.
            #expect(lone == nil && published == nil && cut.kept == 2)
        }
        let temps = mirror.nodes.keys.filter { TemporaryName.matches($0.name) }.count
        #expect(temps == (mode == .randomSubset ? 2 : 0), "temp files left: \(temps)")
    }

    @Test("a power cut that keeps a rename and loses the install before it lands the installed file, not the old one")
    func powerCutRenameMovesTheInode() throws {
        let source = InMemoryTree(device: 1), mirror = InMemoryTree(device: 2)
        source.writeFile(RelativePath("new"), Array("new".utf8))
        mirror.writeFile(RelativePath("a"), Array("old bytes".utf8))
        try mirror.setAttributes(.root, mode: nil, mtime: nil)
        mirror.tracksDurability()
        // The new file replaces `a` (its rename not yet durable), then `a` is renamed to `b`.
        let staged = try mirror.stage(RelativePath("a"), from: try source.open(RelativePath("new")), durable: true)
        _ = try mirror.publish(staged)
        try mirror.rename(RelativePath("a"), to: RelativePath("b"))
        try mirror.setAttributes(RelativePath("b"), mode: 0o600, mtime: nil)
        // Keep the temp file and the last rename and the mode, lose the install's rename.
        var decisions = [true, false, true, true]
        let cut = mirror.powerCut(.randomSubset) { decisions.isEmpty ? true : decisions.removeFirst() }
        #expect(cut.pending == 4 && cut.kept == 3)
        #expect(mirror.node(RelativePath("b"))?.content == Array("new".utf8), "b is the inode the rename moved")
        #expect(mirror.node(RelativePath("b"))?.mode == 0o600, "the mode went with the inode")
        #expect(mirror.node(RelativePath("a"))?.content == Array("old bytes".utf8), "a's directory never saw the install")
        #expect(mirror.node(RelativePath("a"))?.mode == 0o644, "the old inode kept its mode")
    }

    @Test("the checks catch a torn mirror file, a lying record, a touched source and a leftover temp file")
    func checksCatchProblems() async throws {
        // The first seed whose short run ends with a non-empty file in the mirror.
        var found: (SimulationRun, RelativePath)?
        for seed: UInt64 in 1...100 where found == nil {
            let run = SimulationRun(seed: seed, steps: 20)
            _ = await run.run()
            guard run.violations.isEmpty else { continue }
            let files = run.mirrorTree.nodes.filter { $0.value.kind == .regular && !$0.value.content.isEmpty }
            if let file = files.keys.sorted().first { found = (run, file) }
        }
        let (run, file) = try #require(found, "no seed mirrors a file")

        // I2: the mirror shows half a file.
        let node = try #require(run.mirrorTree.node(file))
        run.mirrorTree.modify(file) { $0.content = Array(node.content.prefix(node.content.count / 2)) + [0, 0] }
        run.checkpoint("test")
        #expect(run.violations.contains { $0.hasPrefix("I2:") && $0.contains(file.escaped) })

        // I5: the mirror inode a record names holds other bytes (same inode, modified in place).
        #expect(run.violations.contains { $0.hasPrefix("I5:") && $0.contains(file.escaped) })

        // I4: the source changed behind the workload's back.
        run.source.writeFile(file, Array("written by someone else".utf8))
        run.checkpoint("test")
        #expect(run.violations.contains { $0.hasPrefix("I4:") })

        // I3/I1: a temp file left over.
        let temp = RelativePath.root.appending(Array(".keepsync-tmp-0123456789abcdef".utf8))
        run.mirrorTree.writeFile(temp, [1, 2, 3])
        run.expectMirrorEqualsSource("test")
        #expect(run.violations.contains { $0.contains("temp file .keepsync-tmp-0123456789abcdef left in mirror") })
    }
}
