import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// Renames made while keepsync was not running: found by identity (device, inode, birth
/// time) at the next full pass and applied as renames in the mirror, directories included.
@Suite("Renames across restarts")
struct RenameAcrossRestartTests {
    typealias H = SyncEngineTests.Harness
    static func p(_ text: String) -> RelativePath { RelativePath(text) }

    /// A synced harness with `dd/inner.bin`, `dd/sub/s`, `keep/a` and `build0/x/raw40`,
    /// restarted (a fresh engine over the stored records), counters reset.
    static func stoppedAfterSync(reportsBirthTime: Bool = true, reportsGeneration: Bool = false) throws -> H {
        let h = H(source: InMemoryTree(device: 1, reportsBirthTime: reportsBirthTime, reportsGeneration: reportsGeneration))
        h.source.makeDirectory(p("dd"))
        h.source.writeFile(p("dd/inner.bin"), Array(repeating: 7, count: 5000))
        h.source.makeDirectory(p("dd/sub"))
        h.source.writeFile(p("dd/sub/s"), Array("s".utf8))
        h.source.makeDirectory(p("keep"))
        h.source.writeFile(p("keep/a"), Array("a".utf8))
        h.source.makeDirectory(p("build0"))
        h.source.makeDirectory(p("build0/x"))
        h.source.writeFile(p("build0/x/raw40"), Array("raw".utf8))
        let first = try h.pass()
        try #require(first.errors.isEmpty)
        try h.restart()
        h.resetCounts()
        return h
    }

    /// A pass, then checks: the trees are equal, the records true, and a second pass does
    /// nothing at all (one pass leaves nothing for the next).
    static func passConverges(_ h: H, sourceLocation: SourceLocation = #_sourceLocation) throws -> SyncSummary {
        let summary = try h.pass()
        #expect(summary.errors.isEmpty, "\(summary.errors)", sourceLocation: sourceLocation)
        SyncEngineTests.assertTreesEqual(h.source, h.mirror, sourceLocation: sourceLocation)
        try h.expectRecordsFollowMirror(sourceLocation: sourceLocation)
        h.resetCounts()
        let again = try h.pass()
        #expect(again == SyncSummary(), "the next pass found work: \(again)", sourceLocation: sourceLocation)
        #expect(h.writesAndOpens == [:], "the next pass touched the mirror", sourceLocation: sourceLocation)
        return summary
    }

    @Test("a folder renamed while stopped is renamed in the mirror: nothing is copied, created or removed")
    func folderRename() throws {
        let h = try Self.stoppedAfterSync()
        let inode = try #require(h.mirror.node(Self.p("dd"))?.inode)
        try h.source.rename(Self.p("dd"), to: Self.p("dd2"))
        h.resetCounts()
        let summary = try Self.passConverges(h)
        #expect(summary.renamed == 1)
        #expect(summary.copiedFiles == 0 && summary.createdDirectories == 0 && summary.removedEntries == 0, "\(summary)")
        #expect(h.mirror.node(Self.p("dd2"))?.inode == inode, "the mirror's directory itself moved")
    }

    @Test("a file changed inside a folder renamed while stopped is the only copy")
    func folderRenameWithAChangeInside() throws {
        let h = try Self.stoppedAfterSync()
        try h.source.rename(Self.p("dd"), to: Self.p("dd2"))
        h.source.writeFile(Self.p("dd2/sub/s"), Array("changed".utf8))
        h.resetCounts()
        let summary = try Self.passConverges(h)
        #expect(summary.renamed == 1)
        #expect(summary.copiedFiles == 1 && summary.copiedBytes == 7, "\(summary)")
    }

