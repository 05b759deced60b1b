/// The engine's steps: one at a time against the mirror and the records, then what a pass
/// does once all are applied.
extension SyncEngine {
    /// A scan's steps in the order they are applied: with renames, pure deletions wait
    /// until the renames moved their files out.
    static func ordered(_ scan: SyncScan) -> [SyncScan.Step] {
        guard scan.renames > 0 else { return scan.steps }
        let isDeletion: (SyncScan.Step) -> Bool = {
            if case .path(let state, let actions, _) = $0 { return state.source == nil && !actions.isEmpty }
            return false
        }
        return scan.steps.filter { !isDeletion($0) } + scan.steps.filter(isDeletion)
    }

    /// Applies steps in order. On a mirror that makes directories in one round trip, each
    /// stretch of steps that only copies files, makes new directories or links and finishes
    /// directories has its directories, then its links, made at once first (a remote pass
    /// of 20,000 files in 420 directories with 200 links spent a round trip on each).
    func applyAll(_ steps: [SyncScan.Step], _ pass: inout PassApplication) {
        guard mirror.batchesEntries else {
            for step in steps { apply(step, &pass) }
            return
        }
        var i = 0
        while i < steps.count {
            let stretch = Self.stretch(steps[i...], pass)
            let made = pass.madeAhead
            pass.madeAhead.merge(makeAhead(stretch.directories.filter { made[$0.path] == nil },
                                           stretch.links.filter { made[$0.path] == nil })) { $1 }
            let end = stretch.end
            pass.stretchFinishes = []
            for step in steps[i..<max(end, i + 1)] { apply(step, &pass) }
            // The stretch's own results go (used or not); other scans' made ahead stay.
            for d in stretch.directories { pass.madeAhead[d.path] = nil }
            for l in stretch.links { pass.madeAhead[l.path] = nil }
            if let finishes = pass.stretchFinishes, !finishes.isEmpty {
                if case .atRoundEnd(let kept) = pass.finishes {
                    pass.finishes = .atRoundEnd(kept + finishes)
                } else {
                    finishAll(finishes, &pass)
                }
            }
            pass.stretchFinishes = nil
            i = max(end, i + 1)
        }
    }

    /// A stretch's new directories and links.
    typealias Stretch = (end: Int, directories: [(path: RelativePath, mode: UInt32)],
                         links: [(path: RelativePath, target: [UInt8], mtime: Timespec)])

    /// The stretch that starts `steps` (see `applyAll`): where it ends, and the new
    /// directories and links its steps make.
    static func stretch(_ steps: ArraySlice<SyncScan.Step>, _ pass: PassApplication) -> Stretch {
        var directories: [(path: RelativePath, mode: UInt32)] = []
        var links: [(path: RelativePath, target: [UInt8], mtime: Timespec)] = []
        var end = steps.startIndex
        stretch: while end < steps.endIndex {
            switch steps[end] {
            case .finishDirectory:
                break
            case .path(let state, let actions, _):
                switch actions.first {
                case nil:
                    break
                case .copyFile? where actions.count == 1:
                    break
                case .makeDirectory(let path, let mode)? where actions.count == 1 && state.mirror == nil && !pass.isBlocked(path):
                    directories.append((path, mode))
                case .makeSymlink(let path, let target)? where actions.count == 1 && !pass.isBlocked(path):
                    links.append((path, target, state.source?.mtime ?? Timespec(seconds: 0, nanoseconds: 0)))
                default:
                    break stretch
                }
            case .removeTemporary:
                break stretch
            }
            end += 1
        }
        return (end, directories, links)
    }

