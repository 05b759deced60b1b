/// What a scan found: the steps in depth-first order and the counts the brake needs.
public struct SyncScan: Sendable {
    /// One unit of work.
    /// (Boxed, every case: a scan holds one per path until it is applied, and the array
    /// then keeps 8 bytes per step instead of 104.)
    public indirect enum Step: Sendable, Equatable {
        /// The actions for one path; `removedEntries` counts mirror entries its removal takes.
        case path(PathState, [SyncAction], removedEntries: Int)
        /// A directory's entries are done: set its attributes and record.
        case finishDirectory(RelativePath, source: FileStat)
        /// A leftover temp file no record claims.
        case removeTemporary(RelativePath)
    }

    /// Where the scan started.
    public var scope: RelativePath
    /// Steps, parents before children, a directory's finish after its entries.
    public var steps: [Step] = []
    /// Mirror entries below the scope (the scope itself excluded).
    public var mirrorEntries = 0
    /// Mirror entries the steps would remove (type changes included).
    public var deletions = 0
    /// Mirror paths under removed directories, for `check` (only when asked).
    public var removedBelow: [RelativePath: [RelativePath]] = [:]
    /// Regular files the mirror keeps although the source lost them (`--no-delete`).
    public var keptFiles = 0
    /// Their total size.
    public var keptBytes: UInt64 = 0
    /// Files the steps would copy, and their total size.
    public var plannedCopies: (files: Int, bytes: UInt64) {
        var files = 0
        var bytes: UInt64 = 0
        for step in steps {
            if case .path(let state, let actions, _) = step, actions.contains(.copyFile(state.path)) {
                files += 1
                bytes += state.source?.size ?? 0
            }
        }
        return (files, bytes)
    }

    /// Renames paired by identity (vanished path → new path).
    public var renames = 0
    /// Directories moved while nobody watched (recorded path → new path), identity
    /// certain: found by full passes only; `SyncEngine.prepare` applies them first.
    public var directoryRenames: [Move] = []
    /// Directory renames `SyncEngine.prepare` applied before this scan.
    public var appliedRenames = 0
    /// Directories that vanished while the scan walked them (not descended into).
    public var vanished: [RelativePath] = []
    /// Source directories that could not be listed (permission, I/O): not descended
    /// into, nothing below them removed or forgotten; each is a per-path error.
    public var unreadable: [KeepSyncError] = []
    /// Special files met (FIFOs, sockets, devices).
    public var specialFiles: [RelativePath] = []
    /// Source paths the mirror cannot hold, with why (never below one of them).
    public var unholdable: [(path: RelativePath, reason: String)] = []
    /// Record slots (`RecordTable.slotIndex`) the scan visited: one bit each.
    public var visitedRecords = BitSet()
    /// Records below the scope for paths the scan found on neither side.
    public var staleRecords: [RelativePath] = []
    /// Regular source files with more than one name.
    var hardLinked: Set<FileIdentity> = []
}

/// A path moved to another.
public struct Move: Sendable, Equatable {
    /// The old path.
    public var from: RelativePath
    /// The new path.
    public var to: RelativePath

    /// A move.
    public init(from: RelativePath, to: RelativePath) {
        self.from = from
        self.to = to
    }
}

/// Walks source and mirror side by side and plans every path: the read-only half of a
/// pass, shared by `sync`, `run` and `check`.
public struct TreeScanner {
    let source: any FileSystemProviding
    let mirror: any FileSystemProviding
    let records: RecordSet
    let options: SyncOptions
    /// Threads that list directories ahead of the walk (serial: none).
    let io: ParallelIO
    /// Beaten once per path, so a long scan shows it is alive.
    let heartbeat: Heartbeat?

    /// A scanner over a source, a mirror (read side) and the records.
    public init(source: any FileSystemProviding, mirror: any FileSystemProviding, records: RecordSet, options: SyncOptions,
                io: ParallelIO = .serial, heartbeat: Heartbeat? = nil) {
        self.source = source
        self.mirror = mirror
        self.records = records
        self.options = options
        self.io = io
        self.heartbeat = heartbeat
    }

    var planner: Planner { Planner(deleteEnabled: options.deleteEnabled, limits: limits) }

    /// What the mirror's file system holds, as the records say.
    var limits: MirrorLimits { records.mirror?.limits ?? .none }

