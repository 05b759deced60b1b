import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// Issue 41: one walk of the source serves every mirror whose pass runs at the same time.
@Suite("Source listings shared by the mirrors' passes")
struct SourceListingsTests {
    static func tree(directories: Int) -> InMemoryTree {
        let tree = InMemoryTree(device: 1)
        for d in 0..<directories {
            tree.makeDirectory(RelativePath("d\(d)"))
            tree.writeFile(RelativePath("d\(d)/f"), [UInt8(d & 0xFF)])
        }
        return tree
    }

    @Test("two passes under way: each directory is listed once, the second pass takes it; a pass that begins later, or outside a pass, lists itself")
    func twoPassesListEachDirectoryOnce() throws {
        let source = Self.tree(directories: 10)
        let listings = SourceListings()
        let a = SharedListingTree(base: source, listings: listings, member: 0)
        let b = SharedListingTree(base: source, listings: listings, member: 1)
        let c = SharedListingTree(base: source, listings: listings, member: 2)
        a.beginListingPass()
        b.beginListingPass()
        let directories = [RelativePath.root] + (0..<10).map { RelativePath("d\($0)") }
        for d in directories { _ = try a.list(d) }
        // A pass begun after those listings must not take them (its manager may have missed
        // a change made before): it lists itself.
        c.beginListingPass()
        for d in directories {
            #expect(try b.list(d).map(\.name).sorted { $0.lexicographicallyPrecedes($1) }
                    == (try source.list(d)).map(\.name).sorted { $0.lexicographicallyPrecedes($1) })
        }
        let listedBeforeC = source.count(.list)
        _ = try c.list(RelativePath("d3"))
        #expect(source.count(.list) == listedBeforeC + 1, "the late pass listed itself")
        #expect(listings.counts.shared == directories.count, "\(listings.counts)")
        a.endListingPass(); b.endListingPass(); c.endListingPass()
        // Outside a pass nothing is shared.
        let before = source.count(.list)
        _ = try a.list(.root)
        _ = try b.list(.root)
        #expect(source.count(.list) == before + 2)
        print("SourceListingsTests: 2 passes over \(directories.count) directories: \(listings.counts.listed) listed, \(listings.counts.shared) taken by the other")
    }

    @Test("a pass that ends takes nothing held for it any more, and what waits for a pass far behind stays within the limit")
    func heldListingsAreBounded() throws {
        let source = Self.tree(directories: 40)
        let listings = SourceListings(limit: 10)
        let a = SharedListingTree(base: source, listings: listings, member: 0)
        let b = SharedListingTree(base: source, listings: listings, member: 1)
        a.beginListingPass()
        b.beginListingPass()
        for d in 0..<40 { _ = try a.list(RelativePath("d\(d)")) }   // one entry each
        let listed = source.count(.list)
        for d in 0..<40 { _ = try b.list(RelativePath("d\(d)")) }
        // Ten were held for b (the limit, in entries); the others it listed itself.
        #expect(source.count(.list) == listed + 30, "\(source.count(.list) - listed) listed again")
        #expect(listings.counts.shared == 10)
        a.endListingPass()
        b.endListingPass()
        a.beginListingPass()
        _ = try a.list(RelativePath("d0"))
        b.beginListingPass()
        let again = source.count(.list)
        _ = try b.list(RelativePath("d0"))
        #expect(source.count(.list) == again + 1, "a listing from before b's pass began is not taken")
    }

    /// Mirror B (member 1) over `source`, synced by a first pass, and A's tree (member 0);
    /// then B's next pass is begun before it runs (as the agent does for a new manager)
    /// and A's pass lists `d0` meanwhile.
    static func listedBeforeBsPass(_ source: InMemoryTree) async throws
        -> (listings: SourceListings, b: SyncManager<ManualClock>, mirror: InMemoryTree) {
        let listings = SourceListings()
        let a = SharedListingTree(base: source, listings: listings, member: 0)
        let mirror = InMemoryTree(device: 2)
        let engine = SyncEngine(source: SharedListingTree(base: source, listings: listings, member: 1), mirror: LocalMirror(mirror),
                                store: InMemoryStore(), records: RecordSet(), options: SyncOptions(maxDeletePercent: 100),
                                recordScheduler: .serialQueue())
        let b = SyncManager(engine: engine, clock: ManualClock(), executor: .inline)
        await b.requestFullResync()
        await Self.process(b)
        listings.begin(1)
        a.beginListingPass()
        _ = try a.list(RelativePath("d0"))
        a.endListingPass()
        return (listings, b, mirror)
    }

    static func process(_ manager: SyncManager<ManualClock>) async {
        await manager.processDue()
        await manager.waitForCopies()
        await manager.drainRecords()
    }

    @Test("a mirror that lost events (an overflow's rescan) lists the source afresh for its pass: a listing made before the loss would keep what it never heard was deleted")
    func aRescanTakesNoListingFromBefore() async throws {
        let source = Self.tree(directories: 2)
        let (listings, b, mirror) = try await Self.listedBeforeBsPass(source)
        #expect(mirror.node(RelativePath("d0/f")) != nil)
        // d0/f goes, and its event is lost in an overflow: B only hears that it must rescan.
        source.delete(RelativePath("d0/f"))
        await b.receive(.rescan(reason: "inotify event queue overflowed"))
        await Self.process(b)
        #expect(mirror.node(RelativePath("d0/f")) == nil, "B's pass took A's listing of d0 from before the loss")
        #expect(listings.counts.shared == 0)
    }

    @Test("a rename a mirror applies before its pass ends its share of what was listed before: that listing's old name would stay in the mirror")
    func anAppliedRenameTakesNoListingFromBefore() async throws {
        let source = Self.tree(directories: 2)
        let (listings, b, mirror) = try await Self.listedBeforeBsPass(source)
        try source.rename(RelativePath("d0/f"), to: RelativePath("d0/g"))
        await b.receive(.moved(from: RelativePath("d0/f"), to: RelativePath("d0/g")))
        await b.requestFullResync()
        await Self.process(b)
        await Self.process(b)
        #expect(mirror.node(RelativePath("d0/f")) == nil, "B's pass took A's listing of d0 from before the rename")
        #expect(mirror.node(RelativePath("d0/g"))?.content == [0])
        #expect(mirror.count(.install) == 2, "renamed in the mirror, not copied again")
        #expect(listings.counts.shared == 0)
    }

    @Test("three mirrors' startup passes over one source list it about once, not three times")
    func theAgentsStartupPassesShareOneWalk() async throws {
        let one = AgentHarness(mirrors: 1)
        let three = AgentHarness(mirrors: 3)
        for h in [one, three] {
            for d in 0..<30 {
                h.host.source.makeDirectory(RelativePath("d\(d)"))
                h.host.source.writeFile(RelativePath("d\(d)/f"), [UInt8(d)])
            }
            h.start()
            try await h.waitUntilReady()
        }
        let single = one.host.source.count(.list), shared = three.host.source.count(.list)
        #expect(three.hosts.allSatisfy { $0.mirror.node(RelativePath("d29/f")) != nil })
        #expect(three.agent.listings.counts.shared > 0)
        // Their passes start together (the agent makes every manager first).
        #expect(Double(shared) <= Double(single) * 1.1 + 2, "three mirrors listed the source \(shared) times, one mirror \(single)")
        #expect(try await one.stop() == .success)
        #expect(try await three.stop() == .success)
        print("SourceListingsTests: startup of 3 mirrors listed \(shared) directories (one mirror: \(single)); \(three.agent.listings.counts.shared) listings taken from another mirror's pass")
    }
}
