import Dispatch
import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// "cannot write records" in status follows the record writer's real state: it stays
/// while a retry is in flight and goes only when a write succeeded.
@Suite("Records failure status")
struct RecordsFailureTests {
    /// A store whose appends can fail, and can be held inside `apply` until released.
    final class GatedStore: BookmarkStorageProviding {
        let inner = InMemoryStore()
        let failing = Mutex(false)
        let holding = Mutex(false)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)

        func load() throws -> RecordSet { try inner.load() }
        func apply(_ changes: [RecordChange]) throws {
            if holding.withLock({ $0 }) {
                entered.signal()
                release.wait()
            }
            if failing.withLock({ $0 }) { throw KeepSyncError(.noSpace, "write records.log: injected ENOSPC") }
            try inner.apply(changes)
        }
        func compact(_ set: RecordSet) throws { try inner.compact(set) }
    }

    static func p(_ text: String) -> RelativePath { RelativePath(text) }

    @Test("the error stays while a retry is in flight and goes once an append succeeds")
    func errorFollowsTheWriter() async throws {
        let source = InMemoryTree(device: 1), mirror = InMemoryTree(device: 2), store = GatedStore()
        let clock = ManualClock(), copies = HeldCopies()
        let engine = SyncEngine(source: source, mirror: LocalMirror(mirror), store: store, records: RecordSet(), options: SyncOptions(),
                                recordScheduler: copies.executor.recordScheduler ?? .serialQueue())
        let manager = SyncManager(engine: engine, clock: clock, executor: copies.executor)
        func error() async -> String? { await manager.snapshot().errors[.root] }
        func write(_ name: String) async {
            source.writeFile(Self.p(name), Array(name.utf8))
            await manager.receive(.closedAfterWrite(Self.p(name)))
            await manager.processDue()
            copies.runAll()
            // Its results reach the manager on a task of their own (late under load).
            await manager.waitForCopies()
        }
        source.writeFile(Self.p("a"), [1])
        await manager.requestFullResync()
        await manager.processDue()
        copies.runAll()
        await manager.waitForCopies()
        await manager.drainRecords()

        store.failing.withLock { $0 = true }
        await write("b")
        let failed = await eventually(every: .zero) { await error()?.hasPrefix("cannot write records") == true }
        try #require(failed, "the failed append is not reported")

        // A retry blocks inside the store; meanwhile the manager flushes again.
        store.holding.withLock { $0 = true }
        await write("c")
        let inFlight = await eventually(every: .zero) { store.entered.wait(timeout: .now()) == .success }
        try #require(inFlight, "no retry reached the store")
        await write("d")
        await manager.processDue()
        #expect(await error()?.hasPrefix("cannot write records") == true, "cleared while the retry was still failing")

        store.holding.withLock { $0 = false }
        store.release.signal()
        await manager.drainRecords()
        #expect(await error()?.hasPrefix("cannot write records") == true)

        store.failing.withLock { $0 = false }
        await write("e")
        await manager.drainRecords()
        let cleared = await eventually(every: .zero) { await error() == nil }
        let left = await error()
        #expect(cleared, "still \(left ?? "")")
        #expect(try store.load().table[Self.p("d")] != nil, "the backlog went out with the next append")
    }
}
