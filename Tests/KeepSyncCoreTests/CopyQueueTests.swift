import Testing
@testable import KeepSyncCore

@Suite("Copy queue")
struct CopyQueueTests {
    static let shape = (groupFiles: 4, concurrentGroups: 2)
    static func paths(_ n: Int) -> [RelativePath] { (0..<n).map { RelativePath("f\($0)") } }

    @Test("a lone file goes alone, at once, while nothing else copies")
    func loneFile() {
        var q = CopyQueue()
        q.add(RelativePath("a"))
        let first = q.next(limit: 8, shape: Self.shape), second = q.next(limit: 8, shape: Self.shape)
        #expect(first == [RelativePath("a")])
        #expect(second == nil)
        #expect(q.runningPaths.contains(RelativePath("a")))
        #expect(!q.isEmpty)
    }

    @Test("what waits is shared among the free group slots, at most groupFiles each, and no more groups than concurrentGroups")
    func groups() {
        var q = CopyQueue()
        for p in Self.paths(10) { q.add(p) }
        let first = q.next(limit: 8, shape: Self.shape)
        let second = q.next(limit: 8, shape: Self.shape)
        #expect(first == Array(Self.paths(10)[0..<4]))
        #expect(second == Array(Self.paths(10)[4..<8]))
        let third = q.next(limit: 8, shape: Self.shape)
        #expect(third == nil, "a third group while two run")
        #expect(q.workers == 2)
        for p in first! { _ = q.ended(p) }
        q.itemEnded(count: first!.count)
        // Two wait, one slot free: both go in one group.
        let last = q.next(limit: 8, shape: Self.shape)
        #expect(last == Array(Self.paths(10)[8..<10]))
    }

    @Test("the executor's limit bounds the work items, a lone file's too")
    func limit() {
        var q = CopyQueue()
        q.add(RelativePath("a"))
        let a = q.next(limit: 1, shape: Self.shape)
        q.add(RelativePath("b"))
        let b = q.next(limit: 1, shape: Self.shape)
        #expect(a != nil)
        #expect(b == nil)
    }

    @Test("a file queued while its copy runs is marked changed, not queued twice; one waiting is queued once")
    func changedWhileRunning() {
        var q = CopyQueue()
        q.add(RelativePath("a"))
        _ = q.next(limit: 8, shape: Self.shape)
        q.add(RelativePath("a"))
        #expect(q.waitingCount == 0)
        let changed = q.ended(RelativePath("a"))
        #expect(changed, "the change during the copy is reported when it ends")
        #expect(q.isEmpty)
        q.add(RelativePath("b"))
        q.add(RelativePath("b"))
        #expect(q.waitingCount == 1)
        let marked = q.markChanged(RelativePath("b"))
        #expect(!marked, "only a running copy can be marked")
    }

    @Test("taking what waits leaves the copies under way; the storage of a big pass goes once empty")
    func takeAndShrink() {
        var q = CopyQueue()
        for p in Self.paths(3000) { q.add(p) }
        let running = q.next(limit: 8, shape: (groupFiles: 3000, concurrentGroups: 1))!
        for i in 0..<5 { q.add(RelativePath("again/\(i)")) }
        let taken = q.takeWaiting()
        #expect(taken.count == 5)
        #expect(q.waitingCount == 0 && q.runningCount == 3000)
        q.shrinkIfEmpty()
        #expect(q.capacity > 0, "nothing shrinks while copies run")
        for p in running { _ = q.ended(p) }
        q.itemEnded(count: running.count)
        q.shrinkIfEmpty()
        #expect(q.capacity == 0)
        #expect(q.paths.isEmpty)
    }
}
