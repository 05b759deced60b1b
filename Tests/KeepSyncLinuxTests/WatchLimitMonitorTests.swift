import KeepSyncCore
@testable import KeepSyncLinux
import Synchronization
import Testing

/// The watch limit's bookkeeping, with instants passed in: no inotify, no waiting.
@Suite("WatchLimitMonitor")
struct WatchLimitMonitorTests {
    /// The lines logged.
    final class Lines: Sendable {
        let texts = Mutex<[String]>([])
        func withLock<R>(_ body: (inout [String]) -> R) -> R { texts.withLock { body(&$0) } }
    }

    let lines = Lines()
    var logger: Logger {
        Logger(level: .info) { [lines] _, text in lines.withLock { $0.append(text) } }
    }

    @Test("unwatched directories: one warning naming the sysctl, polls at a fixed rate, then all clear")
    func episode() {
        var monitor = WatchLimitMonitor(interval: .seconds(30), logger: logger)
        let start = ContinuousClock.now
        monitor.note(unwatched: 0, now: start)
        #expect(monitor.due == nil && lines.withLock { $0.isEmpty })

        monitor.note(unwatched: 3, now: start)
        monitor.note(unwatched: 4, now: start + .seconds(10))
        #expect(monitor.due == start + .seconds(30), "the first note schedules; later ones keep it")
        #expect(!monitor.isDue(now: start + .seconds(29)))
        #expect(monitor.isDue(now: start + .seconds(30)))
        let warnings = lines.withLock { $0 }
        #expect(warnings.count == 1)
        #expect(warnings.first?.contains("3 directories are not watched") == true)
        #expect(warnings.first?.contains("sysctl fs.inotify.max_user_watches=") == true)
        #expect(warnings.first?.contains("polled every 30 s") == true, "\(warnings)")

        // The next poll counts from the start of the last, not its end, and starts twice
        // the last one's length early: a change is reported within one period.
        monitor.polled(started: start + .seconds(30), took: .milliseconds(200), cost: .milliseconds(200))
        monitor.note(unwatched: 2, now: start + .seconds(31))
        #expect(monitor.due == start + .seconds(60) - .milliseconds(400))
        #expect(monitor.period == .seconds(30))
        #expect(lines.withLock { $0.count } == 1, "one warning per episode")

        monitor.polled(started: start + .seconds(60), took: .milliseconds(100), cost: .milliseconds(100))
        monitor.note(unwatched: 0, now: start + .seconds(62))
        #expect(monitor.due == nil)
        #expect(lines.withLock { $0.last } == "inotify: every directory is watched again")
    }

    @Test("two polls costing over 1.25% of the period stretch it to 100 times the cost in whole intervals, at most doubling, from the poll after")
    func slowPollsStretchThePeriod() {
        var monitor = WatchLimitMonitor(interval: .seconds(10), logger: logger)
        let start = ContinuousClock.now
        monitor.note(unwatched: 9000, now: start)
        monitor.polled(started: start + .seconds(10), took: .milliseconds(150), cost: .milliseconds(150))
        #expect(monitor.period == .seconds(20))
        #expect(monitor.due == start + .seconds(20) - .milliseconds(300), "the next poll keeps the 10 s status gave until now")
        // A cost that wavers around the same figure leaves the period as it is.
        monitor.polled(started: start + .seconds(20), took: .milliseconds(185), cost: .milliseconds(185))
        #expect(monitor.period == .seconds(20))
        #expect(monitor.due == start + .seconds(40) - .milliseconds(370))
        monitor.polled(started: start + .seconds(40), took: .milliseconds(95), cost: .milliseconds(95))
        #expect(monitor.period == .seconds(20), "95 ms is not well inside 10 s")
        monitor.polled(started: start + .seconds(60), took: .milliseconds(216), cost: .milliseconds(216))
        #expect(monitor.period == .seconds(20), "1.08% of the period: the figure status gave stays")
        monitor.polled(started: start + .seconds(80), took: .milliseconds(260), cost: .milliseconds(260))
        #expect(monitor.period == .seconds(20), "one poll past 1.25% moves nothing")
        monitor.polled(started: start + .seconds(100), took: .milliseconds(270), cost: .milliseconds(270))
        #expect(monitor.period == .seconds(30), "two past 1.25%: rounded up, never under 100 times the cost")
        #expect(monitor.due == start + .seconds(120) - .milliseconds(540), "the next poll still within the 20 s status gave")
        // A big tree arrived: doubled, not a hundredfold, and only on the second such poll.
        monitor.polled(started: start + .seconds(120), took: .seconds(20), cost: .seconds(20))
        #expect(monitor.period == .seconds(30))
        monitor.polled(started: start + .seconds(150), took: .seconds(20), cost: .seconds(20))
        #expect(monitor.period == .seconds(60))
        #expect(monitor.due == start + .seconds(177))
        monitor.polled(started: start + .seconds(177), took: .milliseconds(50), cost: .milliseconds(50))
        #expect(monitor.period == .seconds(10), "shorter at once, never below the interval")
        #expect(monitor.due == start + .seconds(187) - .milliseconds(100))
        monitor.polled(started: start + .seconds(187), took: .seconds(1), cost: .seconds(1))
        #expect(monitor.period == .seconds(10))
        monitor.note(unwatched: 0, now: start + .seconds(195))
        #expect(monitor.period == .seconds(10), "every directory watched: the next episode starts afresh")
    }

    @Test("a poll that took long on a busy machine but cost little CPU leaves the period as it is")
    func aSlowButCheapPollKeepsThePeriod() {
        var monitor = WatchLimitMonitor(interval: .seconds(10), logger: logger)
        let start = ContinuousClock.now
        monitor.note(unwatched: 9000, now: start)
        // At 23:46 on 2026-12-05 the first poll ran beside the startup pass: 583 ms, and
        // the period went from 10 to 20 s and then 40 s, past what status had said.
        monitor.polled(started: start + .seconds(10), took: .milliseconds(583), cost: .milliseconds(110))
        #expect(monitor.period == .seconds(10), "1.1% of the period in CPU time (5.8% in time taken)")
        #expect(monitor.due == start + .seconds(19), "it starts early by the time it took, at most a tenth of the period")
        monitor.polled(started: start + .seconds(19), took: .milliseconds(300), cost: .milliseconds(120))
        #expect(monitor.period == .seconds(10))
    }
}
