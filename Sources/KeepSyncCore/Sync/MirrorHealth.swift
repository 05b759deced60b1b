/// Whether the mirror takes writes now, as the manager tracks it: one state machine
/// with its probe schedule. Available; blocked (full or read-only: probed after 0.25 s,
/// doubling to 5 s); or its host lost (nothing is sent; probed after 1 s, doubling to
/// 60 s). A probe that writes makes it available again, and the caller starts a full pass.
/// A value: the manager reports what each step returns (log, status).
struct MirrorHealth: Equatable {
    /// Why the mirror takes no writes.
    enum Trouble: Equatable {
        /// Full or read-only (the error's code), since a block the caller reported.
        case blocked(KeepSyncError.Code)
        /// Its host cannot be reached: why, and since when.
        case hostLost(message: String, since: Duration)
    }

    /// nil while the mirror is available.
    private(set) var trouble: Trouble?
    /// When the next probe is due (nil: none planned).
    private(set) var probeAt: Duration?
    /// Blocked episodes and failed probes in a row: the backoff.
    private var failures = 0
    /// When the mirror was last found blocked, and by what.
    private(set) var lastBlockedAt: Duration?
    private(set) var blockedCode: KeepSyncError.Code?
    /// More changes came while the host was lost than are held: the full pass at its
    /// return finds them.
    var catchUpInFull = false

    /// Available.
    init() {}

    /// The host's trouble, while it cannot be reached.
    var hostLost: (message: String, since: Duration)? {
        if case .hostLost(let message, let since) = trouble { return (message, since) }
        return nil
    }

    /// True while the host cannot be reached.
    var isHostLost: Bool { hostLost != nil }

    /// Full or read-only: 0.25 s doubling to 5 s between probes.
    var blockedBackoff: Duration { .milliseconds(min(5000, 250 << min(5, failures))) }
    /// Host lost: 1 s doubling to 60 s.
    var hostBackoff: Duration { .seconds(min(60, 1 << min(6, failures))) }

    /// True for errors that say the whole mirror takes no writes now.
    static func blocks(_ code: KeepSyncError.Code) -> Bool { code == .noSpace || code == .readOnly || code == .unreachable }

    /// The mirror was found full or read-only; false when a probe is already planned (the
    /// episode goes on, nothing to report). A mirror that fills up again within a minute
    /// keeps its long backoff: at most one probe and full pass per 5 s.
    mutating func block(_ code: KeepSyncError.Code, now: Duration) -> Bool {
        guard probeAt == nil else { return false }
        if let last = lastBlockedAt, now - last > .seconds(60) { failures = 0 }
        lastBlockedAt = now
        blockedCode = code
        trouble = .blocked(code)
        probeAt = now + blockedBackoff
        failures += 1
        return true
    }

    /// The host cannot be reached; false when it was lost already.
    mutating func loseHost(_ message: String, now: Duration) -> Bool {
        guard !isHostLost else { return false }
        trouble = .hostLost(message: message, since: now)
        failures = 0
        probeAt = now + hostBackoff
        return true
    }

    /// What a failed probe found.
    enum ProbeFailure: Equatable {
        /// The host answers, but the mirror takes no writes (`message`): blocked now.
        case hostBackButBlocked
        /// Still lost; its message updated.
        case stillLost
        /// Still blocked.
        case stillBlocked
    }

    /// A probe failed with `code` (nil: not a `KeepSyncError`) and `message`; plans the next.
    mutating func probeFailed(_ code: KeepSyncError.Code?, message: String?, now: Duration) -> ProbeFailure {
        var outcome = ProbeFailure.stillBlocked
        if case .hostLost(_, let since) = trouble, let code {
            if code != .unreachable {
                trouble = .blocked(code)
                outcome = .hostBackButBlocked
            } else {
                trouble = .hostLost(message: message ?? "", since: since)
                outcome = .stillLost
            }
        } else if isHostLost {
            outcome = .stillLost
        }
        failures += 1
        probeAt = now + (isHostLost ? hostBackoff : blockedBackoff)
        return outcome
    }

    /// A probe wrote: available again. Returns the host's trouble when it was lost.
    mutating func probeSucceeded() -> (message: String, since: Duration)? {
        let lost = hostLost
        probeAt = nil
        trouble = nil
        if lost != nil {
            catchUpInFull = false
            failures = 0
        }
        return lost
    }

    /// A full pass wrote without meeting a full or read-only mirror: no probe is owed.
    mutating func passWrote() {
        probeAt = nil
        if case .blocked = trouble { trouble = nil }
    }

    /// True when a failure with `code` continues the episode seen within the last minute
    /// (its path's error goes to debug, not the log's errors, again).
    func isRecentBlock(_ code: KeepSyncError.Code, now: Duration) -> Bool {
        guard Self.blocks(code), code == blockedCode, let last = lastBlockedAt else { return false }
        return now - last < .seconds(60)
    }
}
