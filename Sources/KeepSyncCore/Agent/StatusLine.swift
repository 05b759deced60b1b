/// The `STATUS=` wording of the agent.
public enum StatusLine {
    /// The line for `state` (already `syncing` while a resync runs), the manager's numbers
    /// and whether READY was sent (before it, a pass is the initial sync).
    public static func text<C: Clock>(state: AgentState, snapshot: SyncManager<C>.Snapshot, readySent: Bool) -> String
        where C.Duration == Duration {
        var line: String
        switch state {
        case .watching:
            line = "watching \(grouped(snapshot.files)) file\(snapshot.files == 1 ? "" : "s"), \(snapshot.pending) pending"
        case .syncing:
            line = !readySent ? "initial sync: \(grouped(snapshot.copiedFiles)) files copied, \(snapshot.pending) pending"
                : "resyncing, \(snapshot.pending) pending"
        default:
            line = state.name
        }
        if !snapshot.errors.isEmpty { line += ", \(snapshot.errors.count) errors" }
        if snapshot.heldDeletes > 0 { line += ", \(snapshot.heldDeletes) deletions held" }
        return line
    }

    /// The line for the mirrors of one agent, each as (name, state, its manager's numbers,
    /// since when its host is away). One mirror: `text`, or `paused`. Several: what the
    /// active ones do together, how many mirrors, then those paused or unreachable
    /// (`watching 12,345 files, 0 pending, 2 mirrors, 1 paused: usb unavailable`).
    public static func summary<C: Clock>(_ mirrors: [(name: String, state: AgentState, snapshot: SyncManager<C>.Snapshot?,
                                                      unreachableSince: String?)], readySent: Bool) -> String
        where C.Duration == Duration {
        func paused(_ state: AgentState) -> String? {
            if case .paused(let reason) = state { return reason }
            return nil
        }
        if mirrors.count == 1 {
            let m = mirrors[0]
            if let reason = paused(m.state) { return Self.paused(reason) }
            guard let snapshot = m.snapshot else { return m.state.name }
            let line = text(state: m.state, snapshot: snapshot, readySent: readySent)
            return m.unreachableSince.map { "remote unreachable since \($0), " + line } ?? line
        }
        let reasons = mirrors.compactMap { paused($0.state) }
        if reasons.count == mirrors.count, Set(reasons).count == 1 { return Self.paused(reasons[0]) }
        let active = mirrors.filter { paused($0.state) == nil }
        let snapshots = active.compactMap(\.snapshot)
        let pending = snapshots.reduce(0) { $0 + $1.pending }
        var line: String
        if active.contains(where: { $0.state == .syncing }) {
            line = !readySent ? "initial sync: \(grouped(snapshots.reduce(0) { $0 + $1.copiedFiles })) files copied, \(pending) pending"
                : "resyncing, \(pending) pending"
        } else if active.isEmpty {
            line = "waiting"
        } else {
            let files = snapshots.map(\.files).max() ?? 0
            line = "watching \(grouped(files)) file\(files == 1 ? "" : "s"), \(pending) pending"
        }
        line += ", \(mirrors.count) mirrors"
        let errors = snapshots.reduce(0) { $0 + $1.errors.count }, held = snapshots.reduce(0) { $0 + $1.heldDeletes }
        if errors > 0 { line += ", \(errors) errors" }
        if held > 0 { line += ", \(held) deletions held" }
        let away = mirrors.filter { paused($0.state) != nil }.map { "\($0.name) unavailable" }
        if !away.isEmpty { line += ", \(away.count) paused: " + away.joined(separator: ", ") }
        for m in active { if let since = m.unreachableSince { line += ", \(m.name) unreachable since \(since)" } }
        return line
    }

    /// The line while mirroring is paused.
    public static func paused(_ reason: String) -> String { "paused: \(reason)" }

    /// 12,345 style numbers.
    public static func grouped(_ n: Int) -> String {
        let digits = Array(String(n))
        var out = ""
        for (i, d) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(d)
        }
        return out
    }
}
