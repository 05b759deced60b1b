import KeepSyncTestSupport
import Testing
@testable import KeepSyncCore

/// The hard-link bookkeeping alone: the last name per file, the wait's start, taking out.
@Suite("HardLinkTracker")
struct HardLinkTrackerTests {
    static func at(_ ms: Int) -> Duration { .milliseconds(ms) }

    @Test("keeps the name changed last per file, and since when the first one waits")
    func lastNameAndSince() {
        var t = HardLinkTracker()
        let one = FileIdentity(device: 1, inode: 10), two = FileIdentity(device: 1, inode: 20)
        t.noteChange(one, at: RelativePath("a"), now: Self.at(5))
        t.noteChange(one, at: RelativePath("b"), now: Self.at(7))
        t.noteChange(two, at: RelativePath("c"), now: Self.at(9))
        #expect(t.since == Self.at(5))
        #expect(t.takeChanged() == [one: RelativePath("b"), two: RelativePath("c")])
        #expect(t.changed.isEmpty && t.since == nil)
        t.noteChange(two, at: RelativePath("c"), now: Self.at(30))
        #expect(t.since == Self.at(30), "a new wait starts after taking out")
    }
}
