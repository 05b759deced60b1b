/// Which versions go (SPEC "Versions", retention): those older than the kept duration,
/// and, per file, all but the newest in each interval: 30 s within the first hour, an
/// hour within the first day, a day within 30 days, a week after that. Intervals are
/// fixed stretches of the clock (a version's time divided by the interval's length), so
/// a version kept stays kept until its age moves it into a longer interval.
public enum VersionRetention {
    /// Interval lengths by age: (ages below, interval seconds); the last covers the rest.
    static let intervals: [(below: Int64, length: Int64)] = [
        (3600, 30), (86_400, 3600), (30 * 86_400, 86_400), (.max, 7 * 86_400),
    ]

    /// The indices of `times` (one file's versions, seconds since the epoch) that go at
    /// `now` when versions are kept `keep` seconds.
    public static func expired(_ times: [Int64], now: Int64, keep: Int64) -> Set<Int> {
        var out: Set<Int> = []
        // Newest first: the first seen in an interval stays.
        let order = times.indices.sorted { times[$0] != times[$1] ? times[$0] > times[$1] : $0 > $1 }
        var taken: Set<[Int64]> = []
        for i in order {
            let age = now - times[i]
            if age > keep {
                out.insert(i)
                continue
            }
            let tier = intervals.firstIndex { age < $0.below } ?? intervals.count - 1
            let length = intervals[tier].length
            let stretch = times[i] >= 0 ? times[i] / length : (times[i] - length + 1) / length
            if !taken.insert([Int64(tier), stretch]).inserted { out.insert(i) }
        }
        return out
    }
}
