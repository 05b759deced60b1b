import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// What a pass holds in memory (issue 17): the records it adds are made room for at once.
@Suite("Pass memory")
struct PassMemoryTests {
    @Test("a first pass makes room for its records once: the table holds no doubled capacity")
    func firstPassReservesItsRecords() throws {
        let source = InMemoryTree(device: 1)
        for d in 0..<20 {
            source.makeDirectory(RelativePath("d\(d)"))
            for f in 0..<110 { source.writeFile(RelativePath("d\(d)/f\(f)"), [1, 2]) }
        }
        let engine = SyncEngine(source: source, mirror: LocalMirror(InMemoryTree(device: 2)), store: InMemoryStore(),
                                records: RecordSet(), options: SyncOptions())
        let summary = try engine.fullPass().summary
        #expect(summary.copiedFiles == 2200)
        let table = engine.records.table
        #expect(table.count == 2221, "2200 files, 20 directories and the root")
        // Grown by appends, the slots would have doubled past the count (4096).
        #expect(table.slots.capacity < table.count + table.count / 8)
    }

    @Test("the manager's copy queues let their capacity go once a big pass's copies are done")
    func copyQueuesShrinkAfterABigPass() async throws {
        let source = InMemoryTree(device: 1)
        for d in 0..<4 {
            source.makeDirectory(RelativePath("d\(d)"))
            for f in 0..<600 { source.writeFile(RelativePath("d\(d)/f\(f)"), [1]) }
        }
        let mirror = LocalMirror(InMemoryTree(device: 2))
        let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(),
                                options: SyncOptions())
        let manager = SyncManager(engine: engine, clock: ManualClock(), executor: .inline)
        await manager.requestFullResync()
        await manager.processDue()
        await manager.waitForCopies()
        await manager.processDue()
        #expect(await manager.snapshot().copiedFiles == 2400)
        let capacity = await manager.copies.capacity
        #expect(capacity == 0, "\(capacity)")
    }
}
