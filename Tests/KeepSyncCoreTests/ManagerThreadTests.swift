import Dispatch
import Foundation
import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// Item 5 of issue 15: a manager's blocking scans run on a thread of its own, never on a
/// thread of the cooperative pool; the thread runs jobs in order and ends when closed.
@Suite("ManagerThread")
struct ManagerThreadTests {
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
            if !ManagerThread.isCurrent { offPool.store(false, ordering: .relaxed) }
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
            let manager = SyncManager(engine: engine, clock: ManualClock(), executor: .inline)
            passes.append(Task {
                await manager.requestFullResync()
                await manager.processDue()
            })
        }
        let started = await eventually(timeout: .seconds(30)) { sources.allSatisfy { $0.entered.load(ordering: .relaxed) } }
        try #require(started, "not every scan started")
        // Every scan blocks a thread now; work on the pool still runs.
        let answer = await Task.detached { 6 * 7 }.value
        #expect(answer == 42)
        for source in sources { source.release.signal() }
        for pass in passes { await pass.value }
        #expect(sources.allSatisfy { $0.offPool.load(ordering: .relaxed) }, "a listing ran off the managers' queues")
    }

    @Test("jobs run in the order enqueued, on the thread, and stop ends it after them")
    func runsInOrderThenEnds() async {
        final class Log: Sendable {
            let seen = Mutex<[Int]>([])
            let onThread = Atomic<Int>(0)
        }
        let thread = ManagerThread(label: "test"), log = Log()
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                // Enqueued in order: each task's first job goes to the thread as it is made.
                group.addTask(executorPreference: thread) {
                    if ManagerThread.isCurrent { log.onThread.add(1, ordering: .relaxed) }
                    log.seen.withLock { $0.append(i) }
                }
            }
        }
        #expect(log.seen.withLock { $0 } == Array(0..<50))
        #expect(log.onThread.load(ordering: .relaxed) == 50, "a job ran off the thread")
        thread.stop()
        #expect(!ManagerThread.isCurrent)
    }
}
