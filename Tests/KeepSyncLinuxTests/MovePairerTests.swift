import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// Pairing of MOVED_FROM and MOVED_TO by cookie, driven by a manual clock over a watch
/// tree of plain numbers: no inotify, no sleeping.
@Suite("MovePairer")
struct MovePairerTests {
    typealias Released = WatchTreeTests.Released

    let clock = ManualClock()
    let released = Released()
    let tree: WatchTree
    var pairer = MovePairer<ManualClock.Instant>(window: .milliseconds(5))

    /// root (wd 1): a (2) holding b (3), and d (5); plus a file "f" (no node).
    init() {
        tree = WatchTreeTests.sample(released)
        if let b = tree.node(for: 3), let c = b.child(Array("c".utf8)) { tree.removeSubtree(c) }
        released.wds = []
    }

    static func p(_ s: String) -> RelativePath { RelativePath(s) }
    static func n(_ s: String) -> [UInt8] { Array(s.utf8) }

    mutating func departed(_ cookie: UInt32, _ name: String, from parent: WatchNode? = nil, isDirectory: Bool = false,
                           excluded: Bool = false, read: Int = 1) {
        let parent = parent ?? tree.root
        pairer.departed(cookie: cookie, name: Self.n(name), from: parent, path: parent.path.appending(Self.n(name)),
                        isDirectory: isDirectory, excluded: excluded, readIndex: read, now: clock.now)
    }

    mutating func arrived(_ cookie: UInt32, _ name: String, in parent: WatchNode? = nil, isDirectory: Bool = false,
                          excluded: Bool = false) -> MovePairer<ManualClock.Instant>.Arrival {
        let parent = parent ?? tree.root
        return pairer.arrived(cookie: cookie, name: Self.n(name), in: parent, path: parent.path.appending(Self.n(name)),
                              isDirectory: isDirectory, excluded: excluded, tree: tree)
    }

    @Test("a MOVED_TO within the window pairs with its MOVED_FROM: one move, nothing left waiting")
    mutating func pairWithinWindow() {
        departed(7, "f")
        clock.advance(by: .milliseconds(4))
        let arrival = arrived(7, "g")
        #expect(arrival == .init(events: [.moved(from: Self.p("f"), to: Self.p("g"))]))
        #expect(pairer.isEmpty)
        clock.advance(by: .seconds(1))
        #expect(pairer.expire(at: clock.now, in: tree).isEmpty)
    }

    @Test("an unpaired MOVED_FROM waits exactly its window, then is a removal (a change when excluded)")
    mutating func expiry() {
        departed(7, "f")
        departed(8, "skipped", excluded: true)
        #expect(pairer.nextDeadline == clock.now.advanced(by: .milliseconds(5)))
        clock.advance(by: .milliseconds(4))
        #expect(pairer.expire(at: clock.now, in: tree).isEmpty)
        clock.advance(by: .milliseconds(1))
        #expect(pairer.expire(at: clock.now, in: tree) == [.removed(Self.p("f")), .changed(Self.p("skipped"))])
        #expect(pairer.isEmpty && pairer.nextDeadline == nil)
    }

    @Test("while reading on, only MOVED_FROMs of earlier reads expire: their partner may be in this read")
    mutating func expiryWaitsForTheRead() {
        departed(7, "f", read: 3)
        clock.advance(by: .milliseconds(10))
        #expect(pairer.expire(at: clock.now, readBefore: 3, in: tree).isEmpty)
        #expect(pairer.expire(at: clock.now, readBefore: 4, in: tree) == [.removed(Self.p("f"))])
    }

    @Test("a cookie reused: a late MOVED_TO after its partner expired is a new entry, and a reused cookie pairs afresh")
    mutating func cookieReused() {
        departed(7, "f")
        clock.advance(by: .milliseconds(5))
        #expect(pairer.expire(at: clock.now, in: tree) == [.removed(Self.p("f"))])
        #expect(arrived(7, "g") == .init(events: [.changed(Self.p("g"))]))
        departed(7, "g")
        #expect(arrived(7, "h").events == [.moved(from: Self.p("g"), to: Self.p("h"))])
        departed(7, "h")
        #expect(arrived(7, "i").events == [.moved(from: Self.p("h"), to: Self.p("i"))])
        #expect(pairer.isEmpty)
    }

    @Test("cookie 0 never pairs")
    mutating func cookieZero() {
        departed(0, "f")
        #expect(arrived(0, "g") == .init(events: [.changed(Self.p("g"))]))
        #expect(!pairer.isEmpty)
    }

