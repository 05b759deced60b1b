import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// The live queue: settle, coalescing, max-delay, renames, type flips, deletions, copies
/// that race with changes, errors and excludes. The test plays the watcher (it changes the
/// in-memory source, then calls `receive`) and the driver (it advances a manual clock, then
/// calls `processDue`). No disk, no sleeping, no real time.
@Suite("SyncManager")
struct SyncManagerTests {
    static func p(_ text: String) -> RelativePath { RelativePath(text) }
    static func b(_ text: String) -> [UInt8] { Array(text.utf8) }

    // MARK: Settle

    @Test("a change is not copied before the settle time has passed, and is copied when it has")
    func settleTime() async {
        let h = ManagerHarness()
        h.source.writeFile(Self.p("a.txt"), Self.b("one"))
        await h.fullSync()
        #expect(h.installs == 1)
        h.expectMirrorEqualsSource()

        h.source.writeFile(Self.p("a.txt"), Self.b("two!"))
        await h.receive(.changed(Self.p("a.txt")))
        await h.process()
        #expect(h.installs == 1, "copied at the event")
        h.clock.advance(by: .milliseconds(19))
        await h.process()
        #expect(h.installs == 1, "copied 19 ms after the event, before the settle time")
        #expect(h.mirror.node(Self.p("a.txt"))?.content == Self.b("one"))

        h.clock.advance(by: .milliseconds(1))
        await h.process()
        #expect(h.installs == 2, "not copied once the settle time passed")
        h.expectMirrorEqualsSource()
        #expect(await h.manager.nextDeadline() == nil)
    }

    @Test("a close after write is copied at once, without waiting for the settle time")
    func closeAfterWriteIsImmediate() async {
        let h = ManagerHarness()
        await h.fullSync()
        h.source.writeFile(Self.p("new.txt"), Self.b("complete"))
        await h.receive(.changed(Self.p("new.txt")), .closedAfterWrite(Self.p("new.txt")))
        await h.process()
        #expect(h.installs == 1)
        #expect(h.mirror.node(Self.p("new.txt"))?.content == Self.b("complete"))
        h.expectMirrorEqualsSource()
    }

    // MARK: Coalescing

    @Test("ten changes to one path within the settle time make exactly one copy")
    func coalescesOnePath() async {
        let h = ManagerHarness()
        h.source.writeFile(Self.p("log.txt"), Self.b("v"))
        await h.fullSync()
        let before = h.installs

        for i in 0..<10 {
            h.source.writeFile(Self.p("log.txt"), Self.b("version \(i)"))
            await h.receive(.changed(Self.p("log.txt")))
            h.clock.advance(by: .milliseconds(1))
            await h.process()
        }
        #expect(h.installs == before, "copied while events kept coming")
        #expect(await h.manager.snapshot().pending == 1)
        await h.settleAndProcess()
        #expect(h.installs == before + 1)
        #expect(h.mirror.node(Self.p("log.txt"))?.content == Self.b("version 9"))
        h.expectMirrorEqualsSource()
    }

    @Test("changes to a hundred paths are copied in one round, one copy each")
    func hundredPathsOneRound() async {
        let h = ManagerHarness()
        h.source.makeDirectory(Self.p("d"))
        await h.fullSync()
        let before = h.installs

        for i in 0..<100 {
            let path = Self.p("d/file\(i).txt")
            h.source.writeFile(path, Self.b("content \(i)"))
            await h.receive(.changed(path))
        }
        await h.process()
        #expect(h.installs == before)
        #expect(await h.manager.snapshot().pending == 100)

        await h.settleAndProcess()
        #expect(h.installs == before + 100)
        #expect(await h.manager.snapshot().pending == 0)
        #expect(await h.manager.nextDeadline() == nil)
        h.expectMirrorEqualsSource()
    }

    // MARK: Max delay

    @Test("a path that never goes quiet is copied when the maximum delay is reached, not before")
    func maxDelay() async {
        let h = ManagerHarness()
        let busy = Self.p("busy.log")
        h.source.writeFile(busy, Self.b("start"))
        await h.fullSync()
        let before = h.installs
        let t0 = h.clock.now

        var firstCopy: Duration?
        for tick in 0...250 {   // an event every 10 ms, t0 … t0+2500 ms
            h.source.writeFile(busy, Self.b("line \(tick)"))
            await h.receive(.changed(busy))
            await h.process()
            if firstCopy == nil, h.installs > before {
                firstCopy = t0.duration(to: h.clock.now)
                #expect(h.mirror.node(busy)?.content == Self.b("line \(tick)"))
            }
            h.clock.advance(by: .milliseconds(10))
        }
        #expect(firstCopy == ManagerHarness.maxDelay)
        #expect(h.installs == before + 1, "a second copy within 500 ms of the first")
    }

    // MARK: Renames

    @Test("a file renamed in the source is renamed in the mirror, not copied again")
    func renameIsNotACopy() async throws {
        let h = ManagerHarness()
        let from = Self.p("docs/a.txt"), to = Self.p("docs/b.txt")
        h.source.makeDirectory(Self.p("docs"))
        h.source.writeFile(from, Self.b("keep me"))
        await h.fullSync()
        let mirrorInode = try #require(h.mirror.node(from)).inode
        let sourceInode = try #require(h.source.node(from)).inode
        let installs = h.installs

        try h.source.rename(from, to: to)
        await h.receive(.moved(from: from, to: to))
        await h.settleAndProcess()

        #expect(h.mirror.node(to)?.inode == mirrorInode, "the mirror's file was replaced, not renamed")
        #expect(h.mirror.node(from) == nil)
        #expect(h.installs == installs)
        #expect(h.mirror.count(.rename) == 1)
        let records = h.storedRecords
        #expect(records[from] == nil)
        #expect(records[to]?.mirrorInode == mirrorInode)
        #expect(records[to]?.inode == sourceInode)
        h.expectMirrorEqualsSource()
    }

    @Test("a renamed directory of a thousand files is one rename and no copies")
    func directoryRename() async throws {
        let h = ManagerHarness()
        h.source.makeDirectory(Self.p("photos"))
        for i in 0..<1000 { h.source.writeFile(Self.p("photos/img\(i).jpg"), Self.b("pixels \(i)")) }
        await h.fullSync()
        #expect(h.installs == 1000)
        h.mirror.resetCounts()

        try h.source.rename(Self.p("photos"), to: Self.p("pictures"))
        await h.receive(.moved(from: Self.p("photos"), to: Self.p("pictures")))
        await h.settleAndProcess()

        #expect(h.mirror.count(.install) == 0)
        #expect(h.mirror.count(.rename) == 1)
        #expect(h.mirror.count(.remove) == 0)
        h.expectMirrorEqualsSource()
        let records = h.storedRecords
        #expect(records.keys.filter { $0.isWithin(Self.p("photos")) }.isEmpty)
        #expect(records.keys.filter { $0.isWithin(Self.p("pictures")) }.count == 1001)
        #expect(await h.manager.snapshot().files == 1000)
    }

    @Test("a move whose target was replaced by another file after the move is copied, not renamed")
    func moveOfAnotherObjectIsCopied() async throws {
        let h = ManagerHarness()
        let from = Self.p("a.txt"), to = Self.p("b.txt")
        h.source.writeFile(from, Self.b("old"))
        await h.fullSync()
        let oldMirrorInode = try #require(h.mirror.node(from)).inode
        let installs = h.installs

        try h.source.rename(from, to: to)
        h.source.delete(to)
        h.source.writeFile(to, Self.b("a different file"))   // a new inode at `to`
        await h.receive(.moved(from: from, to: to), .changed(to))
        await h.settleAndProcess()

        #expect(h.mirror.count(.rename) == 0, "renamed a mirror file that holds another object's data")
        #expect(h.installs == installs + 1)
        #expect(h.mirror.node(to)?.content == Self.b("a different file"))
        #expect(h.mirror.node(to)?.inode != oldMirrorInode)
        #expect(h.mirror.node(from) == nil)
        #expect(h.storedRecords[from] == nil)
        h.expectMirrorEqualsSource()
    }

