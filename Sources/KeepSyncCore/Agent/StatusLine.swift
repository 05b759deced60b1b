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
