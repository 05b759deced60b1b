import Testing
@testable import KeepSyncCore

/// `--at TIME` (`restore`) and the times `versions` prints.
@Suite("VersionTime")
struct VersionTimeTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }
    /// 2026-12-07T01:30:00Z.
    static let moment: Int64 = 1_796_607_000

    @Test("ISO 8601 with Z or an offset is an instant; T or a space; seconds and a fraction optional", arguments: [
        ("2026-12-07T01:30:00Z", moment), ("2026-12-07 01:30:00Z", moment), ("2026-12-07T01:30Z", moment),
        ("2026-12-07t01:30:00z", moment), ("2026-12-07T01:30:00.999Z", moment), ("2026-12-07T01:30:00,5Z", moment),
        ("2026-12-07T02:30:00+01:00", moment), ("2026-12-07T02:30:00+0100", moment), ("2026-12-07T02:30+01", moment),
        ("2026-12-06T21:00:00-04:30", moment), ("2026-12-07 01:30:59Z", moment + 59),
        ("2024-02-29T00:00:00Z", 1_709_164_800),
    ])
    func instants(_ text: String, _ seconds: Int64) {
        #expect(VersionTime(parsing: Self.b(text)) == .instant(seconds), "\(text)")
    }

    @Test("without an offset it is local time, resolved in the zone")
    func localTimes() throws {
        let at = try #require(VersionTime(parsing: Self.b("2026-12-07 02:30")))
        #expect(at == .local(Self.moment + 3600))
        #expect(at.resolved(now: 0, zone: LocalZone { _ in 3600 }) == Self.moment)
        #expect(at.resolved(now: 0, zone: .utc) == Self.moment + 3600)
        #expect(VersionTime(parsing: Self.b("2026-12-07T02:30:15"))?.resolved(now: 0, zone: LocalZone { _ in -1800 })
                == Self.moment + 3600 + 15 + 1800)
    }

    @Test("a local time near a clock change resolves to a moment that reads as it, where there is one")
    func daylightSaving() {
        // +1 before 2026-03-29T01:00:00Z, +2 after (central Europe).
        let change: Int64 = 1_774_746_000
        let zone = LocalZone { $0 < change ? 3600 : 7200 }
        let before = VersionTime.local(change - 60 + 3600).resolved(now: 0, zone: zone)
        let after = VersionTime.local(change + 60 + 7200).resolved(now: 0, zone: zone)
        #expect(before == change - 60 && after == change + 60)
        // 02:30 local does not exist that day: one of the moments beside the gap.
        let skipped = VersionTime.local(change + 1800 + 3600).resolved(now: 0, zone: zone)
        #expect(skipped == change + 1800 || skipped == change - 1800, "\(skipped - change)")
    }

    @Test("'N ago' counts back from now in s, m, h, d or w", arguments: [
        ("2h ago", Int64(7200)), ("30m ago", 1800), ("3d ago", 259_200), ("90s ago", 90), ("1w ago", 604_800), ("2h  ago", 7200),
    ])
    func ago(_ text: String, _ seconds: Int64) {
        #expect(VersionTime(parsing: Self.b(text)) == .ago(seconds))
        #expect(VersionTime(parsing: Self.b(text))?.resolved(now: Self.moment, zone: .utc) == Self.moment - seconds)
    }

    @Test("anything else is refused", arguments: [
        "", "yesterday", "2h", "ago", " ago", "0s ago", "2y ago", "-2h ago", "2026-12-07", "2026-12-7 01:30", "26-12-07 01:30",
        "2026-13-07 01:30", "2026-02-29 01:30", "2026-04-31 01:30", "2026-12-07 24:00", "2026-12-07 01:60", "2026-12-07 01:30:60",
        "2026-12-07T01:30:00+1", "2026-12-07T01:30:00+19:00", "2026-12-07T01:30:00Zx", "2026-12-07T01:30:00.Z",
        "2026-12-07X01:30", "2026-12-07T01:30 ", "1796607000",
    ])
    func refused(_ text: String) {
        #expect(VersionTime(parsing: Self.b(text)) == nil, "\(text)")
    }

    @Test("a refused --at is exit 2 naming --at and the value")
    func refusedByTheParser() {
        let error = #expect(throws: KeepSyncError.self) {
            try CommandLineParser.parse([Self.b("restore"), Self.b("docs/a"), Self.b("--at"), Self.b("next tuesday")])
        }
        #expect(error?.message == "--at: \(VersionTime.expectation), got 'next tuesday'")
        #expect(error.map(ExitCode.init(failure:)) == .usage)
    }

    @Test("printed: ISO 8601 UTC, and local time with its offset")
    func printing() {
        #expect(VersionTime.iso(Self.moment) == "2026-12-07T01:30:00Z")
        #expect(VersionTime.local(Self.moment, zone: LocalZone { _ in 3600 }) == "2026-12-07 02:30:00 +0100")
        #expect(VersionTime.local(Self.moment, zone: LocalZone { _ in -(3 * 3600 + 1800) }) == "2026-12-06 22:00:00 -0330")
        #expect(VersionTime.local(Self.moment, zone: .utc) == "2026-12-07 01:30:00 +0000")
        #expect(VersionTime.local(0, zone: .utc) == "1970-01-01 00:00:00 +0000")
    }
}
