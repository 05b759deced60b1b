import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// A SyncManager over two in-memory trees, an in-memory store and a manual clock. The
/// test plays the watcher: it changes the source, then calls `receive`.
final class ManagerHarness {
    let source = InMemoryTree(device: 1)
    let mirror = InMemoryTree(device: 2)
    let store = InMemoryStore()
    let clock = ManualClock()
    let timing: SyncManager<ManualClock>.Timing
    let manager: SyncManager<ManualClock>

    static let settle = Duration.milliseconds(20)
    static let maxDelay = Duration.milliseconds(2000)

    /// True when copies run on the caller (`.inline`): `process` then waits for their end.
    let waitsForCopies: Bool

    init(options: SyncOptions = SyncOptions(), executor: CopyExecutor? = nil, verifyInterval: Duration? = nil,
         heldWhileUnreachable: Int = 10_000, logger: Logger = .silent, changedCopyRetries: Int = 5) {
        waitsForCopies = executor == nil
        let executor = executor ?? .inline
        timing = SyncManager<ManualClock>.Timing(settle: Self.settle, maxDelay: Self.maxDelay, verifyInterval: verifyInterval,
                                                    heldWhileUnreachable: heldWhileUnreachable)
        let local = LocalMirror(mirror, changedCopyRetries: changedCopyRetries)
        let engine = SyncEngine(source: source, mirror: local, store: store, records: RecordSet(), options: options,
                                recordScheduler: executor.recordScheduler ?? .serialQueue())
        manager = SyncManager(engine: engine, clock: clock, timing: timing,
                              executor: executor, logger: logger)
    }

    /// Processes what is due; with inline copies, returns once their completions landed.
    func process() async {
        await manager.processDue()
        if waitsForCopies { await manager.waitForCopies() }
    }

    /// A full resync, processed at once (the startup pass).
    func fullSync() async {
        await manager.requestFullResync()
        await process()
    }

    /// Lets the settle time pass, then processes what is due.
    func settleAndProcess() async {
        clock.advance(by: Self.settle)
        await process()
    }

    /// Delivers events, as a watcher would.
    func receive(_ events: WatchEvent...) async {
        for e in events { await manager.receive(e) }
    }

    var installs: Int { mirror.count(.install) }

    /// The records the store holds (what survives a restart).
    var storedRecords: [RelativePath: FileRecord] { (try? store.load().table.dictionary) ?? [:] }

    /// Every difference between mirror and source, one line each (kind, mode, mtime,
    /// content of files, target of links), paths for which `ignoring` is true left out.
    func differences(ignoring: (RelativePath) -> Bool = { _ in false }) -> [String] {
        let s = source.nodes, m = mirror.nodes
        var out: [String] = []
        for path in Set(s.keys).union(m.keys).sorted() where !ignoring(path) {
            let name = path.escaped
            guard let a = s[path] else { out.append("- \(name) (extra in mirror)"); continue }
            guard let b = m[path] else { out.append("+ \(name) (missing in mirror)"); continue }
            guard a.kind == b.kind else { out.append("~ \(name): kind \(a.kind) vs \(b.kind)"); continue }
            if a.mode != b.mode { out.append("~ \(name): mode \(String(a.mode, radix: 8)) vs \(String(b.mode, radix: 8))") }
            if a.mtime != b.mtime { out.append("~ \(name): mtime \(a.mtime) vs \(b.mtime)") }
            if a.kind == .regular, a.content != b.content { out.append("~ \(name): content") }
            if a.kind == .symlink, a.target != b.target { out.append("~ \(name): link target") }
        }
        return out
    }

    /// Expects the mirror to equal the source node for node.
    func expectMirrorEqualsSource(ignoring: (RelativePath) -> Bool = { _ in false },
                                  sourceLocation: SourceLocation = #_sourceLocation) {
        let diff = differences(ignoring: ignoring)
        #expect(diff == [], "mirror differs from source", sourceLocation: sourceLocation)
    }

    /// Sets the mirror's failure hook (nil removes it).
    func failMirror(_ hook: (@Sendable (InMemoryTree.Operation, RelativePath) -> KeepSyncError?)?) {
        mirror.failure.withLock { $0 = hook }
    }

    /// A writer that overtakes copies of `path`: during its install number `n` (from 0),
    /// the source gets `content(n)`, or is left alone when that is nil. Returns how many
    /// installs of `path` began.
    @discardableResult
    func overtakeCopies(of path: RelativePath, _ content: @escaping @Sendable (Int) -> [UInt8]?) -> @Sendable () -> Int {
        let installs = Mutex(0)
        let source = self.source
        failMirror { op, p in
            guard op == .install, p == path else { return nil }
            let n = installs.withLock { n in defer { n += 1 }; return n }
            if let bytes = content(n) { source.writeFile(path, bytes) }
            return nil
        }
        return { installs.withLock { $0 } }
    }
}

/// A copy executor that holds every copy back until the test runs it.
final class HeldCopies: Sendable {
    private let works = Mutex<[@Sendable () -> Void]>([])

    var executor: CopyExecutor {
        CopyExecutor(limit: 4) { [self] work in works.withLock { $0.append(work) } }
    }

    /// Copies handed over and not yet run.
    var count: Int { works.withLock { $0.count } }

    /// Runs the oldest held copy on the calling thread; false when none is held.
    @discardableResult
    func runFirst() -> Bool {
        guard let work = works.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { return false }
        work()
        return true
    }

    /// Runs the copies held so far, in order, on the calling thread; returns how many.
    @discardableResult
    func runAll() -> Int {
        let held = works.withLock { w -> [@Sendable () -> Void] in
            defer { w.removeAll() }
            return w
        }
        for work in held { work() }
        return held.count
    }
}

/// A flag settable from any task.
final class Flag: Sendable {
    private let value = Mutex(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}

extension ManagerHarness {
    /// Calls `waitUntilIdle()` in a task of its own; the flag is set when it returns.
    func startWaitingUntilIdle() -> Flag {
        let manager = self.manager, returned = Flag()
        Task {
            await manager.waitUntilIdle()
            returned.set()
        }
        return returned
    }

    /// Waits, boundedly, for `waitUntilIdle()` to return: true when it did. A manager that
    /// never becomes idle fails the test instead of hanging it.
    func waitUntilIdle() async -> Bool {
        let returned = startWaitingUntilIdle()
        return await eventually(every: .zero) { returned.isSet }
    }

}

extension SyncManager {
    /// How many `waitUntilIdle()` calls are suspended (white-box, to order a test's steps).
    var registeredIdleWaiters: Int { idleWaiters.count }
}
