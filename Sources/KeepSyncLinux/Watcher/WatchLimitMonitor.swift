import KeepSyncCore

/// The inotify watch limit (`fs.inotify.max_user_watches`): while it leaves directories
/// unwatched, says so once (with the sysctl to raise) and schedules a rescan every
/// `interval`; says so again when every directory is watched.
struct WatchLimitMonitor {
    /// Time between rescans while directories are unwatched.
    let interval: Duration
    private let logger: Logger
    /// When the next rescan is due; nil while every directory is watched.
    private(set) var due: ContinuousClock.Instant?
    /// True while the current episode has been logged.
    private var warned = false

    /// A monitor rescanning every `interval`, logging to `logger`.
    init(interval: Duration, logger: Logger) {
        self.interval = interval
        self.logger = logger
    }

    /// True when the periodic rescan is due at `now`.
    func isDue(now: ContinuousClock.Instant) -> Bool {
        due.map { now >= $0 } ?? false
    }

    /// The periodic rescan is being done (the tree rebuilt, `missing` directories still
    /// unwatched): the reason to report.
    mutating func rescanned(unwatched missing: Int) -> String {
        due = nil
        return missing > 0
            ? "watch limit reached: \(missing) directories unwatched"
            : "watch limit no longer reached: all directories watched"
    }

    /// Notes how many directories are unwatched at `now`: logs once per episode and
    /// schedules the periodic rescan.
    mutating func note(unwatched missing: Int, now: ContinuousClock.Instant) {
        if missing > 0 {
            if due == nil { due = now + interval }
            if !warned {
                warned = true
                let current = Inotify.maxUserWatches()
                let suggested = current.map { (($0 + 2 * missing) / 1024 + 1) * 1024 }
                logger.warning("inotify watch limit reached: \(missing) directories are not watched"
                    + (current.map { " (fs.inotify.max_user_watches = \($0))" } ?? "")
                    + "; they are rescanned every \(interval); raise the limit with `sysctl fs.inotify.max_user_watches=\(suggested.map(String.init) ?? "N")`")
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
