import KeepSyncCore
@testable import KeepSyncLinux
import Testing

/// Issue 17, item 3: the look at directories the watch limit left unwatched, over
/// listings given by the test.
@Suite("UnwatchedPoller")
struct UnwatchedPollerTests {
    static func stamp(_ kind: FileKind, size: UInt64 = 1, mtime: Int64 = 1, inode: UInt64) -> UnwatchedPoller.Stamp {
        UnwatchedPoller.Stamp(FileStat(kind: kind, mode: 0o644, size: size, mtime: Timespec(seconds: mtime, nanoseconds: 0),
                                       ctime: Timespec(seconds: mtime, nanoseconds: 0), device: 1, inode: inode))
    }

    @Test("a new, a rewritten in place, a removed file; a new, a replaced and a gone directory")
    func diff() {
        let path = RelativePath("d/sub")
        let a = Array("a".utf8), b = Array("b".utf8), c = Array("c".utf8), x = Array("x".utf8), y = Array("y".utf8)
        let z = Array("z".utf8), w = Array("w".utf8)
        let before: [[UInt8]: UnwatchedPoller.Stamp] = [
            a: Self.stamp(.regular, inode: 1), b: Self.stamp(.regular, inode: 2),
            x: Self.stamp(.directory, inode: 10), y: Self.stamp(.directory, inode: 11), w: Self.stamp(.directory, inode: 12),
        ]
        var now = before
        now[a] = Self.stamp(.regular, size: 1, mtime: 2, inode: 1)   // written in place: same size, new mtime
        now[b] = nil
        now[c] = Self.stamp(.regular, inode: 3)
        now[x] = Self.stamp(.directory, mtime: 5, inode: 10)        // its entries changed: its own look says what
        now[y] = Self.stamp(.directory, inode: 99)                   // replaced
        now[w] = nil
        now[z] = Self.stamp(.directory, inode: 13)
        let changes = UnwatchedPoller.diff(before, now, in: path)
        #expect(changes == [.changed(path.appending(a)), .removed(path.appending(b)), .changed(path.appending(c)),
                            .directoryGone(w), .directoryGone(y), .newDirectory(y), .newDirectory(z)], "\(changes)")
        #expect(UnwatchedPoller.diff(before, before, in: path).isEmpty)
    }

    @Test("a directory is looked at first when it becomes unwatched; a poll reports only what changed since")
    func polls() {
        let tree = WatchTree(rootWatch: 1, identity: FileIdentity(device: 1, inode: 1), release: { _ in })
        let node = tree.add(Array("d".utf8), under: tree.root, wd: nil, identity: FileIdentity(device: 1, inode: 2))
        var listing: [[UInt8]: UnwatchedPoller.Stamp] = [Array("f".utf8): Self.stamp(.regular, inode: 5)]
        let poller = UnwatchedPoller()
        var looks = 0
        poller.adopt(tree.takeNewlyUnwatched()) { _ in looks += 1; return listing }
        #expect(looks == 1 && poller.count == 1)
        #expect(tree.takeNewlyUnwatched().isEmpty)
        #expect(poller.poll(tree.unwatched) { _ in listing }.isEmpty)
        listing[Array("g".utf8)] = Self.stamp(.regular, inode: 6)
        let found = poller.poll(tree.unwatched) { _ in listing }
        #expect(found.count == 1 && found.first?.node == node && found.first?.changes == [.changed(RelativePath("d/g"))])
        // Watched now: forgotten, never looked at again.
        tree.watched(node, as: 7)
        #expect(poller.poll(tree.unwatched) { _ in Issue.record("looked at a watched directory"); return [:] }.isEmpty)
        #expect(poller.count == 0)
    }

    @Test("a directory whose digest is the last look's is not listed; a changed digest lists it and reports the change")
    func digestsSpareTheListing() {
        let tree = WatchTree(rootWatch: 1, identity: FileIdentity(device: 1, inode: 1), release: { _ in })
        _ = tree.add(Array("d".utf8), under: tree.root, wd: nil, identity: FileIdentity(device: 1, inode: 2))
        var listing: [[UInt8]: UnwatchedPoller.Stamp] = [Array("f".utf8): Self.stamp(.regular, inode: 5),
                                                        Array("g".utf8): Self.stamp(.regular, inode: 6)]
        func digest(_ l: [[UInt8]: UnwatchedPoller.Stamp]) -> UInt64 {
            // In another order than the dictionary's: the digest does not depend on it.
            l.sorted { $0.key.lexicographicallyPrecedes($1.key) }.reversed()
                .reduce(0) { sum, e in sum &+ e.key.withUnsafeBytes { UnwatchedPoller.digest($0, e.value) } }
        }
        let poller = UnwatchedPoller()
        poller.adopt(tree.takeNewlyUnwatched()) { _ in listing }
        var lists = 0
        #expect(poller.poll(tree.unwatched, digest: { _ in digest(listing) }) { _ in lists += 1; return listing }.isEmpty)
        #expect(lists == 0, "unchanged: the digest alone")
        // Written in place: same size, a new mtime.
        listing[Array("g".utf8)] = Self.stamp(.regular, mtime: 2, inode: 6)
        let found = poller.poll(tree.unwatched, digest: { _ in digest(listing) }) { _ in lists += 1; return listing }
        #expect(lists == 1 && found.first?.changes == [.changed(RelativePath("d/g"))], "\(found)")
        #expect(poller.poll(tree.unwatched, digest: { _ in digest(listing) }) { _ in lists += 1; return listing }.isEmpty)
        #expect(lists == 1)
    }
}