    /// Makes `directories`, then `links`, each kind in one call when there are two or
    /// more; returns the results for their steps (`PassApplication.madeAhead`).
    func makeAhead(_ directories: [(path: RelativePath, mode: UInt32)],
                   _ links: [(path: RelativePath, target: [UInt8], mtime: Timespec)]) -> [RelativePath: Result<FileStat, any Error>] {
        var made: [RelativePath: Result<FileStat, any Error>] = [:]
        // Links go after the directories they may sit in: those are made first.
        if !directories.isEmpty && (directories.count > 1 || links.count > 1) {
            for (d, result) in zip(directories, mirror.makeDirectories(directories)) { made[d.path] = result }
        }
        if links.count > 1 {
            for (l, result) in zip(links, mirror.makeSymlinks(links)) { made[l.path] = result }
        }
        return made
    }

    /// Applies one step: errors per path, a directory's finish after the copies before it.
    func apply(_ step: SyncScan.Step, _ pass: inout PassApplication) {
        heartbeat?.beat()
        switch step {
        case .removeTemporary(let path):
            if pass.isBlocked(path) { return }
            do {
                guard try mirror.removeLeftoverTemporary(path) else { return }
                pass.summary.removedTemporaries += 1
                pass.markDirty(path)
                logger.debug("removed leftover temp file \(path.escaped)")
            } catch let error as KeepSyncError where error.code == .notFound {
                return
            } catch { report(error, path: path, into: &pass.summary) }

        case .path(let state, let actions, let removedEntries):
            let path = state.path
            if pass.isBlocked(path) { return }
            if pass.hold && pass.brake.holds(path, actions: actions) {
                pass.summary.heldDeletes += removedEntries
                pass.summary.heldByDirectory[path.parent ?? .root, default: 0] += removedEntries
                if state.source?.kind == .directory { pass.blocked.append(path) }
                return
            }
            for action in actions {
                do {
                    try execute(action, state: state, &pass)
                    if action.changesMirrorEntries { pass.markDirty(path) }
                    // The directory the file left changed too (maybe after its finish).
                    if case .renameFrom(let old, _) = action { pass.markDirty(old) }
                } catch {
                    report(error, path: path, into: &pass.summary)
                    if state.source?.kind == .directory { pass.blocked.append(path) }
                    break
                }
            }

        case .finishDirectory(let path, let sourceStat):
            let dirty = pass.dirty.remove(path) != nil
            if pass.remembersFinishes { pass.finished.insert(path) }
            if pass.isBlocked(path) || pass.blocked.contains(path) { return }
            // Copies into it are left to the caller: finished once they landed (a remote
            // burst spent a stat and an attribute call per new directory on this one).
            if pass.deferredInto.contains(path) {
                pass.summary.deferredFinishes.append(path)
                return
            }
            if !pass.batch.isEmpty {
                pass.waitingFinishes.append((path, sourceStat, dirty))
            } else if !pass.inFlight.isEmpty {
                pass.inFlight[pass.inFlight.count - 1].finishes.append((path, sourceStat, dirty))
            } else if pass.stretchFinishes != nil {
                // Finished together at the stretch's end: one stat and one attribute call.
                pass.stretchFinishes?.append((path, sourceStat, dirty))
            } else {
                finishAll([(path, sourceStat, dirty)], &pass)
            }
        }
    }

    /// Ends a pass: the last group commits, directories changed after their finish are
    /// fixed again, stale records go (unless something was held or blocked), records are
    /// written.
    func close(_ pass: inout PassApplication, staleRecords: [RelativePath]) {
        commitBatch(&pass)
        finishInFlight(&pass)
        for dir in pass.refix.sorted(by: { $0.depth != $1.depth ? $0.depth > $1.depth : $0 < $1 }) where !pass.isBlocked(dir) {
            do { try fixDirectory(dir, writingInto: &pass) } catch { report(error, path: dir, into: &pass.summary) }
        }
        // Forget records of paths the scan no longer found (only when nothing was held or blocked).
        for path in staleRecords where records.table[path] != nil {
            if pass.hold || pass.blocked.contains(where: { path.isWithin($0) }) { continue }
            change(.remove(path))
        }
        recordWriter.flush()
    }
}