    @Test("a move whose target was rewritten in place after the move ends with the new content")
    func moveRewrittenInPlace() async throws {
        let h = ManagerHarness()
        let from = Self.p("a.txt"), to = Self.p("b.txt")
        h.source.writeFile(from, Self.b("old"))
        await h.fullSync()
        let installs = h.installs

        try h.source.rename(from, to: to)
        h.source.writeFile(to, Self.b("rewritten after the move"))   // same inode, new content
        await h.receive(.moved(from: from, to: to), .changed(to))
        await h.settleAndProcess()

        #expect(h.installs == installs + 1)
        #expect(h.mirror.node(to)?.content == Self.b("rewritten after the move"))
        #expect(h.mirror.node(from) == nil)
        let record = try #require(h.storedRecords[to])
        #expect(record.describes(source: try #require(try h.source.stat(to))))
        h.expectMirrorEqualsSource()
    }

    @Test("a file renamed over another synced file replaces it without a copy")
    func renameOverExistingFile() async throws {
        let h = ManagerHarness()
        h.source.writeFile(Self.p("new.txt"), Self.b("the new version"))
        h.source.writeFile(Self.p("current.txt"), Self.b("old"))
        await h.fullSync()
        let inode = try #require(h.mirror.node(Self.p("new.txt"))).inode
        let installs = h.installs

        try h.source.rename(Self.p("new.txt"), to: Self.p("current.txt"))   // the save-by-rename idiom
        await h.receive(.moved(from: Self.p("new.txt"), to: Self.p("current.txt")))
        await h.settleAndProcess()

        #expect(h.installs == installs)
        #expect(h.mirror.node(Self.p("current.txt"))?.inode == inode)
        #expect(h.storedRecords.keys.sorted() == [.root, Self.p("current.txt")])
        h.expectMirrorEqualsSource()
    }

    @Test("a permission change is applied without copying the file")
    func permissionChange() async {
        let h = ManagerHarness()
        h.source.writeFile(Self.p("script.sh"), Self.b("#!/bin/sh"))
        await h.fullSync()
        let installs = h.installs

        h.source.modify(Self.p("script.sh")) { $0.mode = 0o755 }
        await h.receive(.changed(Self.p("script.sh")))
        await h.settleAndProcess()

        #expect(h.installs == installs)
        #expect(h.mirror.node(Self.p("script.sh"))?.mode == 0o755)
        #expect(h.storedRecords[Self.p("script.sh")]?.mode == 0o755)
        h.expectMirrorEqualsSource()
    }

    // MARK: Type flips

