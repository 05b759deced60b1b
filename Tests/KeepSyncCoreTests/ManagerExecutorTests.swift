import Dispatch
import Foundation
import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// Item 5 of issue 15: a manager's blocking scans run on its own queue, never on a thread
/// of the cooperative pool.
@Suite("ManagerExecutor")
struct ManagerExecutorTests {
    /// A source whose first listing blocks until released, and says where each ran.
    final class BlockingSource: FileSystemProviding {
        let tree = InMemoryTree(device: 1)
        let entered = Atomic<Bool>(false)
        let offPool = Atomic<Bool>(true)
        let blocking = Mutex(true)
        let release = DispatchSemaphore(value: 0)

        func stat(_ path: RelativePath) throws -> FileStat? { try tree.stat(path) }
        func readLink(_ path: RelativePath) throws -> [UInt8] { try tree.readLink(path) }
        func open(_ path: RelativePath) throws -> any SourceFile { try tree.open(path) }
        func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
            if !ManagerExecutor.isCurrent { offPool.store(false, ordering: .relaxed) }
            if blocking.withLock({ b in defer { b = false }; return b }) {
                entered.store(true, ordering: .relaxed)
                release.wait()
            }
            return try tree.list(directory)
        }
    }

    @Test("scans blocked in more managers than the pool has threads leave the pool free", .timeLimit(.minutes(1)))
    func blockedScansLeaveThePoolFree() async throws {
        let count = ProcessInfo.processInfo.activeProcessorCount + 1
        let sources = (0..<count).map { _ in BlockingSource() }
        var passes: [Task<Void, Never>] = []
        for source in sources {
            source.tree.writeFile(RelativePath("a"), [1])
            let mirror = LocalMirror(InMemoryTree(device: 2))
            let engine = SyncEngine(source: source, mirror: mirror, store: InMemoryStore(), records: RecordSet(),
                                    options: SyncOptions())
            let manager = SyncManager(engine: engine, source: source, mirror: mirror, clock: ManualClock(), executor: .inline)
            passes.append(Task {
                await manager.requestFullResync()
                await manager.processDue()
            })
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while !sources.allSatisfy({ $0.entered.load(ordering: .relaxed) }), ContinuousClock.now < deadline { await Task.yield() }
        try #require(sources.allSatisfy { $0.entered.load(ordering: .relaxed) }, "not every scan started")
        // Every scan blocks a thread now; work on the pool still runs.
        let answer = await Task.detached { 6 * 7 }.value
        #expect(answer == 42)
        for source in sources { source.release.signal() }
        for pass in passes { await pass.value }
        #expect(sources.allSatisfy { $0.offPool.load(ordering: .relaxed) }, "a listing ran off the managers' queues")
    }
}
