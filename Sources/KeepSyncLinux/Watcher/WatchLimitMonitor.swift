import KeepSyncCore

/// The inotify watch limit (`fs.inotify.max_user_watches`): while it leaves directories
/// unwatched, says so once (with the sysctl to raise) and schedules a poll of them at a
/// fixed rate, so that a change there reaches the mirror within one `period`, the figure
/// status reports. The period is `interval`, or 100 times the CPU time a poll costs
/// rounded up to a whole number of intervals when that is longer (looking at many
/// unwatched directories keeps to about 1% of a core). It grows only when a poll costs
/// more than 1.25% of it and shrinks only when one costs under 0.8% of the shorter one,
/// so the figure status gave stays true while the cost wavers. The cost is CPU time, not
/// the time the poll took: a poll slowed by a busy machine (the startup pass on both
/// cores) costs no more. It grows on the lower cost of the last two polls (the first poll
/// of an episode alone moves nothing), and a longer period starts after the next poll: that one
/// still comes within the period status gave until now, so every change is found within
/// the period status gave when it was made. (At 2026-12-06 00:15 a write waited 29.4 s
/// while status had said 20 s: polls cost 190-260 ms, around the 250 ms at which 20 s
/// becomes 30.) Each poll starts twice the last one's length before the period is up:
/// what it finds is reported when it ends. So that it does end in time, the period is
/// also at least 10 times the time the last poll took (a slow disk makes a cheap poll
/// long), in whole intervals.
struct WatchLimitMonitor {
    /// The shortest time between polls of the unwatched directories.
    let interval: Duration
    /// The time between polls now.
    private(set) var period: Duration
    private let logger: Logger
    /// When the next poll is due; nil while every directory is watched.
    private(set) var due: ContinuousClock.Instant?
    /// True while the current episode has been logged.
    private var warned = false
    /// The CPU time the last poll cost (nil before the first of an episode).
    private var lastCost: Duration?

    /// A monitor rescanning every `interval`, logging to `logger`.
    init(interval: Duration, logger: Logger) {
        self.interval = interval
        period = interval
        self.logger = logger
    }

    /// True when the periodic poll is due at `now`.
    func isDue(now: ContinuousClock.Instant) -> Bool {
        due.map { now >= $0 } ?? false
    }

    /// A poll that began at `started` took `took` and cost `cost` of CPU time: the next
    /// one is due a period after its start (the period before this poll's, when that was
    /// shorter), less twice `took` (`note` drops it when nothing is unwatched any more).
    mutating func polled(started: ContinuousClock.Instant, took: Duration, cost latest: Duration) {
        let promised = period
        let cost = min(latest, lastCost ?? .zero)
        lastCost = latest
        let steps = max(1, ((cost * 100) / interval).rounded(.up), ((took * 10) / interval).rounded(.up))
        let wanted = interval * Int(steps)
        if cost * 80 > period || took * 10 > period {
            // At most doubling per poll: one slow poll (a big tree arriving) does not push
            // the next one a hundred periods away.
            period = min(wanted, period * 2)
        } else if wanted < period, cost * 125 <= wanted, took * 25 <= wanted * 2 {
            // Shorter only when the cost is well inside the shorter period.
            period = wanted
        }
        let next = min(promised, period)
        due = started + next - min(took * 2, next / 10)
    }

    /// Notes how many directories are unwatched at `now`: logs once per episode and
    /// schedules the periodic poll.
    mutating func note(unwatched missing: Int, now: ContinuousClock.Instant) {
        if missing > 0 {
            if due == nil { due = now + period }
            if !warned {
                warned = true
                let current = Inotify.maxUserWatches()
                let suggested = current.map { (($0 + 2 * missing) / 1024 + 1) * 1024 }
                logger.warning("inotify watch limit reached: \(missing) directories are not watched"
                    + (current.map { " (fs.inotify.max_user_watches = \($0))" } ?? "")
                    + "; they are polled every \(period.components.seconds) s or more; raise the limit with `sysctl fs.inotify.max_user_watches=\(suggested.map(String.init) ?? "N")`")
            }
        } else {
            due = nil
            period = interval
            lastCost = nil
            if warned {
                warned = false
                logger.info("inotify: every directory is watched again")
            }
        }
    }
}