    enum TypeFlip: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case fileToDirectory, directoryToFile, fileToSymlink, symlinkToFile
        var testDescription: String { rawValue }
    }

    @Test("a path that changes kind is replaced in the mirror", arguments: TypeFlip.allCases)
    func typeFlip(_ flip: TypeFlip) async throws {
        let h = ManagerHarness()
        let x = Self.p("x")
        h.source.writeFile(Self.p("other.txt"), Self.b("bystander"))
        switch flip {
        case .fileToDirectory, .fileToSymlink:
            h.source.writeFile(x, Self.b("a file"))
        case .directoryToFile:
            h.source.makeDirectory(x)
            h.source.writeFile(Self.p("x/a"), Self.b("a"))
            h.source.makeDirectory(Self.p("x/sub"))
            h.source.writeFile(Self.p("x/sub/c"), Self.b("c"))
        case .symlinkToFile:
            h.source.makeLink(x, to: Self.b("somewhere/else"))
        }
        await h.fullSync()
        h.expectMirrorEqualsSource()

        var events: [WatchEvent] = []
        switch flip {
        case .fileToDirectory:
            h.source.delete(x)
            h.source.makeDirectory(x, mode: 0o750, mtime: nil)
            h.source.writeFile(Self.p("x/a"), Self.b("alpha"))
            h.source.writeFile(Self.p("x/b"), Self.b("beta"), mode: 0o600)
            h.source.makeDirectory(Self.p("x/sub"))
            h.source.writeFile(Self.p("x/sub/c"), Self.b("gamma"))
            events = [.removed(x), .changed(x), .changed(Self.p("x/a")), .changed(Self.p("x/b")),
                      .changed(Self.p("x/sub")), .closedAfterWrite(Self.p("x/sub/c"))]
        case .directoryToFile:
            h.source.delete(x)
            h.source.writeFile(x, Self.b("now a file"))
            events = [.removed(Self.p("x/sub/c")), .removed(Self.p("x/sub")), .removed(Self.p("x/a")),
                      .removed(x), .changed(x), .closedAfterWrite(x)]
        case .fileToSymlink:
            h.source.delete(x)
            h.source.makeLink(x, to: Self.b("../target"))
            events = [.removed(x), .changed(x)]
        case .symlinkToFile:
            h.source.delete(x)
            h.source.writeFile(x, Self.b("now a file"))
            events = [.removed(x), .changed(x), .closedAfterWrite(x)]
        }
        for e in events { await h.receive(e) }
        await h.process()
        await h.settleAndProcess()

        h.expectMirrorEqualsSource()
        let kind = try #require(h.source.node(x)).kind
        #expect(h.storedRecords[x]?.kind == kind)
        let stale = h.storedRecords.keys.filter { $0.isWithin(x) && h.source.node($0) == nil }
        #expect(stale == [], "records outlive their paths")
        #expect(await h.manager.snapshot().errors == [:])
    }

    // MARK: Deletions

    @Test("a removed file disappears from the mirror and from the records")
    func removal() async {
        let h = ManagerHarness()
        h.source.writeFile(Self.p("a.txt"), Self.b("a"))
        h.source.writeFile(Self.p("b.txt"), Self.b("b"))
        await h.fullSync()

        h.source.delete(Self.p("a.txt"))
        await h.receive(.removed(Self.p("a.txt")))
        await h.settleAndProcess()

        #expect(h.mirror.node(Self.p("a.txt")) == nil)
        #expect(h.mirror.node(Self.p("b.txt")) != nil)
        #expect(h.storedRecords[Self.p("a.txt")] == nil)
        h.expectMirrorEqualsSource()
    }

    @Test("a live removal of a directory holding most of the mirror is not held by the brake")
    func liveDirectoryRemovalIsNotBraked() async {
        let h = ManagerHarness()
        h.source.makeDirectory(Self.p("bulk"))
        for i in 0..<20 { h.source.writeFile(Self.p("bulk/f\(i)"), Self.b("\(i)")) }
        h.source.writeFile(Self.p("keep.txt"), Self.b("keep"))
        await h.fullSync()
        #expect(h.mirror.nodes.count == 23)   // root, bulk, 20 files, keep.txt

        h.source.delete(Self.p("bulk"))
        for i in 0..<20 { await h.receive(.removed(Self.p("bulk/f\(i)"))) }
        await h.receive(.removed(Self.p("bulk")))
        await h.settleAndProcess()

        #expect(h.mirror.node(Self.p("bulk")) == nil, "21 of 22 entries removed live must not be braked")
        #expect(await h.manager.snapshot().heldDeletes == 0)
        h.expectMirrorEqualsSource()
    }

    @Test("live removals of 90% of the mirror's files are not held by the brake")
    func liveFileRemovalsAreNotBraked() async {
        let h = ManagerHarness()
        for i in 0..<20 { h.source.writeFile(Self.p("f\(i)"), Self.b("\(i)")) }
        await h.fullSync()

        for i in 0..<18 {
            h.source.delete(Self.p("f\(i)"))
            await h.receive(.removed(Self.p("f\(i)")))
        }
        await h.settleAndProcess()

        #expect(h.mirror.nodes.count == 3)   // root, f18, f19
        #expect(await h.manager.snapshot().heldDeletes == 0)
        h.expectMirrorEqualsSource()
    }

    @Test("live removals of most files of a directory whose attributes also changed are not held")
    func liveRemovalsWithDirectoryEvent() async {
        let h = ManagerHarness()
        h.source.makeDirectory(Self.p("d"))
        for i in 0..<20 { h.source.writeFile(Self.p("d/f\(i)"), Self.b("\(i)")) }
        await h.fullSync()

        for i in 0..<18 {
            h.source.delete(Self.p("d/f\(i)"))
            await h.receive(.removed(Self.p("d/f\(i)")))
        }
        h.source.modify(Self.p("d")) { $0.mode = 0o700 }   // chmod: IN_ATTRIB on d
        await h.receive(.changed(Self.p("d")))
        await h.settleAndProcess()

        #expect(h.mirror.nodes.count == 4, "live deletions were held")   // root, d, f18, f19
        h.expectMirrorEqualsSource()
    }

    @Test("a directory deleted and recreated with other files is mirrored live, not braked")
    func directoryRecreatedLive() async {
        let h = ManagerHarness()
        h.source.makeDirectory(Self.p("out"))
        for i in 0..<20 { h.source.writeFile(Self.p("out/old\(i).o"), Self.b("\(i)")) }
        await h.fullSync()

        h.source.delete(Self.p("out"))
        for i in 0..<20 { await h.receive(.removed(Self.p("out/old\(i).o"))) }
        await h.receive(.removed(Self.p("out")))
        h.source.makeDirectory(Self.p("out"))
        await h.receive(.changed(Self.p("out")))
        for name in ["new1.o", "new2.o"] {
            h.source.writeFile(Self.p("out/\(name)"), Self.b(name))
            await h.receive(.changed(Self.p("out/\(name)")))
        }
        await h.settleAndProcess()

        h.expectMirrorEqualsSource()
        #expect(await h.manager.snapshot().heldDeletes == 0)
    }

    @Test("a full resync that would delete most of the mirror holds the deletions and applies the rest")
    func fullResyncBrakes() async {
        let h = ManagerHarness()
        for i in 0..<20 { h.source.writeFile(Self.p("f\(i)"), Self.b("\(i)")) }
        await h.fullSync()

        for i in 0..<15 { h.source.delete(Self.p("f\(i)")) }   // 75% of 20 entries, no events (overflow)
        h.source.writeFile(Self.p("fresh.txt"), Self.b("new"))
        await h.manager.receive(.rescan(reason: "overflow"))
        await h.process()

        let snapshot = await h.manager.snapshot()
        #expect(snapshot.heldDeletes == 15)
        for i in 0..<15 { #expect(h.mirror.node(Self.p("f\(i)")) != nil, "f\(i) deleted despite the brake") }
        #expect(h.mirror.node(Self.p("fresh.txt"))?.content == Self.b("new"))
        #expect(snapshot.fullPasses == 2)

        // The same through requestFullResync: still held.
        await h.fullSync()
        #expect(await h.manager.snapshot().heldDeletes == 15)
        #expect(h.mirror.nodes.count == 22)   // root, 20 files, fresh.txt
    }

    @Test("an attribute change on the source root does not apply the deletions the brake holds")
    func rootEventKeepsHeldDeletions() async {
        let h = ManagerHarness()
        for i in 0..<20 { h.source.writeFile(Self.p("f\(i)"), Self.b("\(i)")) }
        await h.fullSync()
        for i in 0..<15 { h.source.delete(Self.p("f\(i)")) }
        await h.fullSync()
        #expect(await h.manager.snapshot().heldDeletes == 15)
        let removes = h.mirror.count(.remove)

        // `chmod`/`touch` on the source root: the watcher reports IN_ATTRIB on the root as `.changed(.root)`.
        h.source.modify(.root) { $0.mode = 0o750 }
        await h.receive(.changed(.root))
        await h.settleAndProcess()

        #expect(h.mirror.node(.root)?.mode == 0o750)
        #expect(h.mirror.count(.remove) == removes, "a root attribute change removed what the brake holds")
        #expect(h.mirror.nodes.count == 21)   // root and the 20 files: deletions still held
    }

    @Test("one live removal does not release the other deletions the brake holds in the same directory")
    func liveRemovalDoesNotReleaseHeldDeletions() async {
        let h = ManagerHarness()
        for i in 0..<20 { h.source.writeFile(Self.p("f\(i)"), Self.b("\(i)")) }
        await h.fullSync()
        for i in 0..<15 { h.source.delete(Self.p("f\(i)")) }
        await h.fullSync()
        #expect(await h.manager.snapshot().heldDeletes == 15)

        // Within one settle window: f19 is deleted (seen live) and the root's mode changes.
        h.source.delete(Self.p("f19"))
        await h.receive(.removed(Self.p("f19")))
        h.source.modify(.root) { $0.mode = 0o750 }
        await h.receive(.changed(.root))
        await h.settleAndProcess()

        #expect(h.mirror.node(Self.p("f19")) == nil, "the deletion seen live was not applied")
        let kept = (0..<15).filter { h.mirror.node(Self.p("f\($0)")) != nil }.count
        #expect(kept == 15, "deletions held by the brake were applied because of an unrelated live removal")
    }

    @Test("the held count follows what is held: the scopes of one round add up, a scope scanned again with nothing to hold drops its share, a full pass sets it anew")
    func heldCountFollowsTheHolds() async {
        let h = ManagerHarness()
        for d in ["a", "b"] {
            h.source.makeDirectory(Self.p(d))
            for i in 0..<20 { h.source.writeFile(Self.p("\(d)/f\(i)"), Self.b("\(i)")) }
        }
        await h.fullSync()
        // 15 of 20 gone in each, unseen (no removal events); a change in each makes it a scope.
        for d in ["a", "b"] {
            for i in 0..<15 { h.source.delete(Self.p("\(d)/f\(i)")) }
            h.source.writeFile(Self.p("\(d)/new"), Self.b("new"))
            await h.receive(.changed(Self.p("\(d)/new")), .changed(Self.p(d)))
        }
        await h.settleAndProcess()
        #expect(h.mirror.node(Self.p("a/f0")) != nil && h.mirror.node(Self.p("b/f0")) != nil, "the brake held nothing")
        #expect(await h.manager.snapshot().heldDeletes == 30)

        // The files of `a`, then of `b`, come back: nothing held there any more.
        for (d, left) in [("a", 15), ("b", 0)] {
            for i in 0..<15 { h.source.writeFile(Self.p("\(d)/f\(i)"), Self.b("\(i)")) }
            await h.receive(.changed(Self.p(d)))
            await h.settleAndProcess()
            #expect(await h.manager.snapshot().heldDeletes == left, "after \(d) came back")
        }
        h.expectMirrorEqualsSource()

        // A full pass sets the count whole: 15 of 43 entries go, below the threshold.
        for i in 0..<15 { h.source.delete(Self.p("b/f\(i)")) }
        await h.receive(.changed(Self.p("b")))
        await h.settleAndProcess()
        #expect(await h.manager.snapshot().heldDeletes == 15)
        await h.fullSync()
        #expect(await h.manager.snapshot().heldDeletes == 0)
        h.expectMirrorEqualsSource()
    }

    @Test("with deletions off, a removed path stays in the mirror and a rename still moves it")
    func noDelete() async throws {
        let h = ManagerHarness(options: SyncOptions(deleteEnabled: false))
        h.source.writeFile(Self.p("gone.txt"), Self.b("gone"))
        h.source.writeFile(Self.p("moved.txt"), Self.b("moved"))
        await h.fullSync()
        let inode = try #require(h.mirror.node(Self.p("moved.txt"))).inode

        h.source.delete(Self.p("gone.txt"))
        try h.source.rename(Self.p("moved.txt"), to: Self.p("renamed.txt"))
        await h.receive(.removed(Self.p("gone.txt")), .moved(from: Self.p("moved.txt"), to: Self.p("renamed.txt")))
        await h.settleAndProcess()

        #expect(h.mirror.node(Self.p("gone.txt"))?.content == Self.b("gone"))
        #expect(h.mirror.count(.remove) == 0)
        #expect(h.mirror.node(Self.p("renamed.txt"))?.inode == inode)
        #expect(h.mirror.node(Self.p("moved.txt")) == nil)
    }

    // MARK: Copies racing with changes

    @Test("a file that changes while its copy is in flight is copied again", .timeLimit(.minutes(1)))
    func requeueOnChangeDuringCopy() async throws {
        let held = HeldCopies()
        let h = ManagerHarness(executor: held.executor)
        let file = Self.p("doc.txt")
        await h.fullSync()

        h.source.writeFile(file, Self.b("version 1"))
        await h.receive(.closedAfterWrite(file))
        await h.process()
        #expect(held.count == 1, "the copy was not handed to the executor")
        #expect(await h.manager.snapshot().pending == 1, "a copy in flight counts as pending")
        #expect(await h.manager.nextDeadline() == nil)

        // The watcher reports a change while the copy is in flight; the copy reads
        // version 1, the file becomes version 2.
        await h.receive(.changed(file))
        #expect(held.runAll() == 1)
        h.source.writeFile(file, Self.b("version 2, longer"))
        #expect(h.mirror.node(file)?.content == Self.b("version 1"))

        // The completion hops back onto the actor and must re-queue the path.
        let requeued = await eventually(every: .zero) { await h.manager.nextDeadline() != nil }
        #expect(requeued, "the path was not queued again after its copy completed")
        await h.manager.drainRecords()   // record appends run on their own queue
        #expect(h.storedRecords[file] != nil)

        await h.settleAndProcess()
        #expect(held.count == 1, "no second copy was started")
        // waitUntilIdle, called while the copy is held, returns once it completed.
        let idle = h.startWaitingUntilIdle()
        #expect(await eventually(every: .zero) { await h.manager.registeredIdleWaiters == 1 })
        #expect(!idle.isSet, "waitUntilIdle returned while a copy was in flight")
        held.runAll()
        #expect(await eventually(every: .zero) { idle.isSet }, "waitUntilIdle did not return when the last copy completed")

        #expect(h.installs == 2)
        #expect(h.mirror.node(file)?.content == Self.b("version 2, longer"))
        await h.manager.drainRecords()
        let record = try #require(h.storedRecords[file])
        #expect(record.describes(source: try #require(try h.source.stat(file))))
        let snapshot = await h.manager.snapshot()
        #expect(snapshot.pending == 0)
        #expect(snapshot.errors == [:])
        #expect(snapshot.copiedFiles == 2)
        h.expectMirrorEqualsSource()
    }

    @Test("a file that vanishes before its copy runs is not an error", .timeLimit(.minutes(1)))
    func vanishedBeforeCopy() async {
        let held = HeldCopies()
        let h = ManagerHarness(executor: held.executor)
        let file = Self.p("tmp.txt")
        h.source.writeFile(Self.p("stays.txt"), Self.b("x"))
        await h.fullSync()
        held.runAll()
        #expect(await h.waitUntilIdle(), "the manager did not become idle")
        let installs = h.installs

        h.source.writeFile(file, Self.b("short-lived"))
        await h.receive(.closedAfterWrite(file))
        await h.process()
        #expect(held.count == 1)

        h.source.delete(file)
        await h.receive(.removed(file))
        held.runAll()
        let requeued = await eventually(every: .zero) { await h.manager.nextDeadline() != nil }
        #expect(requeued)
        await h.settleAndProcess()
        #expect(held.runAll() == 0)
        #expect(await h.waitUntilIdle(), "the manager did not become idle")

        #expect(h.installs == installs)
        #expect(h.mirror.node(file) == nil)
        let snapshot = await h.manager.snapshot()
        #expect(snapshot.errors == [:])
        #expect(snapshot.pending == 0)
        #expect(h.storedRecords[file] == nil)
        h.expectMirrorEqualsSource()
    }

    @Test("a path written again while its copy is in flight counts once in pending", .timeLimit(.minutes(1)))
    func pendingCountsPathsOnce() async {
        let held = HeldCopies()
        let h = ManagerHarness(executor: held.executor)
        let file = Self.p("doc.txt")
        await h.fullSync()
        h.source.writeFile(file, Self.b("v1"))
        await h.receive(.closedAfterWrite(file))
        await h.process()
        #expect(held.count == 1)

        h.source.writeFile(file, Self.b("v2"))
        await h.receive(.closedAfterWrite(file))
        let pending = await h.manager.snapshot().pending
        #expect(pending == 1, "one path is queued (in flight and due again), counted \(pending) times")

        // Drain: the first copy completes, the path is copied again, the mirror ends with v2.
        #expect(held.runAll() == 1)
        let completed = await eventually(every: .zero) { await h.manager.snapshot().copiedFiles == 1 }
        #expect(completed)
        #expect(await h.manager.snapshot().pending == 1)
        await h.settleAndProcess()
        held.runAll()
        #expect(await h.waitUntilIdle(), "the manager did not become idle")
        #expect(h.mirror.node(file)?.content == Self.b("v2"))
    }

    @Test("a copy that fails because its file vanished meanwhile is not an error")
    func failureOfVanishedFileIsNotAnError() async {
        let h = ManagerHarness()
        await h.fullSync()
        let file = Self.p("temp.part")
        let source = h.source
        h.failMirror { op, path in
            guard op == .install, path == file else { return nil }
            source.delete(file)   // the writer removed it while it was copied
            return KeepSyncError(.io, "read: No such file or directory", path: path)
        }
        h.source.writeFile(file, Self.b("partial"))
        await h.receive(.closedAfterWrite(file))
        await h.process()

        #expect(h.installs == 1, "the copy was not attempted")
        #expect(await h.manager.snapshot().errors == [:])
        #expect(h.mirror.node(file) == nil)
        h.expectMirrorEqualsSource()
    }

    // MARK: Errors

    @Test("a copy that finds the mirror full is reported for its path and the mirror, and both go when the path syncs")
    func failedCopyIsReportedAndCleared() async {
        let h = ManagerHarness()
        await h.fullSync()
        let full = Self.p("big.bin")
        h.failMirror { op, path in
            op == .install && path == full ? KeepSyncError(.noSpace, "write: No space left on device", path: path) : nil
        }

        for name in ["a.txt", "big.bin", "c.txt"] {
            h.source.writeFile(Self.p(name), Self.b("data of \(name)"))
            await h.receive(.changed(Self.p(name)))
        }
        await h.settleAndProcess()

        var snapshot = await h.manager.snapshot()
        #expect(Set(snapshot.errors.keys) == [full, .root])
        #expect(snapshot.errors[full]?.contains("No space") == true)
        #expect(snapshot.errors[.root]?.hasPrefix("the mirror is full") == true)
        #expect(h.differences() == ["+ big.bin (missing in mirror)"], "everything but the failed path syncs")
        #expect(h.storedRecords[full] == nil)

        h.failMirror(nil)
        h.source.writeFile(full, Self.b("data of big.bin, again"))
        await h.receive(.changed(full))
        await h.settleAndProcess()

        snapshot = await h.manager.snapshot()
        #expect(Array(snapshot.errors.keys) == [.root], "the path synced; the mirror waits for its probe")
        h.expectMirrorEqualsSource()
        h.clock.advance(by: .seconds(1))
        await h.process()
        #expect(await h.manager.snapshot().errors == [:])
    }

    @Test("a mirror with room for a probe but not for the files: each probe's resync fails again, and its files' errors are logged at error level in the first episode only")
    func fullMirrorLogsEachFileOnce() async {
        let lines = Mutex<[(level: LogLevel, text: String)]>([])
        let logger = Logger(level: .debug) { level, text in lines.withLock { $0.append((level, text)) } }
        let h = ManagerHarness(logger: logger)
        await h.fullSync()
        let names = (0..<5).map { Self.p("f\($0)") }
        h.failMirror { op, path in
            op == .install && names.contains(path) ? KeepSyncError(.noSpace, "write: No space left on device", path: path) : nil
        }
        for name in names {
            h.source.writeFile(name, Self.b("data of \(name.escaped)"))
            await h.receive(.closedAfterWrite(name))
        }
        await h.settleAndProcess()
        // Three probes that write, three full passes whose copies fail again.
        for _ in 0..<3 {
            guard let next = await h.manager.nextDeadline() else { Issue.record("no probe is planned"); return }
            h.clock.advance(by: h.clock.now.duration(to: next))
            await h.process()
            await h.settleAndProcess()
        }
        #expect(h.mirror.count(.probe) == 3 && h.installs >= 20, "\(h.mirror.count(.probe)) probes, \(h.installs) installs")
        let perFile = lines.withLock { $0.filter { $0.text.contains("No space left") && !$0.text.hasPrefix("the mirror") } }
        let errors = perFile.filter { $0.level == .error }
        #expect(errors.count <= names.count, "\(errors.count) error lines for \(names.count) files over 4 attempts: \(errors.map(\.text))")
        #expect(perFile.count >= 4 * names.count - 1, "every failure is still logged, at debug after the first: \(perFile.count)")
        #expect(Set(await h.manager.snapshot().errors.keys).isSuperset(of: Set(names)), "status keeps each file's error")

        // The mirror turns read-only while the full episode is open: that is news, at error level.
        h.failMirror { op, path in
            op == .install && names.contains(path) ? KeepSyncError(.readOnly, "write: Read-only file system", path: path) : nil
        }
        guard let next = await h.manager.nextDeadline() else { Issue.record("no probe is planned"); return }
        h.clock.advance(by: h.clock.now.duration(to: next))
        await h.process()
        await h.settleAndProcess()
        #expect(lines.withLock { $0.contains { $0.level == .error && $0.text.contains("Read-only") } },
                "a read-only mirror's failures went to debug behind the full episode")
    }

    @Test("as run copies (no retry at once), a file that changes while it is copied waits for the settle, then is copied whole; no error, no backoff")
    func changedDuringCopyIsSettledAgain() async {
        let h = ManagerHarness(changedCopyRetries: 0)
        await h.fullSync()
        let busy = Self.p("busy")
        // A writer at work: the file changes under the first copy only.
        let writes = h.overtakeCopies(of: busy) { $0 == 0 ? Self.b("version 2, written during the copy") : nil }
        h.source.writeFile(busy, Self.b("version 1"))
        let installs = h.installs
        await h.receive(.closedAfterWrite(busy))
        await h.process()
        #expect(h.installs == installs + 1, "one attempt, none more at once: \(h.installs - installs)")
        #expect(h.mirror.node(busy) == nil, "nothing installed from a copy the writer overtook")
        #expect(await h.manager.snapshot().errors.isEmpty)
        #expect(await h.manager.snapshot().pending == 1, "it waits again")
        await h.settleAndProcess()
        #expect(h.mirror.node(busy)?.content == Self.b("version 2, written during the copy"))
        #expect(h.installs == installs + 2 && writes() == 2)
        h.expectMirrorEqualsSource()
    }

    @Test("a file that changes during every copy is settled again three times, then shown as failing and retried with backoff, not copied every settle")
    func neverStableFileFailsAfterThreeSettles() async {
        let h = ManagerHarness(changedCopyRetries: 0)
        await h.fullSync()
        let busy = Self.p("busy")
        h.overtakeCopies(of: busy) { Self.b("version \($0 + 2)") }
        h.source.writeFile(busy, Self.b("version 1"))
        let installs = h.installs
        await h.receive(.closedAfterWrite(busy))
        await h.process()
        for _ in 0..<3 {
            #expect(await h.manager.snapshot().errors.isEmpty)
            await h.settleAndProcess()
        }
        #expect(h.installs == installs + 4, "\(h.installs - installs) copies")
        #expect(await h.manager.snapshot().errors[busy]?.contains("changed during copy") == true)
        // Failing now: its retry waits for the backoff, not for a settle.
        await h.settleAndProcess()
        await h.settleAndProcess()
        #expect(h.installs == installs + 4, "copied again within two settles of failing")
        h.failMirror(nil)
        h.clock.advance(by: .seconds(60))
        await h.process()
        await h.settleAndProcess()
        #expect(await h.manager.snapshot().errors.isEmpty)
        h.expectMirrorEqualsSource()
    }

    @Test("a close-after-write that comes while a copy is overtaken by its writer has the file copied at once, not after a settle", .timeLimit(.minutes(1)))
    func closeDuringAnOvertakenCopyIsNotDelayed() async {
        let held = HeldCopies()
        let h = ManagerHarness(executor: held.executor, changedCopyRetries: 0)
        await h.fullSync()
        let file = Self.p("doc.txt")
        h.overtakeCopies(of: file) { $0 == 0 ? Self.b("version 2, the writer's last") : nil }
        h.source.writeFile(file, Self.b("version 1"))
        await h.receive(.closedAfterWrite(file))
        await h.process()
        #expect(held.count == 1)
        // The writer finishes while the copy runs: its close comes during it.
        await h.receive(.closedAfterWrite(file))
        #expect(held.runAll() == 1)
        #expect(await eventually(every: .zero) { await h.manager.nextDeadline() != nil }, "not queued again")
        #expect(await h.manager.nextDeadline() == h.clock.now, "due at once, as its close asks")
        await h.process()
        #expect(held.runAll() == 1)
        #expect(await eventually(every: .zero) { h.mirror.node(file)?.content == Self.b("version 2, the writer's last") })
        #expect(await h.manager.snapshot().errors.isEmpty)
    }

    @Test("a failed path's error goes when the path is deleted")
    func failedCopyClearedByDeletion() async {
        let h = ManagerHarness()
        await h.fullSync()
        let full = Self.p("big.bin")
        h.failMirror { op, path in op == .install && path == full ? KeepSyncError(.noSpace, "no space", path: path) : nil }
        h.source.writeFile(full, Self.b("data"))
        await h.receive(.closedAfterWrite(full))
        await h.process()
        #expect(await h.manager.snapshot().errors[full] != nil)

        h.source.delete(full)
        await h.receive(.removed(full))
        await h.settleAndProcess()
        // The mirror's own entry goes with the next write that lands (the probe).
        h.clock.advance(by: .seconds(1))
        await h.process()
        #expect(await h.manager.snapshot().errors == [:])
        h.expectMirrorEqualsSource()
    }

    @Test("a full mirror is probed with a growing backoff, never per file, and a probe that writes resyncs everything that failed")
    func fullMirrorIsProbedThenResynced() async {
        let h = ManagerHarness()
        await h.fullSync()
        h.failMirror { op, path in
            [.install, .makeDirectory, .probe].contains(op) ? KeepSyncError(.noSpace, "No space left on device", path: path) : nil
        }
        h.source.makeDirectory(Self.p("d"))
        h.source.writeFile(Self.p("d/f"), Self.b("in a new directory"))
        h.source.writeFile(Self.p("a.txt"), Self.b("a"))
        await h.receive(.changed(Self.p("d")), .closedAfterWrite(Self.p("a.txt")))
        await h.settleAndProcess()
        #expect(await h.manager.snapshot().errors[.root]?.hasPrefix("the mirror is full") == true)
        #expect(await h.manager.snapshot().pending == 0, "failed paths are not pending: READY and idle still come")

        // Probes at +0.25 s, then +0.5 s, +1 s: each one write attempt, no per-file retries.
        var gaps: [Duration] = []
        var last = h.clock.now
        for _ in 0..<3 {
            let next = await h.manager.nextDeadline()
            guard let next else { Issue.record("no probe is planned"); return }
            gaps.append(last.duration(to: next))
            h.clock.advance(by: last.duration(to: next))
            last = next
            let installs = h.installs
            await h.process()
            #expect(h.installs == installs, "a failed probe copied files")
        }
        #expect(h.mirror.count(.probe) == 3)
        #expect(gaps[1] > gaps[0] && gaps[2] > gaps[1], "backoff does not grow: \(gaps)")

        // Space is back: the next probe writes and a full resync copies what failed.
        h.failMirror(nil)
        if let next = await h.manager.nextDeadline() { h.clock.advance(by: h.clock.now.duration(to: next)) }
        await h.process()
        await h.process()
        #expect(await h.manager.snapshot().errors == [:])
        h.expectMirrorEqualsSource()
    }

    @Test("a path that failed (EIO) is tried again on its own after a second, with no new event")
    func failedPathIsRetried() async {
        let h = ManagerHarness()
        await h.fullSync()
        let file = Self.p("f.txt")
        let failures = Mutex(2)
        h.failMirror { op, path in
            guard op == .install, path == file else { return nil }
            return failures.withLock { n in
                defer { n -= 1 }
                return n > 0 ? KeepSyncError(.io, "fsync: Input/output error", path: path) : nil
            }
        }
        h.source.writeFile(file, Self.b("data"))
        await h.receive(.closedAfterWrite(file))
        await h.process()
        #expect(await h.manager.snapshot().errors[file] != nil)
        #expect(await h.manager.nextDeadline() == h.clock.now.advanced(by: .seconds(1)))
        h.clock.advance(by: .seconds(1))
        await h.process()
        #expect(await h.manager.snapshot().errors[file] != nil)
        #expect(await h.manager.nextDeadline() == h.clock.now.advanced(by: .seconds(2)), "the second wait doubles")
        h.clock.advance(by: .seconds(2))
        await h.process()
        #expect(await h.manager.snapshot().errors == [:])
        #expect(await h.manager.nextDeadline() == nil, "nothing is retried once the path synced")
        h.expectMirrorEqualsSource()
    }

    @Test("a failed path keeps its status error while it is tried again, on its own or in a full pass, until a copy succeeds")
    func errorStaysWhileRetried() async {
        let copies = HeldCopies()
        let h = ManagerHarness(executor: copies.executor)
        await h.fullSync()
        let file = Self.p("f.txt")
        let failing = Mutex(true)
        h.failMirror { op, path in
            guard op == .install, path == file, failing.withLock({ $0 }) else { return nil }
            return KeepSyncError(.permissionDenied, "open: Permission denied", path: path)
        }
        h.source.writeFile(file, Self.b("data"))
        await h.receive(.closedAfterWrite(file))
        await h.settleAndProcess()
        #expect(copies.runAll() == 1)
        #expect(await eventually(every: .zero) { await h.manager.snapshot().errors[file] != nil })

        // The retry after a second: its copy is held, and the error must still show.
        h.clock.advance(by: .seconds(1))
        await h.process()
        #expect(copies.count == 1, "the retry's copy is handed over")
        #expect(await h.manager.snapshot().errors[file] != nil, "the error vanished while the retry runs")
        copies.runAll()
        #expect(await eventually(every: .zero) { await h.manager.snapshot().pending == 0 })
        #expect(await h.manager.snapshot().errors[file] != nil)

        // A full pass re-plans the copy: the error stays until that copy ends.
        await h.fullSync()
        #expect(copies.count == 1)
        #expect(await h.manager.snapshot().errors[file] != nil, "a full pass dropped the error of a copy it queued")
        failing.withLock { $0 = false }
        copies.runAll()
        #expect(await eventually(every: .zero) { await h.manager.snapshot().errors.isEmpty })
        await h.process()
        h.expectMirrorEqualsSource()
    }

    @Test("a chmod or touch through one name of a hard-linked file reaches its other names live", arguments: ["chmod", "touch"])
    func attributeChangeThroughOneLink(change: String) async {
        let h = ManagerHarness()
        let a = Self.p("x/a"), b = Self.p("y/b"), c = Self.p("c")
        h.source.makeDirectory(Self.p("x"))
        h.source.makeDirectory(Self.p("y"))
        h.source.writeFile(a, Self.b("one"), mode: 0o640)
        h.source.hardLink(a, at: b)
        h.source.hardLink(a, at: c)
        await h.fullSync()
        h.expectMirrorEqualsSource()
        let installs = h.installs
        h.source.modify(a) { n in
            if change == "chmod" { n.mode = 0o700 } else { n.mtime = Timespec(seconds: 1_700_000_000, nanoseconds: 5) }
        }
        // inotify reports IN_ATTRIB in the directory of the name used, only.
        await h.receive(.changed(a))
        for _ in 0..<3 { await h.settleAndProcess() }
        h.expectMirrorEqualsSource()
        #expect(h.mirror.node(b)?.mode == h.source.node(a)?.mode && h.mirror.node(c)?.mtime == h.source.node(a)?.mtime)
        #expect(await h.manager.isIdle)
        if change == "chmod" { #expect(h.installs == installs, "a mode change copies nothing") }
    }

    @Test("a file written through one of its hard links is queued under its other names once the copies end, or after the max delay while they go on")
    func otherLinksQueuedOnceCopiesEnd() async {
        let copies = HeldCopies()
        let h = ManagerHarness(executor: copies.executor)
        let a = Self.p("x/a"), b = Self.p("y/b"), big = Self.p("big")
        h.source.makeDirectory(Self.p("x"))
        h.source.makeDirectory(Self.p("y"))
        h.source.writeFile(a, Self.b("one"))
        h.source.hardLink(a, at: b)
        // Copies one path that was written: runs its held copy and waits for its result.
        func copied(_ count: Int) async -> Bool {
            await eventually(every: .zero) { await h.manager.snapshot().copiedFiles == count }
        }
        await h.fullSync()
        copies.runAll()
        #expect(await copied(2))
        await h.process()
        #expect(copies.count == 0, "nothing is left to copy after the first pass")

        // Idle: once a's copy ends, b is queued and copied after the settle time.
        h.source.writeFile(a, Self.b("two, longer"))
        await h.receive(.closedAfterWrite(a))
        await h.settleAndProcess()
        #expect(copies.runAll() == 1)
        #expect(await copied(3))
        await h.settleAndProcess()
        #expect(copies.count == 1, "b, written through a, was not queued")
        copies.runAll()
        #expect(await copied(4))
        #expect(h.mirror.node(b)?.content == Self.b("two, longer"))

        // Busy: while big's copy runs, b waits for the max delay, then goes.
        h.source.writeFile(a, Self.b("three, longer still"))
        await h.receive(.closedAfterWrite(a))
        await h.settleAndProcess()
        h.source.writeFile(big, Self.b("big"))
        await h.receive(.closedAfterWrite(big))
        await h.settleAndProcess()
        #expect(copies.count == 2)
        copies.runFirst()
        #expect(await copied(5))
        await h.settleAndProcess()
        #expect(copies.count == 1, "b was looked for before the max delay while big's copy runs")
        h.clock.advance(by: ManagerHarness.maxDelay)
        await h.process()
        await h.settleAndProcess()
        #expect(copies.count == 2, "b was not queued after the max delay")
        copies.runAll()
        #expect(await copied(7))
        // b's copy queues a for a look, which finds nothing to copy.
        await h.settleAndProcess()
        #expect(copies.count == 0)
        #expect(await eventually(every: .zero) { await h.manager.isIdle })
        h.expectMirrorEqualsSource()
    }

    // MARK: Excludes

    static func skipOptions() throws -> SyncOptions {
        SyncOptions(excludes: try ExcludeMatcher(patterns: [Array("skip/".utf8)]))
    }

    /// A source with `skip/` (excluded) and a mirror whose `skip/` holds something of its own.
    static func excludedHarness() async throws -> ManagerHarness {
        let h = ManagerHarness(options: try skipOptions())
        h.source.writeFile(p("keep.txt"), b("keep"))
        h.source.makeDirectory(p("skip"))
        h.source.writeFile(p("skip/a.txt"), b("excluded"))
        h.mirror.makeDirectory(p("skip"), mode: 0o755, mtime: nil)
        h.mirror.writeFile(p("skip/own.txt"), b("the mirror's own"))
        await h.fullSync()
        #expect(h.mirror.node(p("skip/a.txt")) == nil)
        #expect(h.mirror.node(p("skip/own.txt")) != nil)
        h.mirror.resetCounts()
        return h
    }

    static let mirrorWrites: [InMemoryTree.Operation] = [.install, .makeDirectory, .makeSymlink, .remove, .rename, .setAttributes]

    @Test("events below an excluded directory do nothing")
    func eventsBelowExcludedPath() async throws {
        let h = try await Self.excludedHarness()
        let before = h.mirror.nodes

        h.source.writeFile(Self.p("skip/a.txt"), Self.b("changed"))
        h.source.writeFile(Self.p("skip/new.txt"), Self.b("new"))
        try h.source.rename(Self.p("skip/a.txt"), to: Self.p("skip/b.txt"))
        await h.receive(.changed(Self.p("skip/a.txt")), .closedAfterWrite(Self.p("skip/new.txt")),
                        .moved(from: Self.p("skip/a.txt"), to: Self.p("skip/b.txt")), .removed(Self.p("skip/own.txt")))
        #expect(await h.manager.snapshot().pending == 0)
        #expect(await h.manager.nextDeadline() == nil)
        await h.process()
        await h.settleAndProcess()

        for op in Self.mirrorWrites { #expect(h.mirror.count(op) == 0, "mirror \(op.rawValue)") }
        #expect(h.mirror.nodes == before)
    }

    @Test("events naming an excluded directory itself leave it alone", arguments: ["changed", "removed", "closedAfterWrite"])
    func eventsOnExcludedDirectory(_ kind: String) async throws {
        let h = try await Self.excludedHarness()
        let before = h.mirror.nodes
        let skip = Self.p("skip")
        switch kind {
        case "changed": await h.receive(.changed(skip))
        case "removed":
            h.source.delete(skip)
            await h.receive(.removed(skip))
        default: await h.receive(.closedAfterWrite(skip))
        }
        await h.process()
        await h.settleAndProcess()

        #expect(h.mirror.node(Self.p("skip/own.txt")) != nil, "removed what the mirror holds under an excluded path")
        #expect(h.mirror.node(Self.p("skip/a.txt")) == nil, "copied an excluded path")
        for op in [InMemoryTree.Operation.install, .remove, .makeDirectory] {
            #expect(h.mirror.count(op) == 0, "mirror \(op.rawValue)")
        }
        func under(_ nodes: [RelativePath: InMemoryTree.Node]) -> [String] {
            nodes.filter { $0.key.isWithin(skip) }.map { "\($0.key.escaped) inode \($0.value.inode)" }.sorted()
        }
        #expect(under(h.mirror.nodes) == under(before))
    }

    @Test("a file moved out of an excluded directory is copied to its new place")
    func moveOutOfExcludedDirectory() async throws {
        let h = try await Self.excludedHarness()
        try h.source.rename(Self.p("skip/a.txt"), to: Self.p("a.txt"))
        await h.receive(.moved(from: Self.p("skip/a.txt"), to: Self.p("a.txt")))
        await h.settleAndProcess()
        #expect(h.mirror.node(Self.p("a.txt"))?.content == Self.b("excluded"))
        #expect(h.mirror.node(Self.p("skip/own.txt")) != nil)
        h.expectMirrorEqualsSource(ignoring: { $0.isWithin(Self.p("skip")) })
    }

    @Test("a file moved into an excluded directory leaves the mirror, and the excluded directory is untouched")
    func moveIntoExcludedDirectory() async throws {
        let h = try await Self.excludedHarness()
        try h.source.rename(Self.p("keep.txt"), to: Self.p("skip/keep.txt"))
        await h.receive(.moved(from: Self.p("keep.txt"), to: Self.p("skip/keep.txt")))
        await h.settleAndProcess()
        #expect(h.mirror.node(Self.p("keep.txt")) == nil)
        #expect(h.mirror.node(Self.p("skip/keep.txt")) == nil)
        #expect(h.mirror.node(Self.p("skip/own.txt")) != nil)
        #expect(h.mirror.count(.rename) == 0)
        h.expectMirrorEqualsSource(ignoring: { $0.isWithin(Self.p("skip")) })
    }

    // MARK: Directories

    @Test("a directory's mtime in the mirror equals the source's after files were added to it")
    func parentDirectoryMtime() async throws {
        let h = ManagerHarness()
        h.source.makeDirectory(Self.p("d"))
        h.source.writeFile(Self.p("d/old.txt"), Self.b("old"))
        await h.fullSync()
        h.expectMirrorEqualsSource()

        h.source.writeFile(Self.p("d/new1.txt"), Self.b("one"))
        await h.receive(.changed(Self.p("d/new1.txt")))
        h.clock.advance(by: .milliseconds(5))
        h.source.writeFile(Self.p("d/new2.txt"), Self.b("two"))
        await h.receive(.closedAfterWrite(Self.p("d/new2.txt")))
        await h.process()   // new2 now, new1 later
        #expect(h.mirror.node(Self.p("d"))?.mtime == h.source.node(Self.p("d"))?.mtime)
        await h.settleAndProcess()

        let sourceDir = try #require(h.source.node(Self.p("d")))
        let mirrorDir = try #require(h.mirror.node(Self.p("d")))
        #expect(mirrorDir.mtime == sourceDir.mtime)
        #expect(mirrorDir.mode == sourceDir.mode)
        h.expectMirrorEqualsSource()
    }

    @Test("an event deep inside a new directory tree copies the whole tree")
    func newTreeFromOneEvent() async {
        let h = ManagerHarness()
        await h.fullSync()
        h.source.makeDirectory(Self.p("a"), mode: 0o700, mtime: nil)
        h.source.makeDirectory(Self.p("a/b"))
        h.source.makeDirectory(Self.p("a/b/c"), mode: 0o750, mtime: nil)
        h.source.writeFile(Self.p("a/top.txt"), Self.b("top"))
        h.source.writeFile(Self.p("a/b/c/deep.txt"), Self.b("deep"))
        h.source.makeLink(Self.p("a/b/link"), to: Self.b("c/deep.txt"))
        await h.receive(.closedAfterWrite(Self.p("a/b/c/deep.txt")))
        await h.process()
        h.expectMirrorEqualsSource()
        #expect(await h.manager.snapshot().errors == [:])
    }

    // MARK: Queue introspection

    @Test("pending counts queued paths and the next deadline is nil when idle")
    func pendingAndDeadline() async {
        let h = ManagerHarness()
        #expect(await h.manager.nextDeadline() == nil)
        await h.manager.requestFullResync()
        #expect(await h.manager.nextDeadline() == h.clock.now, "a requested full resync is due now")
        await h.process()
        #expect(await h.manager.nextDeadline() == nil)
        #expect(await h.manager.snapshot().pending == 0)

        let t0 = h.clock.now
        for name in ["a", "b", "c"] {
            h.source.writeFile(Self.p(name), Self.b(name))
            await h.receive(.changed(Self.p(name)))
        }
        await h.receive(.changed(Self.p("a")))
        #expect(await h.manager.snapshot().pending == 3)
        #expect(await h.manager.nextDeadline() == t0.advanced(by: ManagerHarness.settle))
        #expect(await h.manager.isIdle == false)

        await h.settleAndProcess()
        #expect(await h.manager.snapshot().pending == 0)
        #expect(await h.manager.nextDeadline() == nil)
        #expect(await h.manager.isIdle)
        let snapshot = await h.manager.snapshot()
        #expect(snapshot.files == 3)
        #expect(snapshot.bytes == 3)
        h.expectMirrorEqualsSource()
    }

    // MARK: Driver loop

    @Test("the run loop copies a change once the clock passes its settle time, and stops", .timeLimit(.minutes(1)))
    func runLoop() async {
        let h = ManagerHarness()
        h.source.writeFile(Self.p("start.txt"), Self.b("start"))
        let manager = h.manager
        await manager.requestFullResync()
        let stopped = Flag()
        Task {
            await manager.run()
            stopped.set()
        }
        #expect(await h.waitUntilIdle(), "the initial full resync did not finish")
        #expect(h.mirror.node(Self.p("start.txt")) != nil)

        h.source.writeFile(Self.p("live.txt"), Self.b("live"))
        await h.receive(.changed(Self.p("live.txt")))
        #expect(h.mirror.node(Self.p("live.txt")) == nil)
        h.clock.advance(by: ManagerHarness.settle)
        #expect(await h.waitUntilIdle(), "the change was not processed after the settle time")
        #expect(h.mirror.node(Self.p("live.txt"))?.content == Self.b("live"))

        await manager.stop()
        #expect(await eventually(every: .zero) { stopped.isSet }, "run() did not return after stop()")
        h.expectMirrorEqualsSource()
    }

    @Test("with a verify interval, a full pass runs that long after the last one and repairs what changed in the mirror behind the agent's back; one that finds nothing is logged at debug level")
    func periodicVerifyRepairsDrift() async {
        let lines = Mutex<[(level: LogLevel, text: String)]>([])
        let logger = Logger(level: .debug) { level, text in lines.withLock { $0.append((level, text)) } }
        let h = ManagerHarness(verifyInterval: .seconds(60), logger: logger)
        let a = Self.p("a"), b = Self.p("d/b")
        h.source.writeFile(a, Self.b("one"))
        h.source.makeDirectory(Self.p("d"))
        h.source.writeFile(b, Self.b("two"), mode: 0o640)
        await h.fullSync()
        h.expectMirrorEqualsSource()
        #expect(await h.manager.nextDeadline() == h.clock.now.advanced(by: .seconds(60)))
        // Behind the agent's back: no event comes.
        try? h.mirror.remove(a)
        try? h.mirror.setAttributes(b, mode: 0o777, mtime: nil)
        h.clock.advance(by: .seconds(59))
        await h.process()
        let drift = h.differences()
        #expect(drift.contains("+ a (missing in mirror)") && drift.contains { $0.hasPrefix("~ d/b: mode") },
                "nothing is repaired before the interval has passed: \(drift)")
        h.clock.advance(by: .seconds(1))
        await h.process()
        h.expectMirrorEqualsSource()
        #expect(await h.manager.snapshot().fullPasses == 2)
        let repaired = lines.withLock { $0.filter { $0.text.hasPrefix("verify:") } }
        #expect(repaired.map(\.level) == [.info] && repaired.first?.text.contains("1 file to copy") == true
                    // d/b's mode; the root's mtime waits for the copy of a (`deferredFinishes`).
                    && repaired.first?.text.contains("1 mode or mtime set") == true
                    && repaired.first?.text.hasSuffix(" in 0 ms") == true, "\(repaired)")
        // Nothing changed since: the next verify only reads metadata, logged at debug.
        lines.withLock { $0.removeAll() }
        let installs = h.installs
        h.clock.advance(by: .seconds(60))
        await h.process()
        #expect(await h.manager.snapshot().fullPasses == 3 && h.installs == installs)
        let quiet = lines.withLock { $0.filter { $0.text.hasPrefix("verify:") } }
        #expect(quiet.map(\.level) == [.debug] && quiet.first?.text.contains("nothing to repair") == true, "\(quiet)")
    }

    @Test("without a verify interval nothing is due after a full pass")
    func noPeriodicVerify() async {
        let h = ManagerHarness()
        h.source.writeFile(Self.p("a"), Self.b("one"))
        await h.fullSync()
        #expect(await h.manager.nextDeadline() == nil)
    }

    @Test("a hard-linked file written through one name that goes away before its copy still reaches its other names",
          arguments: ["rm the name", "rm -r its directory", "replace the name by a directory"])
    func linkedWriteThenNameGone(how: String) async {
        let h = ManagerHarness()
        // In directories of their own: a pass over b's directory or its parent meets no a.
        let a = Self.p("y/a"), x = Self.p("x"), b = Self.p("x/b")
        h.source.makeDirectory(x)
        h.source.makeDirectory(Self.p("y"))
        h.source.writeFile(b, Self.b("one"))
        h.source.hardLink(b, at: a)
        await h.fullSync()
        h.expectMirrorEqualsSource()
        // Written through b: inotify names b only.
        h.source.writeFile(b, Self.b("two two"))
        await h.receive(.changed(b), .closedAfterWrite(b))
        switch how {
        case "rm the name":
            h.source.delete(b)
            await h.receive(.removed(b))
        case "rm -r its directory":
            h.source.delete(x)
            await h.receive(.removed(b), .removed(x))
        default:
            h.source.delete(b)
            h.source.makeDirectory(b)
            await h.receive(.removed(b), .changed(b))
        }
        #expect(h.source.node(a)?.content == Self.b("two two"))
        for _ in 0..<3 { await h.settleAndProcess() }
        h.expectMirrorEqualsSource()
    }
}
