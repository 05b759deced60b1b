/// A signal the agent acts on, as the host delivers it.
public enum AgentSignal: Sendable, Equatable {
    /// SIGHUP: reload the configuration.
    case hangup
    /// SIGUSR1: a full resync.
    case resync
    /// SIGTERM: stop.
    case terminate
    /// SIGINT: stop.
    case interrupt

    /// The signal's name, for the log.
    public var name: String {
        switch self {
        case .hangup: "SIGHUP"
        case .resync: "SIGUSR1"
        case .terminate: "SIGTERM"
        case .interrupt: "SIGINT"
        }
    }
}