    /// Compares source, records and mirror below `scope` by metadata (and bytes with
    /// `compareContent`). Reads no file contents otherwise; changes nothing.
    public func scan(_ scope: RelativePath = .root, collectRemovedPaths: Bool = false) throws -> SyncScan {
        var scan = SyncScan(scope: scope)
        let sourceStat = try source.stat(scope)
        var mirrorStat = try mirror.stat(scope)
        var caseRename: [UInt8]?
        if limits.foldsCase, !scope.isRoot, mirrorStat != nil { (mirrorStat, caseRename) = try caseMatched(scope, source: sourceStat, mirror: mirrorStat) }
        // An excluded path (or one below an excluded directory) is never touched.
        if !scope.isRoot, options.excludes.excludes(scope, isDirectory: (sourceStat ?? mirrorStat)?.kind == .directory) {
            return scan
        }
        var prefetcher: ScanPrefetcher?
        if io.width > 1, sourceStat?.kind == .directory {
            let p = ScanPrefetcher(source: source, mirror: mirror, excludes: options.excludes, io: io)
            p.start(scope, mirrorIsDirectory: mirrorStat?.kind == .directory)
            prefetcher = p
        }
        defer { prefetcher?.stop() }
        try scanPath(scope, source: sourceStat, mirror: mirrorStat, into: &scan, collect: collectRemovedPaths, prefetcher: prefetcher,
                     caseRename: caseRename)
        pairRenames(&scan)
        if scope.isRoot { try pairDirectoryRenames(&scan) }
        if scan.visitedRecords.count < records.records.count {
            let unread = scan.unreadable.compactMap(\.path)
            let candidates = scope.isRoot ? Array(0..<records.records.slotCapacity) : records.records.slots(within: scope)
            for i in candidates where !scan.visitedRecords.contains(i) {
                guard let (path, _) = records.records.entry(atSlot: i) else { continue }
                if path.isWithin(scope) && !unread.contains(where: { path != $0 && path.isWithin($0) }) {
                    scan.staleRecords.append(path)
                }
            }
        }
        return scan
    }

    /// On a mirror without case, what `mirror.stat(path)` found may be another name's
    /// entry (`Photo.JPG` for `photo.jpg`): the entry is `path`'s own when its name is
    /// exactly `path`'s; it is the copy of `path` under its old case when the source has
    /// `path` (returned as the name to rename from); otherwise it belongs to the source
    /// name of that case, and this path has no mirror entry.
    func caseMatched(_ path: RelativePath, source s: FileStat?, mirror m: FileStat?) throws -> (FileStat?, [UInt8]?) {
        guard let parent = path.parent else { return (m, nil) }
        let key = limits.caseKey(path.name)
        let names = try mirror.list(parent).map(\.name).filter { limits.caseKey($0) == key }
        if names.contains(path.name) { return (m, nil) }
        guard let other = names.first else { return (nil, nil) }
        if s == nil { return (nil, nil) }
        // The source's own entry of that case, if any, keeps it (the first sorted wins).
        if try source.stat(parent.appending(other)) != nil, RelativePath(bytes: other) < RelativePath(bytes: path.name) {
            return (nil, nil)
        }
        return (m, other)
    }

