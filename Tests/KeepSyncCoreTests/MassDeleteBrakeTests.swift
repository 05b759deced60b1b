import Testing
@testable import KeepSyncCore

/// The brake's decision alone, over scans built by hand.
@Suite("MassDeleteBrake")
struct MassDeleteBrakeTests {
    /// A scan of a mirror with `entries` entries whose steps remove `removals` (path, entries).
    static func scan(entries: Int, removals: [(String, Int)]) -> SyncScan {
        var scan = SyncScan(scope: .root)
        scan.mirrorEntries = entries
        for (path, removed) in removals {
            let p = RelativePath(path)
            scan.steps.append(.path(PathState(path: p, source: nil, record: nil, mirror: nil), [.remove(p)], removedEntries: removed))
            scan.deletions += removed
        }
        return scan
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var percent: Int, lifted: Bool, entries: Int, deletions: Int, holds: Bool
        var testDescription: String { "\(deletions) of \(entries) at \(percent)%\(lifted ? ", lifted" : ""): \(holds ? "held" : "applied")" }
    }

    @Test("holds more than the threshold's share, never 10 or fewer, never when lifted or at 100%", arguments: [
        Case(percent: 50, lifted: false, entries: 100, deletions: 51, holds: true),
        Case(percent: 50, lifted: false, entries: 100, deletions: 50, holds: false),
        Case(percent: 50, lifted: false, entries: 12, deletions: 10, holds: false),
        Case(percent: 50, lifted: false, entries: 12, deletions: 11, holds: true),
        Case(percent: 50, lifted: true, entries: 100, deletions: 100, holds: false),
        Case(percent: 100, lifted: false, entries: 100, deletions: 100, holds: false),
        Case(percent: 0, lifted: false, entries: 1000, deletions: 11, holds: true),
    ])
    func threshold(_ c: Case) {
        let scan = Self.scan(entries: c.entries, removals: [("d", c.deletions)])
        #expect(MassDeleteBrake(maxDeletePercent: c.percent, lifted: c.lifted).holds(scan) == c.holds)
    }

    @Test("exempt paths' deletions are not counted and not held")
    func exempt() throws {
        let scan = Self.scan(entries: 100, removals: [("live", 45), ("inferred", 15)])
        #expect(MassDeleteBrake(maxDeletePercent: 50).holds(scan))
        let brake = MassDeleteBrake(maxDeletePercent: 50, exempt: [RelativePath("live")])
        #expect(!brake.holds(scan), "15 of 100 counted")
        let held = MassDeleteBrake(maxDeletePercent: 10, exempt: [RelativePath("live")])
        #expect(held.holds(scan))
        #expect(!held.holds(RelativePath("live"), actions: [.remove(RelativePath("live"))]), "an exempt step goes through")
        #expect(held.holds(RelativePath("inferred"), actions: [.remove(RelativePath("inferred"))]))
    }

    @Test("the options' brake is lifted by allowMassDelete")
    func fromOptions() {
        let brake = MassDeleteBrake(SyncOptions(maxDeletePercent: 30, allowMassDelete: true))
        #expect(brake == MassDeleteBrake(maxDeletePercent: 30, lifted: true))
    }
}
