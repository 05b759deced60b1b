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
        #expect(monitor.period == .seconds(10), "the first poll of an episode alone moves nothing")
        #expect(monitor.due == start + .seconds(20) - .milliseconds(300))
        monitor.polled(started: start + .seconds(20), took: .milliseconds(150), cost: .milliseconds(150))
        #expect(monitor.period == .seconds(20))
        #expect(monitor.due == start + .seconds(30) - .milliseconds(300), "the next poll keeps the 10 s status gave until now")
        // A cost that wavers around the same figure leaves the period as it is.
        monitor.polled(started: start + .seconds(30), took: .milliseconds(185), cost: .milliseconds(185))
        #expect(monitor.period == .seconds(20))
        #expect(monitor.due == start + .seconds(50) - .milliseconds(370))
        monitor.polled(started: start + .seconds(50), took: .milliseconds(95), cost: .milliseconds(95))
        #expect(monitor.period == .seconds(20), "95 ms is not well inside 10 s")
        monitor.polled(started: start + .seconds(70), took: .milliseconds(216), cost: .milliseconds(216))
        #expect(monitor.period == .seconds(20), "1.08% of the period: the figure status gave stays")
        monitor.polled(started: start + .seconds(90), took: .milliseconds(260), cost: .milliseconds(260))
        #expect(monitor.period == .seconds(20), "one poll past 1.25% moves nothing")
        monitor.polled(started: start + .seconds(110), took: .milliseconds(270), cost: .milliseconds(270))
        #expect(monitor.period == .seconds(30), "two past 1.25%: rounded up, never under 100 times the cost")
        #expect(monitor.due == start + .seconds(130) - .milliseconds(540), "the next poll still within the 20 s status gave")
        // A big tree arrived: doubled, not a hundredfold, and only on the second such poll.
        monitor.polled(started: start + .seconds(130), took: .seconds(2), cost: .seconds(20))
        #expect(monitor.period == .seconds(30))
        monitor.polled(started: start + .seconds(160), took: .seconds(2), cost: .seconds(20))
        #expect(monitor.period == .seconds(60))
        #expect(monitor.due == start + .seconds(190) - .seconds(3))
        monitor.polled(started: start + .seconds(187), took: .milliseconds(50), cost: .milliseconds(50))
        #expect(monitor.period == .seconds(10), "shorter at once, never below the interval")
        #expect(monitor.due == start + .seconds(197) - .milliseconds(100))
        monitor.polled(started: start + .seconds(197), took: .seconds(1), cost: .seconds(1))
        #expect(monitor.period == .seconds(10))
        monitor.note(unwatched: 0, now: start + .seconds(205))
        #expect(monitor.period == .seconds(10), "every directory watched: the next episode starts afresh")
    }

    @Test("a cheap poll that took long (a slow disk) stretches the period to 10 times its length, so that it ends within it")
    func longPollsStretchThePeriod() {
        var monitor = WatchLimitMonitor(interval: .seconds(10), logger: logger)
        let start = ContinuousClock.now
        monitor.note(unwatched: 200_000, now: start)
        monitor.polled(started: start + .seconds(10), took: .seconds(15), cost: .milliseconds(100))
        #expect(monitor.period == .seconds(20), "at most doubling")
        #expect(monitor.due == start + .seconds(19), "the next poll still within the 10 s status gave")
        monitor.polled(started: start + .seconds(25), took: .seconds(15), cost: .milliseconds(100))
        #expect(monitor.period == .seconds(40))
        monitor.polled(started: start + .seconds(45), took: .seconds(15), cost: .milliseconds(100))
        #expect(monitor.period == .seconds(80))
        monitor.polled(started: start + .seconds(85), took: .seconds(15), cost: .milliseconds(100))
        #expect(monitor.period == .seconds(150), "10 times 15 s")
        monitor.polled(started: start + .seconds(165), took: .seconds(14), cost: .milliseconds(100))
        #expect(monitor.period == .seconds(150), "shorter only well inside the shorter period")
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