    private func scanPath(_ path: RelativePath, source s: FileStat?, mirror m: FileStat?, into scan: inout SyncScan,
                          collect: Bool, prefetcher: ScanPrefetcher?, caseRename: [UInt8]? = nil) throws {
        heartbeat?.beat()
        if let s, s.kind == .regular, s.links > 1 { scan.hardLinked.insert(FileIdentity(device: s.device, inode: s.inode)) }
        let slot = records.records.slotIndex(of: path)
        let record = slot.flatMap { records.records.value(atSlot: $0, path: path) }
        if let slot { scan.visitedRecords.insert(slot) }
        var state = PathState(path: path, source: s, record: record, mirror: m)
        if s?.kind == .symlink { state.sourceLink = try? source.readLink(path) }
        if m?.kind == .symlink { state.mirrorLink = try? mirror.readLink(path) }
        if options.compareContent, let s, let m, s.kind == .regular, m.kind == .regular, s.size == m.size {
            state.contentEqual = try? contentsEqual(path)
        }
        var actions = planner.plan(state)
        if let old = caseRename, let parent = path.parent, !actions.contains(where: \.changesMirrorEntries) {
            // The mirror holds it under another case: renamed, not copied again.
            actions.insert(.renameFrom(parent.appending(old), to: path), at: 0)
        }
        if actions.contains(.skipSpecial(path)) { scan.specialFiles.append(path) }
        for case .skipUnholdable(let p, let reason) in actions { scan.unholdable.append((p, reason)) }
        var removed = 0
        if let m, !path.isRoot, actions.contains(where: \.isDeletion) {
            removed = 1
            if m.kind == .directory {
                let below = mirrorSubtree(path)
                removed += below.count
                if collect { scan.removedBelow[path] = below }
            }
            scan.deletions += removed
            scan.mirrorEntries += removed - 1
        } else if s == nil, let m, !path.isRoot {
            // Kept (--no-delete): still held by the mirror.
            if m.kind == .regular {
                scan.keptFiles += 1
                scan.keptBytes += m.size
            } else if m.kind == .directory {
                var stack = [path]
                while let d = stack.popLast() {
                    for e in (try? mirror.list(d)) ?? [] {
                        if e.stat.kind == .directory { stack.append(d.appending(e.name)) }
                        if e.stat.kind == .regular {
                            scan.keptFiles += 1
                            scan.keptBytes += e.stat.size
                        }
                    }
                }
            }
        }
        if !actions.isEmpty { scan.steps.append(.path(state, actions, removedEntries: removed)) }
        guard let s, s.kind == .directory, !actions.contains(where: { if case .skipUnholdable = $0 { return true }; return false })
        else { return }

        // Walk the directory's entries side by side.
        let listing = prefetcher?.take(path, mirrorIsDirectory: m?.kind == .directory)
        let sourceEntries: [DirectoryEntry]
        do { sourceEntries = try listing?.source.get() ?? source.list(path) } catch let error as KeepSyncError
            where path != scan.scope && (error.code == .notFound || error.code == .unsafePath) {
            // The directory vanished (or became a link) while we walked: its own events
            // will follow; the rest of the walk goes on.
            scan.vanished.append(path)
            return
        } catch let error as KeepSyncError where path != scan.scope {
            // Unreadable (EACCES, EIO): this directory fails, the rest of the walk goes on.
            var e = error
            if e.path == nil { e.path = path }
            scan.unreadable.append(e)
            return
        }
        var mirrorEntries: [DirectoryEntry] = []
        if let listing {
            mirrorEntries = listing.mirror ?? []
        } else if let m, m.kind == .directory {
            mirrorEntries = (try? mirror.list(path)) ?? []
        }
        var mirrorByName: [[UInt8]: FileStat] = [:]
        mirrorByName.reserveCapacity(mirrorEntries.count)
        for e in mirrorEntries { mirrorByName[e.name] = e.stat }
        var names = Set(sourceEntries.map(\.name))
        var sourceByName: [[UInt8]: FileStat] = [:]
        sourceByName.reserveCapacity(sourceEntries.count)
        for e in sourceEntries { sourceByName[e.name] = e.stat }
        for e in mirrorEntries { names.insert(e.name) }
        let cases = limits.foldsCase ? CaseMatching(limits: limits, source: sourceEntries, mirror: mirrorEntries) : nil
        for name in names.sorted(by: { RelativePath(bytes: $0) < RelativePath(bytes: $1) }) {
            let child = path.appending(name)
            let cs = sourceByName[name]
            var cm = mirrorByName[name]
            var caseRename: [UInt8]?
            if let cases {
                if let kept = cases.collisions[name] {
                    if !options.excludes.matches(child, isDirectory: cs?.kind == .directory) {
                        scan.unholdable.append((child, "its name differs from \(RelativePath(bytes: kept).escaped) only in case, which the mirror's file system does not tell apart"))
                    }
                    continue
                }
                if cases.claimed.contains(name) { continue }
                if let old = cases.renamedFrom[name] {
                    cm = mirrorByName[old]
                    caseRename = old
                }
            }
            let isDir = (cs ?? cm)?.kind == .directory
            if options.excludes.matches(child, isDirectory: isDir) { continue }
            if cm != nil { scan.mirrorEntries += 1 }
            if cs == nil, TemporaryName.matches(name), records.records[child] == nil {
                scan.mirrorEntries -= 1
                scan.steps.append(.removeTemporary(child))
                continue
            }
            try scanPath(child, source: cs, mirror: cm, into: &scan, collect: collect, prefetcher: prefetcher,
                         caseRename: caseRename)
        }
        scan.steps.append(.finishDirectory(path, source: s))
    }

    /// One directory's names on a mirror without case (`MirrorLimits.foldsCase`).
    struct CaseMatching {
        /// Source names not mirrored, each with the name of the same case key sorted first,
        /// which is.
        var collisions: [[UInt8]: [UInt8]] = [:]
        /// Source names whose copy the mirror holds under another case, and that name.
        var renamedFrom: [[UInt8]: [UInt8]] = [:]
        /// Mirror names that are such a copy: planned with their source name, never alone.
        var claimed: Set<[UInt8]> = []

