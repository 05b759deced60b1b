import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// A long-running agent folds its records log into a fresh snapshot while it keeps
/// copying: the rewrite takes its turn among the appends, so the store never loses,
/// reorders or re-applies a change.
@Suite("Background compaction")
struct BackgroundCompactionTests {
    typealias World = SimulationRegressionTests.World
    static func p(_ text: String) -> RelativePath { RelativePath(text) }
    static func b(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Changes `name` in the source, and runs its copy; its record waits for its append.
    static func rewrite(_ w: World, _ name: String, _ text: String) async {
        w.source.writeFile(p(name), b(text))
        await w.receive(.closedAfterWrite(p(name)))
        w.clock.advance(by: .seconds(1))
        await w.manager.processDue()
        await w.runCopies()
    }

    /// The path a change is about (nil for the root's identity).
    static func path(_ change: RecordChange) -> RelativePath? {
        switch change {
        case .put(let record): record.path
        case .remove(let path): path
        case .setRoot, .setMirror: nil
        }
    }

    /// A world with held copies, a.txt and b.txt ("one") in sync.
    static func syncedWorld() async -> World {
        let w = World(held: true)
        w.source.writeFile(p("a.txt"), b("one"))
        w.source.writeFile(p("b.txt"), b("one"))
        await w.fullSync()
        return w
    }

    /// The store's record for `name`, by its size.
    static func storedSize(_ w: World, _ name: String) -> UInt64? {
        (try? w.store.load())?.table[p(name)]?.size
    }

    @Test("a compaction holds the changes waiting for their append; changes made after it are appended after it")
    func compactionTakesItsTurn() async throws {
        let w = await Self.syncedWorld()
        let batchesBefore = w.store.batches.count

        await Self.rewrite(w, "a.txt", "two two")
        await w.manager.compactRecordsInBackground()
        await Self.rewrite(w, "b.txt", "three three three")
        #expect(Self.storedSize(w, "a.txt") == 3, "nothing is written before the queue runs")
        await w.manager.drainRecords()

        let live = await w.manager.simulationRecords().table
        #expect(try w.store.load().table == live)
        #expect(Self.storedSize(w, "a.txt") == 7)
        #expect(Self.storedSize(w, "b.txt") == 17)
        let appended = w.store.batches.dropFirst(batchesBefore).flatMap { $0 }
        #expect(!appended.contains { Self.path($0) == Self.p("a.txt") }, "a change the snapshot holds was appended again")
        #expect(appended.contains { Self.path($0) == Self.p("b.txt") }, "the later change did not follow the snapshot")
        #expect(w.mirror.count(.barrier) > 0)
    }

    @Test("a compaction that fails (syncfs EIO) keeps its changes: they are appended once the disk works, and the error shows meanwhile")
    func failedCompactionKeepsChanges() async throws {
        let w = await Self.syncedWorld()

        let failing = Self.failBarriers(w)
        await Self.rewrite(w, "a.txt", "two two")
        await w.manager.compactRecordsInBackground()
        await w.manager.drainRecords()
        #expect(Self.storedSize(w, "a.txt") == 3, "the store took a record whose data was not durable")
        #expect(await eventually(every: .zero) { await w.manager.snapshot().errors[.root]?.contains("cannot write records") == true })

        failing.set(false)
        await Self.rewrite(w, "b.txt", "three three three")
        await w.settle()
        let live = await w.manager.simulationRecords().table
        #expect(try w.store.load().table == live)
        #expect(Self.storedSize(w, "a.txt") == 7, "the change the failed compaction held was lost")
        #expect(await eventually(every: .zero) { await w.manager.snapshot().errors[.root] == nil })
    }

    @Test("the compaction at stop makes the mirror durable first: while syncfs fails it writes nothing")
    func compactionAtStopWaitsForTheBarrier() async throws {
        let w = await Self.syncedWorld()
        let failing = Self.failBarriers(w)
        await Self.rewrite(w, "a.txt", "two two")
        await w.manager.drainRecords()
        let compactions = w.store.compactions
        await #expect(throws: KeepSyncError.self) { try await w.manager.compactRecords() }
        #expect(Self.storedSize(w, "a.txt") == 3, "the compaction claimed a copy no barrier made durable")
        #expect(w.store.compactions == compactions)
        failing.set(false)
        try await w.manager.compactRecords()
        #expect(Self.storedSize(w, "a.txt") == 7)
    }

    @Test("without a concurrent executor the compaction is done at once")
    func inlineCompaction() async throws {
        let w = World()
        w.source.writeFile(Self.p("a.txt"), Self.b("one"))
        await w.fullSync()
        await Self.rewrite(w, "a.txt", "two two")
        let before = w.store.compactions
        await w.manager.compactRecordsInBackground()
        #expect(w.store.compactions == before + 1)
        #expect(try w.store.load().table == (await w.manager.simulationRecords().table))
    }

    @Test("a compaction that failed with nothing else to write is asked again: the status error does not outlive the fault")
    func aFailedCompactionWithNothingOwedIsRetried() async throws {
        let w = World()
        w.source.writeFile(Self.p("a.txt"), Self.b("one"))
        await w.fullSync()
        let failing = Self.failBarriers(w)
        await w.manager.compactRecordsInBackground()
        #expect((await w.manager.snapshot().errors)[.root]?.hasPrefix("cannot write records") == true)
        failing.set(false)
        // A full pass that finds nothing to change writes no record: the owed compaction
        // is what clears the error (the simulation's seed 796420892788 kept it forever).
        let compactions = w.store.compactions
        await w.fullSync()
        let errors = await w.manager.snapshot().errors
        #expect(errors.isEmpty, "\(errors)")
        #expect(w.store.compactions == compactions + 1)
        #expect(try w.store.load().table == (await w.manager.simulationRecords().table))
    }

    @Test("the seed that found it: a background compaction's barrier fails (EACCES), then nothing changes")
    func failedCompactionSeed() async {
        let outcome = await SimulationRun(seed: 796_420_892_788).run()
        #expect(!outcome.violations.contains { $0.hasPrefix("I7") }, "\(outcome.violations)")
    }

    /// Makes the mirror's barriers (syncfs) fail with EIO until the returned switch is
    /// set to false.
    static func failBarriers(_ w: World) -> Switch {
        let failing = Switch(true)
        w.mirror.failure.withLock {
            $0 = { op, path in
                guard op == .barrier, failing.isOn else { return nil }
                return KeepSyncError(.io, "syncfs: injected EIO", path: path)
            }
        }
        return failing
    }

    /// A flag set from the test and read by a failure hook.
    final class Switch: Sendable {
        private let value: Mutex<Bool>
        init(_ on: Bool) { value = Mutex(on) }
        var isOn: Bool { value.withLock { $0 } }
        func set(_ on: Bool) { value.withLock { $0 = on } }
    }
}
