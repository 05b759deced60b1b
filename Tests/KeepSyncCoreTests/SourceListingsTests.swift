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
