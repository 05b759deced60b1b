import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// The full pass streams (issue 17): its steps are applied while the tree is walked, and
/// only what needs the whole picture (deletions, rename candidates, their directories'
/// finishes) waits for the end.
@Suite("Streamed pass")
struct StreamedPassTests {
    typealias H = SyncEngineTests.Harness
    static func p(_ text: String) -> RelativePath { RelativePath(text) }

    /// `directories` directories of `files` small files each.
    static func populate(_ source: InMemoryTree, directories: Int, files: Int) {
        for d in 0..<directories {
            source.makeDirectory(p("d\(d + 10)"))
            for f in 0..<files { source.writeFile(p("d\(d + 10)/f\(f + 100)"), Array("\(d).\(f)".utf8)) }
        }
    }

    @Test("a first pass copies while it walks: files of the first directory are in the mirror before the last one is listed; nothing waits for the end")
    func firstPassCopiesWhileWalking() throws {
        let h = H()
        Self.populate(h.source, directories: 12, files: 100)
        let early = Mutex<Bool?>(nil)
        let mirror = h.mirror
        h.source.failure.withLock {
            $0 = { op, path in
                if op == .list, path == Self.p("d21") { early.withLock { $0 = mirror.node(Self.p("d10/f100")) != nil } }
                return nil
            }
        }
        let (scan, summary) = try h.engine.fullPass()
        #expect(summary.errors.isEmpty && summary.copiedFiles == 1200, "\(summary)")
        #expect(early.withLock { $0 } == true, "the last directory was listed before anything was copied")
        #expect(scan.steps.isEmpty, "a first run into an empty mirror held back \(scan.steps.count) steps")
        #expect(scan.plannedCopies.files == 1200)
        SyncEngineTests.assertTreesEqual(h.source, h.mirror)
        try h.expectRecordsFollowMirror()
    }

    @Test("the brake decides at the end over all of the pass's deletions; everything else is applied")
    func brakeAtTheEnd() throws {
        let h = H()
        Self.populate(h.source, directories: 3, files: 10)
        try #require(try h.pass().errors.isEmpty)
        for f in 0..<10 { h.source.delete(Self.p("d10/f\(f + 100)")) }
        for f in 0..<9 { h.source.delete(Self.p("d12/f\(f + 100)")) }
        h.source.writeFile(Self.p("d11/new"), Array("new".utf8))
        h.resetCounts()
        let (scan, summary) = try h.engine.fullPass()
        #expect(summary.heldDeletes == 19 && summary.removedEntries == 0, "\(summary)")
        #expect(summary.copiedFiles == 1, "\(summary)")
        #expect(scan.deletions == 19 && scan.mirrorEntries == 33, "\(scan.deletions) of \(scan.mirrorEntries)")
        #expect(h.mirror.node(Self.p("d10/f100")) != nil && h.mirror.node(Self.p("d11/new")) != nil)
        try h.expectRecordsFollowMirror()
    }

    @Test("a folder moved into a folder moved while stopped, its old name made again: both renamed in the mirror, nothing copied")
    func moveIntoAMovedFolderFromAReplacedOne() throws {
        let h = try RenameAcrossRestartTests.stoppedAfterSync()
        try h.source.rename(Self.p("keep"), to: Self.p("new-keep"))
        try h.source.rename(Self.p("dd"), to: Self.p("new-keep/dd"))
        h.source.makeDirectory(Self.p("dd"))
        h.resetCounts()
        let summary = try RenameAcrossRestartTests.passConverges(h)
        #expect(summary.renamed == 2 && summary.copiedFiles == 0, "\(summary)")
    }

    @Test("a replaced folder already walked is no move's origin any more: its old entries still move out one by one, one pass converges")
    func walkedReplacedFolderIsNoOrigin() throws {
        let h = try RenameAcrossRestartTests.stoppedAfterSync()
        try h.source.rename(Self.p("keep"), to: Self.p("k2"))
        try h.source.rename(Self.p("build0"), to: Self.p("k2/b"))
        try h.source.rename(Self.p("dd"), to: Self.p("k2/b/dd"))
        h.source.makeDirectory(Self.p("dd"))
        h.source.writeFile(Self.p("dd/n"), Array("new".utf8))
        h.resetCounts()
        let summary = try RenameAcrossRestartTests.passConverges(h)
        // keep, build0, dd/sub and dd/inner.bin; the new file is the one copy.
        #expect(summary.renamed == 4, "\(summary)")
        #expect(summary.copiedFiles == 1, "\(summary)")
    }
}
