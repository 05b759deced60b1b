import Dispatch
import Synchronization

/// Counts a mirror's versions for `status.json` while `run` watches: at once, then every
/// `every` (a minute: versions made meanwhile show within it), on a queue of its own.
/// A count that fails (a thinning removed what it was listing) is tried again a second
/// later; the last good one stays meanwhile.
public final class VersionCounter: @unchecked Sendable {
    private let timer: DispatchSourceTimer
    private let queue = DispatchQueue(label: "keepsync.versions.count", qos: .utility)
    private let latest = Latest()
    /// The last count, shared with the timer's handler.
    private final class Latest: Sendable { let value = Mutex<VersionSummary?>(nil) }
    /// A kept directory's bytes by its path, walked once (only the queue touches it).
    private final class Sizes: @unchecked Sendable { var bytes: [RelativePath: UInt64] = [:] }

    /// The last count; nil before the first.
    public var summary: VersionSummary? { latest.value.withLock { $0 } }

    /// Starts counting `store`.
    public init(store: VersionStore, every: Duration = .seconds(60)) {
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now(), repeating: .milliseconds(Int(every / .milliseconds(1))))
        let sizes = Sizes(), latest = latest, queue = queue
        @Sendable func count(retry: Bool) {
            if let summary = try? store.summary(directoryBytes: &sizes.bytes) {
                latest.value.withLock { $0 = summary }
            } else if retry {
                queue.asyncAfter(deadline: .now() + .seconds(1)) { count(retry: false) }
            }
        }
        timer.setEventHandler { count(retry: true) }
        timer.resume()
    }

    deinit { timer.cancel() }

    /// Ends it (a count under way finishes first); `summary` stays.
    public func stop() {
        timer.cancel()
        queue.sync {}
    }
}

/// `status.json`'s `"versions"`: how many versions the mirror keeps, their bytes, the oldest.
public struct VersionSummary: Sendable, Equatable {
    /// Versions (a kept directory counts once).
    public var count: Int
    /// Their bytes (a kept directory's files summed).
    public var bytes: UInt64
    /// The oldest's time, seconds since the epoch; nil when there is none.
    public var oldest: Int64?

    /// A summary.
    public init(count: Int, bytes: UInt64, oldest: Int64?) {
        self.count = count
        self.bytes = bytes
        self.oldest = oldest
    }

    /// The JSON object.
    public var json: String {
        "{\"count\": \(count), \"bytes\": \(bytes), \"oldest\": \(oldest.map { StatusReport.quote(VersionTime.iso($0)) } ?? "null")}"
    }
}

extension VersionStore {
    /// The summary of what the store holds now. `directoryBytes` caches a kept directory's
    /// bytes by its path (a version never changes): a caller that keeps it walks each once.
    public func summary(directoryBytes: inout [RelativePath: UInt64]) throws -> VersionSummary {
        let all = try list()
        var bytes: UInt64 = 0
        var seen: Set<RelativePath> = []
        for version in all {
            if version.isDirectory {
                seen.insert(version.path)
                if let known = directoryBytes[version.path] {
                    bytes += known
                } else if let walked = try? VersionListing.bytes(of: version, in: steps) {
                    directoryBytes[version.path] = walked
                    bytes += walked
                }
            } else {
                bytes += version.size
            }
        }
        // Forget the directories thinned away.
        directoryBytes = directoryBytes.filter { seen.contains($0.key) }
        return VersionSummary(count: all.count, bytes: bytes, oldest: all.map(\.seconds).min())
    }

    /// The summary, each kept directory walked.
    public func summary() throws -> VersionSummary {
        var none: [RelativePath: UInt64] = [:]
        return try summary(directoryBytes: &none)
    }
}
