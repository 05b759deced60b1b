/// What the agent is doing, as status.json and `STATUS=` report it.
public enum AgentState: Equatable, Sendable {
    /// Taking the lock and loading the records.
    case starting
    /// A full pass is running (the initial one, or a resync).
    case syncing
    /// The initial pass is done; changes are mirrored as they come.
    case watching
    /// The source root vanished or was replaced: nothing is mirrored until it is back.
    case paused(reason: String)
    /// The source was refused at startup (SourceSafety).
    case refused(reason: String)
    /// The agent has stopped.
    case stopped

    /// The `state` field of status.json.
    public var name: String {
        switch self {
        case .starting: "starting"
        case .syncing: "syncing"
        case .watching: "watching"
        case .paused, .refused: "error"
        case .stopped: "stopped"
        }
    }

    /// True while mirroring is paused or refused.
    public var isError: Bool { name == "error" }
}
