/// A walk of source and mirror in progress, kept between `TreeScanner.advance` calls: the
/// directories being walked (their merged listings, one frame each). It holds no records:
/// each call's scanner brings the current ones, so that the records can change between
/// calls without being copied.
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
    }

    /// Where the walk starts.
    let scope: RelativePath
    /// With `check`'s collection of the paths below removed directories.
    let collect: Bool
    var frames: [Frame] = []
    var started = false
    var prefetcher: ScanPrefetcher?

    init(scope: RelativePath, collect: Bool = false) {
        self.scope = scope
        self.collect = collect
    }

    /// True once every directory is walked.
    var isDone: Bool { started && frames.isEmpty }

    /// Stops the listings read ahead.
    func stop() { prefetcher?.stop() }
}
