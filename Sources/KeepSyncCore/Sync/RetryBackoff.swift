/// When failed paths are tried again on their own: 1 s after the first failure, doubling
/// up to 60 s. A path keeps its count until it syncs or vanishes (`clear`).
struct RetryBackoff {

    private var retryAt: [RelativePath: Duration] = [:]
    private var attempts: [RelativePath: Int] = [:]

    /// No failures.
    init() {}

    /// True when `path` waits for a retry.
    func isScheduled(_ path: RelativePath) -> Bool { retryAt[path] != nil }

    /// Failed attempts at `path` in a row.
    func attempts(_ path: RelativePath) -> Int { attempts[path] ?? 0 }

    /// Counts a failure of `path` and schedules its next attempt.
    mutating func schedule(_ path: RelativePath, now: Duration) {
        let n = (attempts[path] ?? 0) + 1
        attempts[path] = n
        retryAt[path] = now + .seconds(min(60, 1 << min(6, n - 1)))
    }

    /// Forgets the failures of `scope` and below (they synced or vanished); paths in
    /// `keep` (copies still to come) lose their retry but keep their count, so that their
    /// backoff keeps growing.
    mutating func clear(within scope: RelativePath, keep: Set<RelativePath> = []) {
        for key in retryAt.keys where key.isWithin(scope) { retryAt[key] = nil }
        for key in attempts.keys where key.isWithin(scope) && !keep.contains(key) { attempts[key] = nil }
    }

    /// The earliest retry, nil when none waits.
    var nextDeadline: Duration? { retryAt.values.min() }

    /// Takes the retries due at `now` out, sorted.
    mutating func takeDue(now: Duration) -> [RelativePath] {
        let due = retryAt.filter { $0.value <= now }.keys.sorted()
        for path in due { retryAt[path] = nil }
        return due
    }
}