    @Test("a directory moved out of the tree is removed, and its subtree's watches released")
    mutating func moveOut() throws {
        departed(7, "a", isDirectory: true)
        clock.advance(by: .milliseconds(5))
        #expect(pairer.expire(at: clock.now, in: tree) == [.removed(Self.p("a"))])
        #expect(Set(released.wds) == [2, 3])
        #expect(tree.node(for: 2) == nil && tree.node(for: 3) == nil)
    }

    @Test("a directory moved out, then found elsewhere by a walk before expiry, keeps its watches")
    mutating func moveOutFoundElsewhere() throws {
        departed(7, "a", isDirectory: true)
        let a = try #require(tree.node(for: 2))
        tree.move(a, to: try #require(tree.node(for: 5)), name: Self.n("a"))
        clock.advance(by: .milliseconds(5))
        #expect(pairer.expire(at: clock.now, in: tree) == [.removed(Self.p("a"))])
        #expect(released.wds.isEmpty)
        #expect(tree.path(of: 3) == Self.p("d/a/b"))
    }

    @Test("a move into the tree: a file is a change; a directory is a change to watch and list")
    mutating func moveIn() {
        #expect(arrived(9, "new") == .init(events: [.changed(Self.p("new"))]))
        #expect(arrived(9, "dir", isDirectory: true) == .init(events: [.changed(Self.p("dir"))], newDirectory: true))
        #expect(arrived(9, "skipped", isDirectory: true, excluded: true) == .init(events: [.changed(Self.p("skipped"))]))
    }

    @Test("a directory moved within the tree takes its subtree along: its watches report at the new path")
    mutating func moveDirectory() throws {
        let d = try #require(tree.node(for: 5))
        departed(7, "a", isDirectory: true)
        let arrival = arrived(7, "x", in: d, isDirectory: true)
        #expect(arrival == .init(events: [.moved(from: Self.p("a"), to: Self.p("d/x"))]))
        #expect(tree.path(of: 2) == Self.p("d/x") && tree.path(of: 3) == Self.p("d/x/b"))
        #expect(released.wds.isEmpty)
    }

    @Test("a directory moved over another directory releases the replaced one's watches")
    mutating func moveDirectoryOverAnother() throws {
        departed(7, "a", isDirectory: true)
        _ = arrived(7, "d", isDirectory: true)
        #expect(tree.path(of: 2) == Self.p("d"))
        #expect(released.wds == [5])
    }

    @Test("a directory the tree does not hold, moved within, is to be watched and listed")
    mutating func moveUnknownDirectory() {
        departed(7, "unwatched", isDirectory: true)
        #expect(arrived(7, "there", isDirectory: true).newDirectory)
    }

    @Test("a directory paired below itself means the tree is out of step, and the tree is left alone")
    mutating func moveBelowItself() throws {
        let b = try #require(tree.node(for: 3))
        departed(7, "a", isDirectory: true)
        let arrival = arrived(7, "x", in: b, isDirectory: true)
        #expect(arrival.outOfStep && !arrival.newDirectory)
        #expect(tree.path(of: 2) == Self.p("a") && tree.path(of: 3) == Self.p("a/b"))
    }

    @Test("a move from an excluded name is a change of both; a directory arriving so is to be watched")
    mutating func moveFromExcluded() {
        departed(7, "tmp", isDirectory: true, excluded: true)
        #expect(arrived(7, "kept", isDirectory: true)
            == .init(events: [.changed(Self.p("tmp")), .changed(Self.p("kept"))], newDirectory: true))
    }

    @Test("a move to an excluded name removes the old path and drops the directory's watches")
    mutating func moveToExcluded() {
        departed(7, "a", isDirectory: true)
        #expect(arrived(7, "a.tmp", isDirectory: true, excluded: true).events
            == [.removed(Self.p("a")), .changed(Self.p("a.tmp"))])
        #expect(Set(released.wds) == [2, 3])
    }

    @Test("a later event at or below a waiting source ends its wait first; others keep waiting")
    mutating func supersede() {
        departed(7, "a", isDirectory: true)
        departed(8, "f")
        #expect(pairer.supersede(by: Self.p("ab"), cookie: 9, in: tree).isEmpty)
        #expect(pairer.supersede(by: Self.p("a"), cookie: 7, in: tree).isEmpty)
        #expect(pairer.supersede(by: Self.p("a/new"), cookie: 9, in: tree) == [.removed(Self.p("a"))])
        #expect(arrived(8, "g").events == [.moved(from: Self.p("f"), to: Self.p("g"))])
    }
}
