import Dispatch
import Synchronization

/// Where record writes run, in the order handed over: a serial queue of their own (the
/// agent), the caller at once, or held until `drain` runs them on its caller (a
/// simulation choosing when they land). The writes themselves are the same everywhere.
public struct RecordScheduler: Sendable {
    let submit: @Sendable (@escaping @Sendable () -> Void) -> Void
    let drain: @Sendable () async -> Void

    /// A scheduler from its two halves: queue a write, and wait for (or run) those queued.
    public init(submit: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void, drain: @escaping @Sendable () async -> Void) {
        self.submit = submit
        self.drain = drain
    }

    /// A serial Dispatch queue of its own.
    public static func serialQueue() -> RecordScheduler {
        let queue = DispatchQueue(label: "keepsync.records")
        return RecordScheduler(submit: { queue.async(execute: $0) }, drain: {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in queue.async { c.resume() } }
        })
    }

    /// Each write on the caller, before `append` returns.
    public static let immediate = RecordScheduler(submit: { $0() }, drain: {})

    /// Writes held until `drain` runs them, in order, on its caller.
    public static func held() -> RecordScheduler {
        let works = Mutex<[@Sendable () -> Void]>([])
        return RecordScheduler(submit: { work in works.withLock { $0.append(work) } }, drain: {
            while let work = works.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { work() }
        })
    }
}
