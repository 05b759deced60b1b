/// What waits for the end of a streamed pass, and the renames found by identity: a new
/// source path that is a recorded object moved while nobody watched.
extension TreeScanner {
    /// True for a directory a streamed pass leaves for its end instead of walking it now:
    /// a new one that is a recorded directory moved (the move is noted, and made before it
    /// is walked), or a recorded one replaced by another (its old self may be such a
    /// move's origin, and must not be written into first).
    func leftForTheEnd(_ state: PathState, _ actions: [SyncAction], _ inodes: RecordedInodes, _ walked: Set<RelativePath>,
                       _ scan: inout SyncScan) -> Bool {
        guard let s = state.source, s.kind == .directory else { return false }
        if state.record == nil, state.mirror == nil, s.identityStamp != nil, actions == [.makeDirectory(state.path, mode: s.mode)] {
            let claimed = Set(scan.directoryRenames.map(\.from)).union(walked)
            guard let move = try? movedDirectory(to: state.path, s, slots: inodes.directorySlots(s.inode, in: records.table), claimed: claimed)
            else { return false }
            scan.directoryRenames.append(move)
            return true
        }
        guard let r = state.record, r.kind == .directory, let birth = r.birthTime, let m = state.mirror, m.kind == .directory,
              limits.recordedInode(m.inode) == r.mirrorInode else { return false }
        return r.device != s.device || r.inode != s.inode || s.identityStamp != birth
    }

    /// True for a step that waits for the end of a streamed pass: a deletion (the brake
    /// decides over all of them), a new file that may be a recorded one renamed, or what
    /// stands where a recorded directory was (it may have moved).
    func waitsForTheEnd(_ state: PathState, _ actions: [SyncAction], _ inodes: RecordedInodes) -> Bool {
        if actions.contains(where: \.isDeletion) { return true }
        if let s = state.source, s.kind == .regular, s.identityStamp != nil, state.record == nil, state.mirror == nil,
           actions == [.copyFile(state.path)], inodes.mayHoldFile(s.inode) { return true }
        if let r = state.record, r.kind == .directory, r.birthTime != nil, state.source?.kind != .directory { return true }
        return false
    }

    /// Readies what waited for the end of a streamed pass: steps at, in or above a
    /// directory moved since the walk saw them are planned again, every waiting step is
    /// counted (the brake's totals), renames are paired, and the records nothing visited
    /// are found stale.
    func settle(_ scan: inout SyncScan, moved: [Move]) {
        var steps = scan.steps
        scan.steps = []
        for i in steps.indices {
            guard case .path(var state, var actions, _) = steps[i] else { continue }
            let path = state.path
            if moved.contains(where: { path.isWithin($0.from) || $0.from.isWithin(path) }) {
                do { (state, actions) = plan(path, source: try source.stat(path), mirror: try mirror.stat(path), caseRename: nil, &scan) } catch {}
            }
            steps[i] = .path(state, actions, removedEntries: tally(state, actions, into: &scan, collect: false))
        }
        steps.removeAll { if case .path(_, let actions, _) = $0 { return actions.isEmpty }; return false }
        scan.steps = steps
        pairRenames(&scan)
        findStaleRecords(&scan)
    }

    /// Turns (vanished path, new path) pairs whose identity is certain into renames:
    /// the new path's copy becomes `.renameFrom`, the vanished path's removal goes.
    func pairRenames(_ scan: inout SyncScan) {
        // The vanished files first: without any (a first run), the new ones are not
        // collected at all (their list once held a third of a first run's peak memory).
        var vanished: [UInt64: [(index: Int, record: FileRecord)]] = [:]
        for (i, step) in scan.steps.enumerated() {
            guard case .path(let state, let actions, _) = step, state.source == nil, let r = state.record,
                  r.kind == .regular, r.birthTime != nil, let m = state.mirror, m.kind == .regular,
                  limits.recordedInode(m.inode) == r.mirrorInode, actions.contains(.remove(state.path)) else { continue }
            vanished[r.inode, default: []].append((i, r))
        }
        guard !vanished.isEmpty else { return }
        for i in scan.steps.indices {
            guard case .path(let state, let actions, _) = scan.steps[i], let s = state.source, s.kind == .regular,
                  s.identityStamp != nil, state.record == nil, state.mirror == nil, actions == [.copyFile(state.path)],
                  var list = vanished[s.inode],
                  let k = list.firstIndex(where: { $0.record.isCertainlySameObject(as: s) }) else { continue }
            let old = list.remove(at: k)
            vanished[s.inode] = list
            guard case .path(let oldState, _, let removed) = scan.steps[old.index] else { continue }
            scan.steps[i] = .path(state, [.renameFrom(old.record.path, to: state.path)], removedEntries: 0)
            scan.steps[old.index] = .path(oldState, [], removedEntries: 0)
            scan.deletions -= removed
            scan.plannedCopies.files -= 1
            scan.plannedCopies.bytes -= s.size
            scan.renames += 1
        }
    }

    /// Finds directories renamed while nobody watched among a scan's new directories (no
    /// record, nothing in the mirror; see `movedDirectory`).
    func pairDirectoryRenames(_ scan: inout SyncScan) throws {
        guard !records.table.isEmpty else { return }
        var fresh: [(path: RelativePath, stat: FileStat)] = []
        for step in scan.steps {
            guard case .path(let state, let actions, _) = step, let s = state.source, s.kind == .directory,
                  s.identityStamp != nil, state.record == nil, state.mirror == nil,
                  actions.last == .makeDirectory(state.path, mode: s.mode) else { continue }
            fresh.append((state.path, s))
        }
        guard !fresh.isEmpty else { return }
        var byInode: [UInt64: [Int]] = [:]
        for slot in records.table.slots(ofKind: .directory) { byInode[slot.inode, default: []].append(slot.index) }
        for candidate in fresh {
            let claimed = Set(scan.directoryRenames.map(\.from))
            if let move = try movedDirectory(to: candidate.path, candidate.stat, slots: byInode[candidate.stat.inode] ?? [],
                                             claimed: claimed) {
                scan.directoryRenames.append(move)
            }
        }
        // A folder that moved along with its renamed parent is no rename of its own.
        let pairs = scan.directoryRenames
        scan.directoryRenames.removeAll { q in pairs.contains { p in p != q && q.from.rebased(from: p.from, to: p.to) == q.to } }
    }

    /// The move that brought a recorded directory to `path`, a new source directory: a
    /// record in one of `slots` (not `claimed` by another move) with its device, inode and
    /// birth time, whose path no longer holds that directory in the source while the
    /// mirror still holds the recorded inode there. Size and mtime are no part of a
    /// directory's identity (they change with its entries).
    func movedDirectory(to path: RelativePath, _ stat: FileStat, slots: [Int], claimed: Set<RelativePath>) throws -> Move? {
        for slot in slots {
            guard let (old, record) = records.table.entry(atSlot: slot), record.kind == .directory, !claimed.contains(old),
                  !old.isRoot, old != path, !path.isWithin(old), record.device == stat.device, record.inode == stat.inode,
                  let birth = record.birthTime, birth == stat.identityStamp,
                  !options.excludes.excludes(old, isDirectory: true) else { continue }
            if let now = try source.stat(old), now.kind == .directory, now.inode == record.inode,
               now.device == record.device, now.identityStamp == birth { continue }
            guard let m = try mirror.stat(old), m.kind == .directory, limits.recordedInode(m.inode) == record.mirrorInode
            else { continue }
            return Move(from: old, to: path)
        }
        return nil
    }
}
