import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

@Suite("SyncCommand and CheckCommand")
struct CommandTests {
    func populated() -> FakeAgentHost {
        let host = FakeAgentHost(clock: ManualClock())
        host.source.writeFile(RelativePath("a"), Array("alpha".utf8))
        host.source.makeDirectory(RelativePath("dir"))
        host.source.writeFile(RelativePath("dir/b"), Array("bravo".utf8))
        return host
    }

    func sync(_ host: FakeAgentHost, _ writer: RecordingStatusWriter) throws -> ExitCode {
        try SyncCommand(settings: FakeAgentHost.settings(), host: host, statusWriter: writer, progress: SilentProgress(),
                        clock: host.clock, logger: .silent).run()
    }

    @Test func aSyncMirrorsTheSourceAndLeavesAStoppedStatus() throws {
        let host = populated(), writer = RecordingStatusWriter()
        #expect(try sync(host, writer) == .success)
        #expect(host.mirror.node(RelativePath("dir/b"))?.content == Array("bravo".utf8))
        let report = try #require(writer.reports.last)
        #expect(report.state == "stopped" && report.files == 2 && report.pid == 4242)
        #expect(report.lastFullSync == "2026-01-01T00:00:00Z")
        #expect(try host.store.load().root != nil)
        #expect(!host.isLocked)
    }

    @Test func aSyncOfAnEmptiedSourceIsRefusedWithAnErrorStatusAndTheMirrorKept() throws {
        let host = populated(), writer = RecordingStatusWriter()
        #expect(try sync(host, writer) == .success)
        host.source.delete(RelativePath("dir"))
        host.source.delete(RelativePath("a"))
        #expect { try sync(host, writer) } throws: { ($0 as? KeepSyncError)?.code == .unsafe }
        let report = try #require(writer.reports.last)
        #expect(report.state == "error")
        #expect(report.errors.first?.message.contains("is empty but the records list") == true)
        #expect(host.mirror.node(RelativePath("dir/b")) != nil)
    }

    @Test("a sync whose barriers fail never compacts records that claim what a power cut can take")
    func aSyncWhoseBarriersFailCompactsNothingUndurable() throws {
        let host = populated(), writer = RecordingStatusWriter()
        for i in 0..<3 { host.source.writeFile(RelativePath("dir/c\(i)"), Array("charlie \(i)".utf8)) }
        host.mirror.tracksDurability()
        host.mirror.failure.withLock {
            $0 = { op, path in op == .barrier ? KeepSyncError(.io, "syncfs: injected EIO", path: path) : nil }
        }
        let code = try sync(host, writer)
        #expect(code == .failure, "a sync that could not make its changes durable succeeded")
        #expect(host.mirror.count(.barrier) > 0)
        // What syncfs did not make durable is gone.
        let cut = host.mirror.powerCut(.nothingKept) { false }
        #expect(cut.pending > 0, "the cut took nothing: the test saw no undurable change")
        let stored = try host.store.load()
        for (path, record) in stored.table.map({ ($0.key, $0.value) }) where !path.isRoot {
            let node = host.mirror.node(path)
            #expect(node != nil && node!.inode == record.mirrorInode,
                    "the store claims \(path.escaped) (mirror inode \(record.mirrorInode)), the mirror holds \(node.map { "inode \($0.inode)" } ?? "nothing")")
        }
    }

    @Test func theSummaryNamesWhatChanged() {
        var s = SyncSummary()
        s.copiedFiles = 1
        s.copiedBytes = 2048
        s.removedEntries = 3
        #expect(SyncCommand<ManualClock>.describe(s) == "sync done: 1 file copied (2.0 KiB), 3 removed")
    }

    @Test func aCheckListsTheDifferencesAndExitsOne() throws {
        let host = populated()
        host.mirror.writeFile(RelativePath("a"), Array("alpha".utf8))
        let out = Mutex<[String]>([]), err = Mutex<[String]>([])
        let code = try CheckCommand(source: host.source, mirror: host.mirror, options: SyncOptions(), io: .serial)
            .run(output: { t in out.withLock { $0.append(t) } }, errors: { t in err.withLock { $0.append(t) } })
        #expect(code == .failure)
        let text = out.withLock { $0.joined() }
        #expect(text.contains("dir"), "\(text)")
        #expect(text.hasSuffix("differences\n") || text.hasSuffix("difference\n"))
        #expect(err.withLock { $0.isEmpty })
    }

    @Test func aCheckOfEqualTreesSaysNoDifferences() throws {
        let host = populated()
        #expect(try sync(host, RecordingStatusWriter()) == .success)
        let out = Mutex("")
        let code = try CheckCommand(source: host.source, mirror: host.mirror, options: SyncOptions(), io: .serial)
            .run(output: { t in out.withLock { $0 += t } }, errors: { _ in })
        #expect(code == .success)
        #expect(out.withLock { $0 } == "0 differences\n")
    }
}
