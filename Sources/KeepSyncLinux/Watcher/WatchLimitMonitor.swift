import KeepSyncCore

/// The inotify watch limit (`fs.inotify.max_user_watches`): while it leaves directories
/// unwatched, says so once (with the sysctl to raise) and schedules a poll of them every
/// `interval`; says so again when every directory is watched.
struct WatchLimitMonitor {
    /// Time between polls of the unwatched directories.
    let interval: Duration
    private let logger: Logger
    /// When the next poll is due; nil while every directory is watched.
    private(set) var due: ContinuousClock.Instant?
    /// True while the current episode has been logged.
    private var warned = false

    /// A monitor rescanning every `interval`, logging to `logger`.
    init(interval: Duration, logger: Logger) {
        self.interval = interval
        self.logger = logger
    }

    /// True when the periodic poll is due at `now`.
    func isDue(now: ContinuousClock.Instant) -> Bool {
        due.map { now >= $0 } ?? false
    }

    /// The periodic poll is done: the next one is scheduled by `note`.
    mutating func polled() { due = nil }

    /// Notes how many directories are unwatched at `now`: logs once per episode and
    /// schedules the periodic poll.
    mutating func note(unwatched missing: Int, now: ContinuousClock.Instant) {
        if missing > 0 {
            if due == nil { due = now + interval }
            if !warned {
                warned = true
                let current = Inotify.maxUserWatches()
                let suggested = current.map { (($0 + 2 * missing) / 1024 + 1) * 1024 }
                logger.warning("inotify watch limit reached: \(missing) directories are not watched"
                    + (current.map { " (fs.inotify.max_user_watches = \($0))" } ?? "")
                    + "; they are polled every \(interval.components.seconds) s; raise the limit with `sysctl fs.inotify.max_user_watches=\(suggested.map(String.init) ?? "N")`")
            }
        } else {
            due = nil
            if warned {
                warned = false
                logger.info("inotify: every directory is watched again")
            }
        }
    }
}
