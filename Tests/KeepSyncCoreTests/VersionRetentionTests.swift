import KeepSyncCore
import Testing

/// Retention of versions (SPEC "Versions", issue 40 item 4), over simulated time.
@Suite("Version retention")
struct VersionRetentionTests {
    /// `times` with the expired ones taken out.
    static func thinned(_ times: [Int64], now: Int64, keep: Int64) -> [Int64] {
        let gone = VersionRetention.expired(times, now: now, keep: keep)
        return times.indices.filter { !gone.contains($0) }.map { times[$0] }
    }

    @Test("60 simulated days of a file replaced every 10 s, thinned every hour and kept 30 days: nothing older than 30 days, at most one per 30 s in the first hour, per hour in the first day, per day after, the newest always kept")
    func sixtyDays() {
        let keep: Int64 = 30 * 86_400
        var now: Int64 = 1_796_607_000
        var versions: [Int64] = []
        var runs = 0, added = 0, removed = 0
        for _ in 0..<(60 * 24) {
            for _ in 0..<360 {
                now += 10
                versions.append(now)
                added += 1
            }
            let before = versions.count
            versions = Self.thinned(versions, now: now, keep: keep)
            removed += before - versions.count
            runs += 1
            #expect(versions.contains(now), "the newest stays")
            func count(_ range: Range<Int64>) -> Int { versions.filter { range.contains(now - $0) }.count }
            #expect(versions.allSatisfy { now - $0 <= keep })
            #expect(count(0..<3600) <= 3600 / 30 + 1)
            #expect(count(3600..<86_400) <= 24)
            #expect(count(86_400..<(keep + 1)) <= 31)
        }
        // Every stretch of the first hour, day and month holds one.
        #expect(versions.count >= 100 && versions.count <= 120 + 24 + 31, "\(versions.count)")
        #expect(runs == 1440 && added == 518_400 && removed == added - versions.count)
        print("VersionRetentionTests: 60 days, \(added) versions made, \(runs) hourly thinnings, \(versions.count) kept")
    }

    @Test("versions further apart than their interval all stay; older than the kept duration all go; a week's interval past 30 days")
    func spacing() {
        let now: Int64 = 1_796_607_000
        let hourly = (1...20).map { now - Int64($0) * 3600 - 1 }
        #expect(Self.thinned(hourly, now: now, keep: 86_400) == hourly)
        #expect(Self.thinned([now - 86_401, now - 10], now: now, keep: 86_400) == [now - 10])
        // Two a day at 40-50 days: one per week stays.
        let old = (0..<20).map { now - 40 * 86_400 - Int64($0) * 43_200 }
        let kept = Self.thinned(old, now: now, keep: 365 * 86_400)
        #expect(kept.count >= 1 && kept.count <= 3, "\(kept.count) of 20 over 10 days")
    }
}
