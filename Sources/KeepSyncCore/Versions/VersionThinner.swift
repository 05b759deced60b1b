import Dispatch

extension VersionStore {
    /// The store of `mirror` and its clock, when it keeps versions (a local mirror over
    /// `VersionKeepingSteps`, or a `VersionKeepingMirror`): read through the mirror's
    /// steps, or the versions' own when they are elsewhere.
    public static func of(_ mirror: any MirrorProviding) -> (store: VersionStore, now: @Sendable () -> Int64)? {
        if let keeping = mirror as? any VersionKeepingMirror { return keeping.keptVersions }
        guard let local = mirror as? LocalMirror, let keeper = local.steps as? VersionKeepingSteps else { return nil }
        let steps = keeper.directory.isRoot ? keeper.versions : keeper
        return (VersionStore(steps: steps, directory: keeper.directory, space: keeper.space), keeper.now)
    }

    /// `thin`, saying in the log what went (info) and what could not (a warning each, at
    /// most five); the number removed.
    @discardableResult
    public func thin(now: Int64, keep: Int64, logger: Logger) -> Int {
        do {
            let (removed, failed, floored) = try thin(now: now, keep: keep)
            if removed.count > floored { logger.info("versions: \(removed.count - floored) past retention removed") }
            if floored > 0 {
                logger.warning("versions: the mirror's file system is in its last \(Self.floorPercent) %: \(floored) oldest versions removed")
            }
            for (version, error) in failed.prefix(5) {
                logger.warning("versions: cannot remove \(version.path.escaped): \(error)")
            }
            return removed.count
        } catch {
            logger.warning("versions: cannot read \(directory.escaped): \(error)")
            return 0
        }
    }
}

extension Settings {
    /// One warning when the source holds an entry at the versions directory's path: it is
    /// not mirrored (the exclude of that path holds on both sides).
    public func warnIfSourceHoldsVersions(_ source: any FileSystemProviding, logger: Logger) {
        guard (try? source.stat(versionsDirectory)) ?? nil != nil else { return }
        logger.warning("\(versionsDirectory.escaped) in the source is not mirrored: that path is the mirror's versions directory")
    }
}

/// Thins a mirror's versions in the background (`run`): at once, then every `every`,
/// on a queue of its own, never holding a copy back. `stop` ends it.
public final class VersionThinner: @unchecked Sendable {
    private let timer: DispatchSourceTimer
    /// Thinnings done.
    public var runs: Int { queue.sync { done.count } }
    private final class Count: @unchecked Sendable { var count = 0 }
    private let done = Count()
    private let queue = DispatchQueue(label: "keepsync.versions", qos: .utility)

    /// Starts thinning `store` (versions kept `keep` seconds by the clock `now`).
    public init(store: VersionStore, keep: Int64, now: @escaping @Sendable () -> Int64, every: Duration = .seconds(3600),
                logger: Logger) {
        timer = DispatchSource.makeTimerSource(queue: queue)
        let interval = DispatchTimeInterval.milliseconds(Int(every / .milliseconds(1)))
        timer.schedule(deadline: .now(), repeating: interval)
        let done = done
        timer.setEventHandler {
            store.thin(now: now(), keep: keep, logger: logger)
            done.count += 1
        }
        timer.resume()
    }

    deinit { timer.cancel() }

    /// Ends it (a thinning under way finishes first).
    public func stop() {
        timer.cancel()
        queue.sync {}
    }
}
