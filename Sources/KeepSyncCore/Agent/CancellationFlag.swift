import Synchronization

/// A flag set once from any thread (SIGTERM) and read by copies in progress.
public final class CancellationFlag: Sendable {
    private let value = Atomic<Bool>(false)

    /// An unset flag.
    public init() {}

    /// True once `set` was called.
    public var isSet: Bool { value.load(ordering: .acquiring) }

    /// Sets the flag.
    public func set() { value.store(true, ordering: .releasing) }
}
