import KeepSyncCore
import Synchronization

/// An agent's machine in memory: source and mirror trees, a record store, fake watchers
/// (every one kept), a source root that can vanish, timers on a manual clock.
public final class FakeAgentHost: AgentHost {
    /// The source tree.
    public let source: InMemoryTree
    /// The host whose source this one shares (another mirror of one agent), if any: its
    /// source root's state is this one's.
    public let sourceHost: FakeAgentHost?
    /// The mirror tree.
    public let mirror = InMemoryTree(device: 2)
    /// The record store.
    public let store = GaugedStore()
    /// The clock the timers tick on.
    public let clock: ManualClock
    private let state = Mutex<(watchers: [FakeWatcher], rootGone: Bool, locked: Bool, warmings: Int, ticks: Int)>(([], false, false, 0, 0))
    private let mirrorGone = Mutex(false)
    /// What the mirror's file system holds (as a probe would find it).
    public let mirrorLimits: MirrorLimits

    /// A host whose timers run on `clock`.
    public init(clock: ManualClock, mirrorLimits: MirrorLimits = .none) {
        self.clock = clock
        self.mirrorLimits = mirrorLimits
        source = InMemoryTree(device: 1)
        sourceHost = nil
    }

    /// Another mirror's host of the agent `first` serves: the same source (and its root's
    /// state), a mirror and a store of its own.
    public init(sharingSourceWith first: FakeAgentHost, mirrorLimits: MirrorLimits = .none) {
        clock = first.clock
        self.mirrorLimits = mirrorLimits
        source = first.source
        sourceHost = first
    }

    /// Makes the mirror root vanish (an unplugged disk), or come back.
    public func setMirrorGone(_ gone: Bool) { mirrorGone.withLock { $0 = gone } }

    /// The mirror root: device 2, inode 1, "memory"; nil while gone.
    public func mirrorRoot(_ path: [UInt8]) -> MirrorRoot? {
        if mirrorGone.withLock({ $0 }) { return nil }
        return MirrorRoot(identity: FileIdentity(device: 2, inode: 1), fileSystem: Array("memory".utf8), limits: mirrorLimits)
    }

    /// A fixed PID.
    public var processID: Int { 4242 }

    /// A fixed time.
    public func timestamp() -> String { "2026-01-01T00:00:00Z" }

    /// Copies and record writes on the caller; serial reads.
    public var copies: (executor: CopyExecutor, io: ParallelIO, scanIO: ParallelIO) { (.inline, .serial, .serial) }

    /// Locks, loads the store, and checks the source with `SourceSafety` as the agent's host does.
    public func prepare(_ settings: Settings, logger: Logger, heartbeat: Heartbeat?, pausingForMirror: Bool,
                        refused: (RecordSet, String) -> Void) throws -> PreparedRecords {
        var records = try store.load()
        let root = sourceRootStat(settings.source)
        try SourceSafety.require(settings, root: root, rootIsEmpty: sourceRootIsEmpty(settings.source), records: records,
                                 refused: refused)
        let current = mirrorRoot(settings.mirror)
        var away: String?
        if pausingForMirror, records.mirror != nil {
            away = MirrorSafety.problem(settings, records: records, current: current)
        }
        if away == nil {
            try MirrorSafety.require(settings, records: records, current: current, refused: refused)
            if let current, records.mirror != current { try store.apply([.setMirror(current)]) }
            records.mirror = current
        }
        state.withLock { $0.locked = true }
        return PreparedRecords(store: store, records: records, root: root!, mirrorAway: away,
                               release: { self.state.withLock { $0.locked = false } })
    }

    /// The two trees.
    public func openTrees(_ settings: Settings, limits: MirrorLimits, cancellation: CancellationFlag, live: Bool) throws
        -> (source: any FileSystemProviding, mirror: any MirrorProviding) {
        (source, LocalMirror(mirror, limits: limits, changedCopyRetries: live ? 0 : 5))
    }

    /// Watchers made from now on walk until stopped (`FakeWatcher.walksUntilStopped`).
    public var watchersWalkUntilStopped: Bool {
        get { walkUntilStopped.withLock { $0 } }
        set { walkUntilStopped.withLock { $0 = newValue } }
    }
    private let walkUntilStopped = Mutex(false)

    /// A new fake watcher, kept.
    public func makeWatcher(_ settings: Settings, logger: Logger, heartbeat: Heartbeat,
                            cancellation: CancellationFlag) -> any WatcherProviding {
        let w = FakeWatcher(walksUntilStopped: watchersWalkUntilStopped)
        state.withLock { $0.watchers.append(w) }
        return w
    }

    /// Counts warmings.
    public func warmDirectories(_ settings: Settings) -> @Sendable () -> Void {
        state.withLock { $0.warmings += 1 }
        return {}
    }

    /// Nothing to read ahead in memory.
    public func readAhead(_ settings: Settings) -> @Sendable () -> Void { {} }

    /// The source root's stat, unless it is gone.
    public func sourceRootStat(_ path: [UInt8]) -> FileStat? {
        if let sourceHost { return sourceHost.sourceRootStat(path) }
        return state.withLock { $0.rootGone } ? nil : try? source.stat(.root)
    }

    /// True when the source root lists nothing.
    public func sourceRootIsEmpty(_ path: [UInt8]) -> Bool { (try? source.list(.root).isEmpty) ?? false }

    /// Counts the calls.
    public func releaseMemory() { memoryReleases.withLock { $0 += 1 } }
    /// How often the agent gave memory back.
    public let memoryReleases = Mutex(0)

    /// Ticks now and every `interval` of the manual clock.
    public func repeating(every interval: Duration, _ tick: @escaping @Sendable () -> Void) -> any TimerHandle {
        let clock = self.clock
        // Deadlines from the start, so that an advance before the sleep still ticks.
        return TaskTimer(Task { [self] in
            var next = clock.now
            while !Task.isCancelled {
                tick()
                self.state.withLock { $0.ticks += 1 }
                next = next.advanced(by: interval)
                do { try await clock.sleep(until: next, tolerance: nil) } catch { return }
            }
        })
    }

    /// Makes the source root vanish (a lazy unmount) or come back.
    public func setRootGone(_ gone: Bool) { state.withLock { $0.rootGone = gone } }

    /// Every watcher made, in order.
    public var watchers: [FakeWatcher] { state.withLock { $0.watchers } }

    /// Watchers started and not stopped.
    public var runningWatchers: Int { watchers.filter(\.isRunning).count }

    /// Timer ticks so far.
    public var ticks: Int { state.withLock { $0.ticks } }

    /// True while the agent holds the lock.
    public var isLocked: Bool { state.withLock { $0.locked } }

    /// Settings for this host: source, mirror and state at fixed paths, `configure` applied.
    public static func settings(mirror: String = "/mirror", state: String = "/state",
                                _ configure: (inout Configuration) -> Void = { _ in }) -> Settings {
        var configuration = Configuration()
        configure(&configuration)
        return Settings(configuration: configuration, invocation: Invocation(command: .run),
                        source: Array("/src".utf8), mirror: Array(mirror.utf8), state: Array(state.utf8),
                        excludes: try! ExcludeMatcher(patterns: configuration.excludes), configFile: nil)
    }
}

/// A repeating task, cancelled as a timer.
struct TaskTimer: TimerHandle {
    let task: Task<Void, Never>
    init(_ task: Task<Void, Never>) { self.task = task }
    func cancel() { task.cancel() }
}
