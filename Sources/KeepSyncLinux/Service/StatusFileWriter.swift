import Dispatch
import KeepSyncCore
import Synchronization

/// Writes status.json atomically (temp file, fsync, rename) into the state directory,
/// in order, on a serial queue of its own: its fsync must not hold a thread of the
/// concurrency pool (two on two cores) while a copy waits for the manager.
public final class StatusFileWriter: StatusWriter {
    private let path: [UInt8]
    private let failed = Atomic<Bool>(false)
    private let queue = DispatchQueue(label: "keepsync.status")

    /// A writer of `state`/status.json.
    public init(stateDirectory: [UInt8]) {
        path = stateDirectory + Array("/status.json".utf8)
    }

    /// True when the last write failed (a full disk, EIO).
    public var lastWriteFailed: Bool { failed.load(ordering: .acquiring) }

    /// Queues the write; `waits`: done on return.
    public func write(_ report: StatusReport, waits: Bool) {
        failed.store(false, ordering: .releasing)
        let path = self.path, bytes = Array(report.json.utf8)
        let write: @Sendable () -> Void = { [self] in
            do { try HostPaths.writeAtomically(path, bytes) } catch { self.failed.store(true, ordering: .releasing) }
        }
        if waits { queue.sync(execute: write) } else { queue.async(execute: write) }
    }
}
