import Synchronization

/// The managers one watcher's events go to: one per mirror that is not paused. A link adds
/// its manager before its full pass (so that nothing falls between the pass's reads and
/// the events) and removes it when it pauses.
public final class WatchFanout<C: Clock>: Sendable where C.Duration == Duration {
    private let held = Mutex<[SyncManager<C>]>([])

    /// An empty fan-out.
    public init() {}

    /// The managers now.
    public var managers: [SyncManager<C>] { held.withLock { $0 } }

    /// Adds `manager`.
    public func add(_ manager: SyncManager<C>) { held.withLock { $0.append(manager) } }

    /// Removes `manager`.
    public func remove(_ manager: SyncManager<C>) { held.withLock { $0.removeAll { $0 === manager } } }
}
