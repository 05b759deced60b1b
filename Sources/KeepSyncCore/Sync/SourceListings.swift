import Dispatch
import Synchronization

/// One walk of the source serves every mirror whose full pass runs at the same time (SPEC
/// "Several mirrors"): a directory listed during one mirror's pass is held for the other
/// mirrors whose passes were under way then, each taking it once instead of listing again;
/// one listed now by one is waited for, not listed twice. Only passes share, and only
/// listings made while the taker's pass ran: its manager was fed the watcher's events from
/// before its pass, so a change after the listing reaches it as an event, as after its own.
/// A pass may be begun before it runs only while its manager takes no event meanwhile; a
/// manager that applies a rename or loses events ends its share (`endListingPass`).
/// Held entries are bounded (`limit`): a mirror far behind (a slow remote) lists alone.
public final class SourceListings: Sendable {
    struct Held {
        var listing: Result<[DirectoryEntry], any Error>
        /// The passes that may still take it.
        var owed: Set<Int>
    }

    struct State {
        /// The mirrors whose full pass runs now.
        var passing: Set<Int> = []
        var held: [RelativePath: Held] = [:]
        var heldEntries = 0
        /// Listings under way, and how many passes wait for each.
        var listing: [RelativePath: (done: DispatchSemaphore, waiting: Int)] = [:]
        var listed = 0
        var shared = 0

        /// Takes `directory`'s listing held for `member`, if any.
        mutating func take(_ directory: RelativePath, for member: Int) -> Result<[DirectoryEntry], any Error>? {
            guard var held = held[directory], held.owed.contains(member) else { return nil }
            held.owed.remove(member)
            if held.owed.isEmpty { drop(directory) } else { self.held[directory] = held }
            shared += 1
            return held.listing
        }

        /// Lets go of what is held for `directory`.
        mutating func drop(_ directory: RelativePath) {
            guard let old = held.removeValue(forKey: directory) else { return }
            heldEntries -= (try? old.listing.get().count) ?? 0
        }
    }

    private let state = Mutex(State())
    /// At most this many entries wait for other mirrors (beyond those a pass waits for now).
    let limit: Int

    /// Listings shared among mirrors, holding at most `limit` entries for those behind.
    public init(limit: Int = 4_096) {
        self.limit = limit
    }

    /// Directories listed from the source during passes, and listings one mirror's pass
    /// took from another's.
    public var counts: (listed: Int, shared: Int) { state.withLock { ($0.listed, $0.shared) } }

    /// Mirror `member`'s full pass begins, or is its manager's next work (a new manager,
    /// not running yet): listings other passes make from now on are held for it.
    func begin(_ member: Int) { state.withLock { _ = $0.passing.insert(member) } }

    /// Mirror `member`'s pass ended: nothing is held for it any more.
    func end(_ member: Int) {
        state.withLock { s in
            s.passing.remove(member)
            for (path, var held) in s.held where held.owed.contains(member) {
                held.owed.remove(member)
                if held.owed.isEmpty { s.drop(path) } else { s.held[path] = held }
            }
        }
    }

    /// `directory`'s entries for mirror `member`: held for it, listed now by another pass
    /// (waited for), or listed from `source` (and held for the other passes).
    func list(_ directory: RelativePath, for member: Int, from source: any FileSystemProviding) throws -> [DirectoryEntry] {
        enum Found { case held(Result<[DirectoryEntry], any Error>), wait(DispatchSemaphore), list(DispatchSemaphore?) }
        while true {
            let found: Found = state.withLock { s in
                guard s.passing.contains(member) else { return .list(nil) }
                if let listing = s.take(directory, for: member) { return .held(listing) }
                if let under = s.listing[directory] {
                    s.listing[directory]?.waiting += 1
                    return .wait(under.done)
                }
                let done = DispatchSemaphore(value: 0)
                s.listing[directory] = (done, 0)
                return .list(done)
            }
            switch found {
            case .held(let listing):
                return try listing.get()
            case .wait(let done):
                // Then it is held for this pass (which was under way when it was listed).
                done.wait()
            case .list(let done):
                let listing = Result { try source.list(directory) }
                guard let done else { return try listing.get() }
                let waiting = state.withLock { s -> Int in
                    s.listed += 1
                    let waiting = s.listing.removeValue(forKey: directory)?.waiting ?? 0
                    let owed = s.passing.subtracting([member])
                    let count = (try? listing.get().count) ?? 0
                    if !owed.isEmpty, waiting > 0 || s.heldEntries + count <= limit {
                        s.drop(directory)
                        s.held[directory] = Held(listing: listing, owed: owed)
                        s.heldEntries += count
                    }
                    return waiting
                }
                for _ in 0..<waiting { done.signal() }
                return try listing.get()
            }
        }
    }
}

/// A source tree whose listings during a full pass go through `SourceListings`, as mirror
/// `member` of the agent.
struct SharedListingTree: FileSystemProviding {
    let base: any FileSystemProviding
    let listings: SourceListings
    let member: Int

    func stat(_ path: RelativePath) throws -> FileStat? { try base.stat(path) }
    func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try listings.list(directory, for: member, from: base) }
    func readLink(_ path: RelativePath) throws -> [UInt8] { try base.readLink(path) }
    func open(_ path: RelativePath) throws -> any SourceFile { try base.open(path) }
    func currentVersion(_ path: RelativePath) throws -> FileStat? { try base.currentVersion(path) }
    func beginListingPass() { listings.begin(member) }
    func endListingPass() { listings.end(member) }
}
