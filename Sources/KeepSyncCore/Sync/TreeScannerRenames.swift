/// The renames found by identity: a new source path that is a recorded object moved
/// while nobody watched.
extension TreeScanner {
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
        guard !records.records.isEmpty else { return }
        var fresh: [(path: RelativePath, stat: FileStat)] = []
        for step in scan.steps {
            guard case .path(let state, let actions, _) = step, let s = state.source, s.kind == .directory,
                  s.identityStamp != nil, state.record == nil, state.mirror == nil,
                  actions.last == .makeDirectory(state.path, mode: s.mode) else { continue }
            fresh.append((state.path, s))
        }
        guard !fresh.isEmpty else { return }
        var byInode: [UInt64: [Int]] = [:]
        for slot in records.records.slots(ofKind: .directory) { byInode[slot.inode, default: []].append(slot.index) }
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
            guard let (old, record) = records.records.entry(atSlot: slot), record.kind == .directory, !claimed.contains(old),
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
