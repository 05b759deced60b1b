import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// The record writer alone: order, one write for what waits, the backlog after a failure,
/// compaction in turn, and the failure state its driver reads.
@Suite("RecordWriter")
struct RecordWriterTests {
    static func change(_ n: UInt64) -> RecordChange { .setRoot(FileIdentity(device: 1, inode: n)) }

    /// A writer over an in-memory mirror (whose barrier can be made to fail) and store.
    struct Rig {
        let mirror = InMemoryTree(device: 2)
        let store = InMemoryStore()
        let writer: RecordWriter

        init(scheduler: RecordScheduler = .held()) {
            writer = RecordWriter(mirror: LocalMirror(mirror), store: store, scheduler: scheduler)
        }

        func failBarriers(_ on: Bool) {
            let hook: @Sendable (InMemoryTree.Operation, RelativePath) -> KeepSyncError? = { op, _ in
                op == .barrier ? KeepSyncError(.noSpace, "injected ENOSPC") : nil
            }
            mirror.failure.withLock { $0 = on ? hook : nil }
        }
    }

    @Test("changes flushed while a write waits go out together, in order, once drained")
    func coalesces() async {
        let rig = Rig()
        rig.writer.add(Self.change(1))
        #expect(rig.writer.flush())
        rig.writer.add(Self.change(2))
        rig.writer.flush()
        #expect(rig.store.batches.isEmpty, "a held scheduler writes nothing before drain")
        await rig.writer.drain()
        #expect(rig.store.batches == [[Self.change(1), Self.change(2)]])
        #expect(!rig.writer.flush(), "nothing left to write")
    }

    @Test("a failed write keeps its changes at the head of the backlog until a write succeeds")
    func backlog() async throws {
        let rig = Rig(scheduler: .immediate)
        rig.failBarriers(true)
        rig.writer.add(Self.change(1))
        rig.writer.flush()
        #expect(rig.writer.failure?.code == .noSpace)
        #expect(rig.writer.failures == 1 && rig.writer.hasBacklog)
        #expect(rig.writer.flush(retryingBacklog: true), "a retry goes out with nothing new")
        #expect(rig.writer.failures == 2)
        rig.failBarriers(false)
        rig.writer.add(Self.change(2))
        rig.writer.flush()
        #expect(rig.store.batches == [[Self.change(1), Self.change(2)]])
        #expect(rig.writer.failure == nil && rig.writer.failures == 0 && !rig.writer.hasBacklog)
    }

    @Test("a compaction covers what waits; a failed one puts those changes back in the backlog")
    func compaction() async throws {
        let rig = Rig()
        var set = RecordSet()
        rig.writer.add(Self.change(1))
        set.apply(Self.change(1))
        rig.writer.flush()
        rig.writer.compact(set)
        rig.writer.add(Self.change(2))
        rig.writer.flush()
        await rig.writer.drain()
        #expect(rig.store.compactions == 1)
        #expect(rig.store.batches == [[Self.change(2)]], "the covered change is not appended again")

        rig.failBarriers(true)
        rig.writer.add(Self.change(3))
        set.apply(Self.change(3))
        rig.writer.compact(set)
        await rig.writer.drain()
        #expect(rig.store.compactions == 1 && rig.writer.failures == 1)
        rig.failBarriers(false)
        #expect(rig.writer.flush(retryingBacklog: true))
        await rig.writer.drain()
        #expect(rig.store.batches.last == [Self.change(3)])
        #expect(try rig.store.load().root == FileIdentity(device: 1, inode: 3))
    }
}
