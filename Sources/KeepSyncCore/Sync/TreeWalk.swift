/// A walk of source and mirror in progress, kept between `TreeScanner.advance` calls: the
/// directories being walked (their merged listings, one frame each) and the directories
/// left for the end. It holds no records: each call's scanner brings the current ones,
/// so that the engine changes its records between calls without copying them.
struct TreeWalk {
    /// One name of a directory, on either side.
    struct Entry {
        var name: [UInt8]
        var source: FileStat?
        var mirror: FileStat?
    }

    /// A directory being walked.
    struct Frame {
        var path: RelativePath
        var source: FileStat
        /// Its names in walk order, and the next one to visit.
        var entries: [Entry]
        var next = 0
        var cases: TreeScanner.CaseMatching?
        /// Everything below waits for the end of the pass (below a type change that does).
        var waits: Bool
        /// An entry waits or was left for the end: the directory's finish waits too.
        var finishWaits = false
    }

    /// Where the walk starts.
    let scope: RelativePath
    /// With `check`'s collection of the paths below removed directories.
    let collect: Bool
    /// The records' inodes, for a streamed pass: new files and directories that may be
    /// recorded ones renamed, and what they may have left, wait for the end. nil: a scan
    /// that holds nothing back.
    let inodes: RecordedInodes?
    /// New directories moved from a recorded path, and recorded directories replaced by
    /// another, are left for the end (not descended into) instead of copied.
    let holdsDirectories: Bool
    /// Replaced directories already walked (written into): no longer a move's origin.
    let walkedOrigins: Set<RelativePath>
    var frames: [Frame] = []
    var started = false
    var prefetcher: ScanPrefetcher?
    /// Directories left for the end, in walk order: walked after the renames.
    var held: [(path: RelativePath, source: FileStat)] = []

    init(scope: RelativePath, collect: Bool = false, inodes: RecordedInodes? = nil, holdsDirectories: Bool = false,
         walkedOrigins: Set<RelativePath> = []) {
        self.scope = scope
        self.collect = collect
        self.inodes = inodes
        self.holdsDirectories = holdsDirectories && inodes != nil
        self.walkedOrigins = walkedOrigins
    }

    /// True once every directory is walked.
    var isDone: Bool { started && frames.isEmpty }

    /// Stops the listings read ahead.
    func stop() { prefetcher?.stop() }
}

/// The inodes the records hold at the start of a streamed pass, for its walks to know at
/// once which new source objects may be recorded ones renamed: regular files' in a filter
/// of 16 bits a record (two hashes: about 1 new file in 100 is taken for a candidate by
/// mistake, and only waits for the end; 2 MiB and 30 ms for a million records, nothing on
/// a first run), directories' as a sorted list with their slots, made when a new directory
/// first asks.
final class RecordedInodes {
    private let filter: [UInt64]
    private let hadRecords: Bool
    private var directories: [(inode: UInt64, slot: Int)]?

    init(_ table: RecordTable) {
        hadRecords = !table.isEmpty
        guard table.regularFiles > 0 else {
            filter = []
            return
        }
        var words = [UInt64](repeating: 0, count: ((table.regularFiles * 16 + 63) / 64).nextPowerOfTwo)
        let mask = UInt64(words.count * 64 - 1)
        table.forEachInode(ofKind: .regular) { inode in
            let (a, b) = Self.bits(of: inode, mask: mask)
            words[a >> 6] |= 1 << UInt64(a & 63)
            words[b >> 6] |= 1 << UInt64(b & 63)
        }
        filter = words
    }

    /// True when a regular file's record may have had this inode at the start of the pass.
    func mayHoldFile(_ inode: UInt64) -> Bool {
        guard !filter.isEmpty else { return false }
        let (a, b) = Self.bits(of: inode, mask: UInt64(filter.count * 64 - 1))
        return filter[a >> 6] & (1 << UInt64(a & 63)) != 0 && filter[b >> 6] & (1 << UInt64(b & 63)) != 0
    }

    /// The slots of the directory records with this inode.
    func directorySlots(_ inode: UInt64, in table: RecordTable) -> [Int] {
        guard hadRecords else { return [] }
        if directories == nil {
            directories = table.slots(ofKind: .directory).map { ($0.inode, $0.index) }.sorted { $0.inode < $1.inode }
        }
        let list = directories!
        var low = 0, high = list.count
        while low < high {
            let mid = (low + high) / 2
            if list[mid].inode < inode { low = mid + 1 } else { high = mid }
        }
        var out: [Int] = []
        while low < list.count, list[low].inode == inode {
            out.append(list[low].slot)
            low += 1
        }
        return out
    }

    /// Forgets the directories' slots (moves changed them); taken again when next asked.
    func forgetDirectories() { directories = nil }

    /// The filter's two bits for an inode.
    private static func bits(of inode: UInt64, mask: UInt64) -> (Int, Int) {
        let h = (inode &+ 1) &* 0x9E37_79B9_7F4A_7C15
        return (Int((h >> 32) & mask), Int((h ^ (h >> 29) &* 0xBF58_476D_1CE4_E5B9) & mask))
    }
}
