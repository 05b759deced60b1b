import Dispatch
import Synchronization

/// Blocking I/O on several threads at once: serial queues, each of which gets a thread of
/// its own when it has work (a file copy waiting on the disk must not hold up the next).
public final class ParallelIO: Sendable {
    let queues: [DispatchQueue]
    /// One serial queue a lane, beside `forEach`'s (none when serial).
    let lanes: [Lane: DispatchQueue]

    /// Work that runs beside the caller, in order within its lane: a group commit's
    /// stages each have one, so that one group's barrier runs while the next is staged
    /// and the one before is published.
    public enum Lane: CaseIterable, Sendable {
        /// Staging (which itself calls `forEach`).
        case stage
        /// Barriers.
        case barrier
        /// Renames into place.
        case publish
    }

    /// `width` queues; 1 runs everything on the caller.
    public init(width: Int) {
        queues = width <= 1 ? [] : (0..<width).map { DispatchQueue(label: "keepsync.io.\($0)") }
        var lanes: [Lane: DispatchQueue] = [:]
        if width > 1 { for lane in Lane.allCases { lanes[lane] = DispatchQueue(label: "keepsync.io.\(lane)") } }
        self.lanes = lanes
    }

    /// Whether `start` runs beside the caller (false: on it, at once).
    public var runsBeside: Bool { !lanes.isEmpty }

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

    /// Runs `body` in `lane` without waiting (serial: now); `wait` on the returned group.
    public func start(_ lane: Lane, _ body: @escaping @Sendable () -> Void) -> DispatchGroup {
        let group = DispatchGroup()
        if let queue = lanes[lane] { queue.async(group: group, execute: body) } else { body() }
        return group
    }

    /// No parallelism: everything on the caller, in order (deterministic tests).
    public static let serial = ParallelIO(width: 1)
}
