import KeepSyncCore

/// Signals the test sends to an agent: an AsyncStream and its continuation.
public struct SignalFeed: Sendable {
    /// What the agent reads.
    public let signals: AsyncStream<AgentSignal>
    private let continuation: AsyncStream<AgentSignal>.Continuation

    /// An empty feed.
    public init() {
        (signals, continuation) = AsyncStream.makeStream(of: AgentSignal.self)
    }

    /// Delivers a signal.
    public func send(_ signal: AgentSignal) { continuation.yield(signal) }
}
