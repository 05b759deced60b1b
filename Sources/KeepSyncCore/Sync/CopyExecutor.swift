import Dispatch

/// Runs blocking work (a file copy) off the actor, and says where record writes beside
/// it should run (the engine's `recordScheduler`, chosen by whoever builds both).
/// Production: a bounded set of Dispatch threads and a serial queue; tests: inline, for
/// determinism.
public struct CopyExecutor: Sendable {
    /// Copies in flight at most.
    public var limit: Int
    /// Where record writes beside these copies should run (nil: a serial queue).
    public var recordScheduler: RecordScheduler?
    let run: @Sendable (@escaping @Sendable () -> Void) -> Void

    /// An executor calling `run` with each copy's work (tests can hold it back).
    public init(limit: Int, recordScheduler: RecordScheduler? = nil,
                run: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.limit = limit
        self.recordScheduler = recordScheduler
        self.run = run
    }

    /// Runs work on Dispatch's global concurrent queue, at most `limit` at once.
    public static func dispatch(limit: Int) -> CopyExecutor {
        CopyExecutor(limit: max(1, limit)) { work in DispatchQueue.global(qos: .utility).async(execute: work) }
    }

    /// Runs each copy on the caller (the manager), one at a time, and record writes too:
    /// deterministic for tests. Completions still reach the manager as the agent's do,
    /// through its inbox (`waitForCopies` waits for them).
    public static let inline = CopyExecutor(limit: 1, recordScheduler: .immediate) { work in work() }
}
