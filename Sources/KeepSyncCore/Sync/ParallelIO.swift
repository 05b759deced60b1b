import Dispatch
import Synchronization

/// Blocking I/O on several threads at once: serial queues, each of which gets a thread of
/// its own when it has work (a file copy waiting on the disk must not hold up the next).
public final class ParallelIO: Sendable {
    let queues: [DispatchQueue]
    /// For `start`: work that runs beside `forEach`.
    let side: DispatchQueue?

    /// `width` queues; 1 runs everything on the caller.
    public init(width: Int) {
        queues = width <= 1 ? [] : (0..<width).map { DispatchQueue(label: "keepsync.io.\($0)") }
        side = width <= 1 ? nil : DispatchQueue(label: "keepsync.io.side")
    }

    /// Parallelism.
    public var width: Int { max(1, queues.count) }

    /// Calls `body` for 0..<count, up to `width` at a time; returns when all are done.
    public func forEach(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        guard count > 1, queues.count > 1 else {
            for i in 0..<count { body(i) }
            return
        }
        let next = Atomic<Int>(0)
        let group = DispatchGroup()
        for queue in queues.prefix(count) {
            queue.async(group: group) {
                while true {
                    let i = next.add(1, ordering: .relaxed).oldValue
                    if i >= count { return }
                    body(i)
                }
            }
        }
        group.wait()
    }

    /// Runs `body` on a queue of its own without waiting (serial: now); `wait` on the
    /// returned group.
    public func start(_ body: @escaping @Sendable () -> Void) -> DispatchGroup {
        let group = DispatchGroup()
        if let side { side.async(group: group, execute: body) } else { body() }
        return group
    }

    /// No parallelism: everything on the caller, in order (deterministic tests).
    public static let serial = ParallelIO(width: 1)
}