        init(limits: MirrorLimits, source: [DirectoryEntry], mirror: [DirectoryEntry]) {
            let order: ([UInt8], [UInt8]) -> Bool = { RelativePath(bytes: $0) < RelativePath(bytes: $1) }
            var kept: [[UInt8]: [UInt8]] = [:]
            for name in source.map(\.name).sorted(by: order) {
                let key = limits.caseKey(name)
                if let first = kept[key] { collisions[name] = first } else { kept[key] = name }
            }
            let mirrorNames = Set(mirror.map(\.name))
            for name in mirror.map(\.name).sorted(by: order) {
                guard let k = kept[limits.caseKey(name)], k != name, !mirrorNames.contains(k) else { continue }
                if renamedFrom[k] == nil { renamedFrom[k] = name }
                claimed.insert(name)
            }
        }
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
            scan.renames += 1
        }
    }

    /// Finds directories renamed while nobody watched: a new source directory (no record,
    /// nothing in the mirror) whose device, inode and birth time equal a directory
    /// record's, whose recorded path no longer holds that directory in the source while
    /// the mirror still holds the recorded inode there. Size and mtime are no part of a
    /// directory's identity (they change with its entries).
    func pairDirectoryRenames(_ scan: inout SyncScan) throws {
        guard !records.records.isEmpty else { return }
        var fresh: [(path: RelativePath, stat: FileStat)] = []
        for step in scan.steps {
            guard case .path(let state, let actions, _) = step, let s = state.source, s.kind == .directory,
                  s.identityStamp != nil, state.record == nil, state.mirror == nil,
                  actions.last == .makeDirectory(state.path, mode: s.mode) else { continue }
            fresh.append((state.path, s))
        }
        guard !fresh.isEmpty, !records.records.isEmpty else { return }
        var byInode: [UInt64: [Int]] = [:]
        for slot in records.records.slots(ofKind: .directory) { byInode[slot.inode, default: []].append(slot.index) }
        guard !byInode.isEmpty else { return }
        var claimed = Set<Int>()
        for candidate in fresh {
            for slot in byInode[candidate.stat.inode] ?? [] where !claimed.contains(slot) {
                guard let (old, record) = records.records.entry(atSlot: slot), !old.isRoot, old != candidate.path,
                      !candidate.path.isWithin(old), record.device == candidate.stat.device,
                      let birth = record.birthTime, birth == candidate.stat.identityStamp,
                      !options.excludes.excludes(old, isDirectory: true) else { continue }
                if let now = try source.stat(old), now.kind == .directory, now.inode == record.inode,
                   now.device == record.device, now.identityStamp == birth { continue }
                guard let m = try mirror.stat(old), m.kind == .directory, limits.recordedInode(m.inode) == record.mirrorInode
                else { continue }
                claimed.insert(slot)
                scan.directoryRenames.append(Move(from: old, to: candidate.path))
                break
            }
        }
        // A folder that moved along with its renamed parent is no rename of its own.
        let pairs = scan.directoryRenames
        scan.directoryRenames.removeAll { q in pairs.contains { p in p != q && q.from.rebased(from: p.from, to: p.to) == q.to } }
    }

    /// The mirror paths below a directory, sorted; keepsync's temp files are not counted
    /// (they go with the directory, and never count toward the brake).
    private func mirrorSubtree(_ dir: RelativePath) -> [RelativePath] {
        var paths: [RelativePath] = []
        var stack = [dir]
        while let d = stack.popLast() {
            guard let entries = try? mirror.list(d) else { continue }
            for e in entries {
                let p = d.appending(e.name)
                if e.stat.kind == .regular && TemporaryName.matches(e.name) { continue }
                paths.append(p)
                if e.stat.kind == .directory { stack.append(p) }
            }
        }
        return paths.sorted()
    }

    /// Byte comparison of the source and mirror file at `path`.
    func contentsEqual(_ path: RelativePath) throws -> Bool {
        let a = try source.open(path)
        defer { a.close() }
        let b = try mirror.open(path)
        defer { b.close() }
        while true {
            let x = try Self.read(a, upTo: 1 << 18)
            let y = try Self.read(b, upTo: 1 << 18)
            if x != y { return false }
            if x.isEmpty { return true }
        }
    }

    /// `count` bytes, fewer only at the end of the file: a read may return less than asked.
    static func read(_ file: any SourceFile, upTo count: Int) throws -> [UInt8] {
        var out = try file.read(upTo: count)
        while out.count < count {
            let more = try file.read(upTo: count - out.count)
            if more.isEmpty { break }
            out += more
        }
        return out
    }
}