    @Test("nested: a folder renamed inside a renamed folder, a file moved into it, a folder moved into a new folder")
    func nestedRenames() throws {
        let h = try Self.stoppedAfterSync()
        try h.source.rename(Self.p("dd"), to: Self.p("dd2"))
        try h.source.rename(Self.p("dd2/sub"), to: Self.p("dd2/sub2"))
        try h.source.rename(Self.p("keep/a"), to: Self.p("dd2/sub2/a"))
        h.source.makeDirectory(Self.p("new"))
        try h.source.rename(Self.p("keep"), to: Self.p("new/keep2"))
        try h.source.rename(Self.p("build0/x"), to: Self.p("new/keep2/x"))
        h.resetCounts()
        let summary = try Self.passConverges(h)
        #expect(summary.copiedFiles == 0, "\(summary)")
        #expect(summary.renamed == 5, "\(summary)")
    }

    @Test("a folder renamed and its old name made again holds the old content at the new name")
    func renameThenRecreate() throws {
        let h = try Self.stoppedAfterSync()
        try h.source.rename(Self.p("dd"), to: Self.p("dd2"))
        h.source.makeDirectory(Self.p("dd"))
        h.resetCounts()
        let summary = try Self.passConverges(h)
        #expect(summary.renamed == 1 && summary.copiedFiles == 0, "\(summary)")
    }

    @Test("without a birth time the identity is not certain: the folder's files are copied")
    func noBirthTimeNoRename() throws {
        let h = try Self.stoppedAfterSync(reportsBirthTime: false)
        try h.source.rename(Self.p("dd"), to: Self.p("dd2"))
        h.resetCounts()
        let summary = try Self.passConverges(h)
        #expect(summary.renamed == 0)
        #expect(summary.copiedFiles == 2, "\(summary)")
    }

    @Test("without a birth time the inode generation makes the identity certain: the folder and a file are renamed")
    func generationWithoutBirthTimeRenames() throws {
        let h = try Self.stoppedAfterSync(reportsBirthTime: false, reportsGeneration: true)
        try h.source.rename(Self.p("dd"), to: Self.p("dd2"))
        try h.source.rename(Self.p("keep/a"), to: Self.p("keep/a2"))
        h.resetCounts()
        let summary = try Self.passConverges(h)
        #expect(summary.renamed == 2 && summary.copiedFiles == 0, "\(summary)")
    }

    @Test("a generation stamp never equals a birth time, and a birth time wins over a generation")
    func generationStamp() {
        let stamp = Timespec.generationStamp(42)
        #expect(stamp.nanoseconds >= 1_000_000_000, "no clock gives these nanoseconds")
        var st = FileStat(kind: .regular, mode: 0o644, size: 1, mtime: Timespec(seconds: 42, nanoseconds: 0))
        st.generation = 42
        #expect(st.identityStamp == stamp)
        st.birthTime = Timespec(seconds: 42, nanoseconds: 999_999_999)
        #expect(st.identityStamp == st.birthTime)
        st.birthTime = nil
        st.generation = nil
        #expect(st.identityStamp == nil)
    }

    @Test("a generation stamp survives the record table")
    func generationStampRoundTrips() throws {
        let h = try Self.stoppedAfterSync(reportsBirthTime: false, reportsGeneration: true)
        let stat = try #require(try h.source.stat(Self.p("keep/a")))
        let generation = try #require(stat.generation)
        let record = try #require(try h.store.load().table[Self.p("keep/a")])
        #expect(record.birthTime == Timespec.generationStamp(generation))
    }

    @Test("a file moved out of a folder while stopped: one pass also fixes the folder it left")
    func oldParentMtime() throws {
        let h = try Self.stoppedAfterSync()
        try h.source.rename(Self.p("build0/x/raw40"), to: Self.p("keep/raw40"))
        h.resetCounts()
        let summary = try Self.passConverges(h)
        #expect(summary.renamed == 1 && summary.copiedFiles == 0, "\(summary)")
    }

    @Test("check (a scan that changes nothing) reports a renamed folder as missing and extra entries")
    func checkStillReportsTheDifference() throws {
        let h = try Self.stoppedAfterSync()
        try h.source.rename(Self.p("dd"), to: Self.p("dd2"))
        h.resetCounts()
        let scan = try h.engine.scan()
        #expect(scan.directoryRenames == [Move(from: Self.p("dd"), to: Self.p("dd2"))])
        #expect(h.writesAndOpens == [:])
    }
}
