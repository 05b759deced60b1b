/// The full pass, streamed: the tree is walked a few steps at a time and what is ready is
/// applied at once, so that a pass holds the directories being walked, not one step per
/// path. What needs the whole picture waits for the end: deletions (the brake decides over
/// all of them), new files that may be recorded ones renamed and what they may have left,
/// new or replaced directories that may be recorded ones moved (moved first, then walked),
/// and the finishes of the directories holding any of these.
extension SyncEngine {
    /// Ready steps a walk hands over at a time.
    static let walkChunk = 256
    /// On a mirror that batches entries: each chunk's directories, links and finishes are a
    /// round trip each (a new ssh session; 256 steps a chunk spent 214 sessions on a
    /// 20,000-file pass, 8,192 about 90 in all).
    static let batchingWalkChunk = 8192
    /// Rounds of directory moves at the end of a pass (a move found inside a moved
    /// directory takes another); the last round's new directories are copied.
    static let moveRounds = 4

    /// A full pass over the tree: walks it and applies its steps as they come, then what
    /// waited, in order; returns the scan's totals (its `steps`: those that waited) and what
    /// was done. `deferCopies` and `brake` as for `apply`. Throws, having changed nothing,
    /// when the source root or the mirror (`beginPass`) cannot be read.
    public func fullPass(deferCopies: Bool = false, brake: MassDeleteBrake? = nil) throws -> (scan: SyncScan, summary: SyncSummary) {
        // The mirror may read its whole tree at once (a remote: one round trip).
        source.beginListingPass()
        defer { source.endListingPass() }
        try mirror.beginPass()
        defer { mirror.endPass() }
        var pass = PassApplication(brake: brake ?? MassDeleteBrake(options), defersCopies: deferCopies)
        // Nothing walked later changes the entries of a directory finished on the way.
        pass.remembersFinishes = false
        pass.writes = BitSet()
        var scan = SyncScan(scope: .root)
        let inodes = RecordedInodes(records.table)
        let held = try walk(TreeWalk(scope: .root, inodes: inodes, holdsDirectories: true), &scan, &pass)
        let moved = walkLeftDirectories(held, inodes, &scan, &pass)
        if let writes = pass.writes { scan.visitedRecords.formUnion(writes) }
        scanner().settle(&scan, moved: moved)
        noteSpecial(scan)
        noteSkipped(scan)
        pass.progress.planned = scan.plannedCopies
        pass.progress.planComplete = true
        pass.summary.skippedUnholdable = scan.unholdable.count
        for error in scan.unreadable { report(error, path: error.path ?? scan.scope, into: &pass.summary) }
        pass.hold = pass.brake.holds(scan)
        pass.remembersFinishes = true
        applyAll(Self.ordered(scan), &pass)
        close(&pass, staleRecords: scan.staleRecords)
        return (scan, pass.summary)
    }

    /// Walks the directories a walk left for the end, in rounds: the moves found so far are
    /// made, then the directories are walked (a move found inside one takes another round;
    /// the last round holds nothing back). Returns the moves made.
    private func walkLeftDirectories(_ left: [(path: RelativePath, source: FileStat)], _ inodes: RecordedInodes,
                                     _ scan: inout SyncScan, _ pass: inout PassApplication) -> [Move] {
        var held = left, moved: [Move] = [], tried = 0, round = 0, walkedOrigins: Set<RelativePath> = []
        while !held.isEmpty {
            round += 1
            moved += moveDirectories(Array(scan.directoryRenames[tried...]), &pass.summary)
            tried = scan.directoryRenames.count
            inodes.forgetDirectories()
            let last = round >= Self.moveRounds
            var next: [(path: RelativePath, source: FileStat)] = []
            // Moved directories first: walking them may find moves out of the replaced ones.
            let targets = Set(scan.directoryRenames.map(\.to))
            for h in held.filter({ targets.contains($0.path) }) + held.filter({ !targets.contains($0.path) }) {
                if !targets.contains(h.path) {
                    // A replaced directory is written into when walked: a move found from it
                    // is made first, and none is taken from it after.
                    if !last, scan.directoryRenames[tried...].contains(where: { $0.from == h.path }) {
                        next.append(h)
                        continue
                    }
                    walkedOrigins.insert(h.path)
                }
                let start = TreeWalk(scope: h.path, inodes: inodes, holdsDirectories: !last, walkedOrigins: walkedOrigins)
                do { next += try walk(start, &scan, &pass) } catch {
                    report(error, path: h.path, into: &pass.summary)
                    pass.blocked.append(h.path)
                }
            }
            held = next
        }
        return moved
    }

    /// Walks to the end, applying each step as it is ready; returns the directories left
    /// for the end.
    private func walk(_ start: TreeWalk, _ scan: inout SyncScan,
                      _ pass: inout PassApplication) throws -> [(path: RelativePath, source: FileStat)] {
        var walk = start
        defer { walk.stop() }
        var ready: [SyncScan.Step] = []
        // Growing from `walkChunk` on a batching mirror: the first copies start early.
        var chunk = Self.walkChunk
        while !walk.isDone {
            // A scanner per call: it holds the records only while it plans.
            try scanner().advance(&walk, &scan, into: &ready, limit: chunk)
            if mirror.batchesEntries { chunk = min(chunk * 2, Self.batchingWalkChunk) }
            pass.progress.planned = scan.plannedCopies
            applyAll(ready, &pass)
            ready.removeAll(keepingCapacity: true)
        }
        return walk.held
    }

    /// Makes the directory moves a walk found, shallowest first, with their records; one
    /// that cannot be made is logged, and its new directory is then walked and copied.
    private func moveDirectories(_ moves: [Move], _ summary: inout SyncSummary) -> [Move] {
        var done: [Move] = []
        // Moved records are walked again under their new path, not written by this pass
        // (`applyRename` counts no write).
        for pair in moves.sorted(by: { $0.to.depth < $1.to.depth }) {
            var move = pair
            for d in done { if let r = move.from.rebased(from: d.from, to: d.to) { move.from = r } }
            guard move.from != move.to, !move.to.isWithin(move.from) else { continue }
            do {
                try makeMissingParents(of: move.to)
                guard try applyRename(from: move.from, to: move.to) else { continue }
                done.append(move)
                logger.info("renamed \(move.from.escaped) to \(move.to.escaped)")
            } catch {
                logger.debug("\(move.from.escaped) -> \(move.to.escaped) not renamed (\(error)); comparing its entries")
            }
        }
        summary.renamed += done.count
        return done
    }

    /// Creates the mirror directories missing above `path` (their mode and mtime follow
    /// in the pass).
    private func makeMissingParents(of path: RelativePath) throws {
        var missing: [RelativePath] = []
        var next = path.parent
        while let d = next, !d.isRoot, try mirror.stat(d) == nil {
            missing.append(d)
            next = d.parent
        }
        for d in missing.reversed() {
            guard let s = try source.stat(d), s.kind == .directory else { return }
            _ = try mirror.makeDirectory(d, mode: s.mode)
        }
    }
}
