/// A repeating timer the host runs; cancelling stops its ticks.
public protocol TimerHandle: Sendable {
    /// Stops the ticks.
    func cancel()
}
