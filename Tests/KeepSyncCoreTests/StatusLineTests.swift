import Testing
@testable import KeepSyncCore

@Suite("StatusLine")
struct StatusLineTests {
    typealias Snapshot = SyncManager<ContinuousClock>.Snapshot

    func snapshot(pending: Int = 0, errors: Int = 0, files: Int = 0, held: Int = 0, copied: Int = 0) -> Snapshot {
        var errorMap: [RelativePath: String] = [:]
        for i in 0..<errors { errorMap[RelativePath("e\(i)")] = "failed" }
        return Snapshot(pending: pending, errors: errorMap, files: files, bytes: 0, heldDeletes: held, fullPasses: 0,
                        resyncing: false, copiedFiles: copied, copiedBytes: 0)
    }

    @Test func theLinesNameTheStateAndItsNumbers() {
        #expect(StatusLine.text(state: .watching, snapshot: snapshot(pending: 2, files: 12345), readySent: true)
                == "watching 12,345 files, 2 pending")
        #expect(StatusLine.text(state: .watching, snapshot: snapshot(files: 1), readySent: true) == "watching 1 file, 0 pending")
        #expect(StatusLine.text(state: .syncing, snapshot: snapshot(pending: 7, copied: 1000), readySent: false)
                == "initial sync: 1,000 files copied, 7 pending")
        #expect(StatusLine.text(state: .syncing, snapshot: snapshot(pending: 3), readySent: true) == "resyncing, 3 pending")
        #expect(StatusLine.text(state: .stopped, snapshot: snapshot(), readySent: true) == "stopped")
        #expect(StatusLine.text(state: .watching, snapshot: snapshot(errors: 2, files: 5, held: 4), readySent: true)
                == "watching 5 files, 0 pending, 2 errors, 4 deletions held")
        #expect(StatusLine.paused("source /s is missing") == "paused: source /s is missing")
    }

    @Test(arguments: [(AgentState.starting, "starting"), (.syncing, "syncing"), (.watching, "watching"),
                      (.paused(reason: "x"), "error"), (.refused(reason: "y"), "error"), (.stopped, "stopped")])
    func theStatusFileNamesEachState(state: AgentState, name: String) {
        #expect(state.name == name)
    }

    @Test func groupingPutsACommaEveryThreeDigits() {
        #expect(StatusLine.grouped(0) == "0")
        #expect(StatusLine.grouped(999) == "999")
        #expect(StatusLine.grouped(1000) == "1,000")
        #expect(StatusLine.grouped(1234567) == "1,234,567")
    }
}
