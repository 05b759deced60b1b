/// Walks source and mirror side by side and plans every path: the read-only half of a
/// pass, shared by `sync`, `run` and `check`. A scan walks its scope at once; a streamed
/// pass (`SyncEngine.fullPass`) advances a walk a few steps at a time and applies them.
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
        var walk = TreeWalk(scope: scope, collect: collectRemovedPaths)
        defer { walk.stop() }
        var steps: [SyncScan.Step] = []
        while !walk.isDone { try advance(&walk, &scan, into: &steps, limit: .max) }
        scan.steps = steps
        pairRenames(&scan)
        if scope.isRoot { try pairDirectoryRenames(&scan) }
        if scan.visitedRecords.count < records.table.count { findStaleRecords(&scan) }
        return scan
    }

    /// Records below the scope the scan did not visit (none below a directory it could not
    /// read).
    func findStaleRecords(_ scan: inout SyncScan) {
        let scope = scan.scope
        let unread = scan.unreadable.compactMap(\.path)
        var stale: [RelativePath] = []
        func consider(_ i: Int) {
            guard !scan.visitedRecords.contains(i), let (path, _) = records.table.entry(atSlot: i) else { return }
            if path.isWithin(scope) && !unread.contains(where: { path != $0 && path.isWithin($0) }) { stale.append(path) }
        }
        // At the root every slot is a candidate: the range, not an array of a million indices.
        if scope.isRoot {
            for i in 0..<records.table.slotCapacity { consider(i) }
        } else {
            for i in records.table.slots(within: scope) { consider(i) }
        }
        scan.staleRecords += stale
    }

    // MARK: The walk

    /// Walks on until `limit` steps are ready to apply (or the walk is done), appending
    /// them to `ready`; with the walk's `inodes`, the steps that wait for the end of the
    /// pass go to `scan.steps` instead, and some directories to `walk.held`.
    func advance(_ walk: inout TreeWalk, _ scan: inout SyncScan, into ready: inout [SyncScan.Step], limit: Int) throws {
        if !walk.started {
            walk.started = true
            try begin(&walk, &scan, &ready)
        }
        let goal = ready.count > Int.max - limit ? Int.max : ready.count + limit
        while ready.count < goal, !walk.frames.isEmpty {
            let f = walk.frames.count - 1
            guard walk.frames[f].next < walk.frames[f].entries.count else {
                let frame = walk.frames.removeLast()
                let step = SyncScan.Step.finishDirectory(frame.path, source: frame.source)
                if frame.waits || frame.finishWaits { scan.steps.append(step) } else { ready.append(step) }
                continue
            }
            let entry = walk.frames[f].entries[walk.frames[f].next]
            walk.frames[f].next += 1
            let name = entry.name, child = walk.frames[f].path.appending(name)
            let cs = entry.source
            var cm = entry.mirror
            var caseRename: [UInt8]?
            if let cases = walk.frames[f].cases {
                if let kept = cases.collisions[name] {
                    if !options.excludes.matches(child, isDirectory: cs?.kind == .directory) {
                        scan.unholdable.append((child, "its name differs from \(RelativePath(bytes: kept).escaped) only in case, which the mirror's file system does not tell apart"))
                    }
                    continue
                }
                if cases.claimed.contains(name) { continue }
                if let old = cases.renamedFrom[name] {
                    cm = old.stat
                    caseRename = old.name
                }
            }
            let isDir = (cs ?? cm)?.kind == .directory
            if options.excludes.matches(child, isDirectory: isDir) { continue }
            if cs == nil, TemporaryName.matches(name), records.table[child] == nil {
                if walk.frames[f].waits { scan.steps.append(.removeTemporary(child)) } else { ready.append(.removeTemporary(child)) }
                continue
            }
            try visit(child, source: cs, mirror: cm, caseRename: caseRename, &walk, &scan, &ready)
        }
    }

    /// Looks at the scope itself, and starts reading ahead below it.
    private func begin(_ walk: inout TreeWalk, _ scan: inout SyncScan, _ ready: inout [SyncScan.Step]) throws {
        let scope = walk.scope
        let sourceStat = try source.stat(scope)
        var mirrorStat = try mirror.stat(scope)
        var caseRename: [UInt8]?
        if limits.foldsCase, !scope.isRoot, mirrorStat != nil { (mirrorStat, caseRename) = try caseMatched(scope, source: sourceStat, mirror: mirrorStat) }
        // An excluded path (or one below an excluded directory) is never touched.
        if !scope.isRoot, options.excludes.excludes(scope, isDirectory: (sourceStat ?? mirrorStat)?.kind == .directory) {
            return
        }
        if io.width > 1, sourceStat?.kind == .directory {
            let p = ScanPrefetcher(source: source, mirror: mirror, excludes: options.excludes, io: io)
            p.start(scope, mirrorIsDirectory: mirrorStat?.kind == .directory)
            walk.prefetcher = p
        }
        try visit(scope, source: sourceStat, mirror: mirrorStat, caseRename: caseRename, &walk, &scan, &ready)
    }

    /// Plans one path: its step is ready, waits for the end, or (a directory that may be a
    /// recorded one moved) the path is left for the end; a directory to walk gets a frame.
    private func visit(_ path: RelativePath, source s: FileStat?, mirror m: FileStat?, caseRename: [UInt8]?,
                       _ walk: inout TreeWalk, _ scan: inout SyncScan, _ ready: inout [SyncScan.Step]) throws {
        heartbeat?.beat()
        if let s, s.kind == .regular, s.links > 1 { scan.hardLinked.insert(FileIdentity(device: s.device, inode: s.inode)) }
        let (state, actions) = plan(path, source: s, mirror: m, caseRename: caseRename, &scan)
        if actions.contains(.skipSpecial(path)) { scan.specialFiles.append(path) }
        for case .skipUnholdable(let p, let reason) in actions { scan.unholdable.append((p, reason)) }
        let inWaiting = walk.frames.last?.waits ?? false
        if path != walk.scope, !inWaiting, walk.holdsDirectories, let s, let inodes = walk.inodes,
           leftForTheEnd(state, actions, inodes, walk.walkedOrigins, &scan) {
            walk.held.append((path, s))
            walk.frames[walk.frames.count - 1].finishWaits = true
            return
        }
        let waits = inWaiting || walk.inodes.map { waitsForTheEnd(state, actions, $0) } == true
        if waits {
            // Counted at the end, when the pass knows everything.
            if !actions.isEmpty { scan.steps.append(.path(state, actions, removedEntries: 0)) }
            if !walk.frames.isEmpty { walk.frames[walk.frames.count - 1].finishWaits = true }
        } else {
            let removed = tally(state, actions, into: &scan, collect: walk.collect)
            if !actions.isEmpty { ready.append(.path(state, actions, removedEntries: removed)) }
        }
        guard let s, s.kind == .directory, !actions.contains(where: { if case .skipUnholdable = $0 { return true }; return false })
        else { return }
        try enter(path, source: s, mirror: m, waits: waits, &walk, &scan)
    }

    /// The state of one path and its actions (a rename when the mirror holds it under
    /// another case); marks its record visited.
    func plan(_ path: RelativePath, source s: FileStat?, mirror m: FileStat?, caseRename: [UInt8]?,
              _ scan: inout SyncScan) -> (PathState, [SyncAction]) {
        let slot = records.table.slotIndex(of: path)
        let record = slot.flatMap { records.table.value(atSlot: $0, path: path) }
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
        return (state, actions)
    }

    /// Adds one planned path to the scan's totals: its own mirror entry (unless it is the
    /// scope), a planned copy, what its removal takes from the mirror (returned), or what
    /// the mirror keeps of it (`--no-delete`).
    func tally(_ state: PathState, _ actions: [SyncAction], into scan: inout SyncScan, collect: Bool) -> Int {
        let path = state.path
        if state.mirror != nil, path != scan.scope { scan.mirrorEntries += 1 }
        if let s = state.source, actions.contains(.copyFile(path)) {
            scan.plannedCopies.files += 1
            scan.plannedCopies.bytes += s.size
        }
        guard let m = state.mirror, !path.isRoot else { return 0 }
        if actions.contains(where: \.isDeletion) {
            var removed = 1
            if m.kind == .directory {
                let below = mirrorSubtree(path)
                removed += below.count
                if collect { scan.removedBelow[path] = below }
            }
            scan.deletions += removed
            scan.mirrorEntries += removed - 1
            return removed
        }
        guard state.source == nil else { return 0 }
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
        return 0
    }

    /// Lists a directory on both sides (read ahead, or now) and pushes its frame.
    private func enter(_ path: RelativePath, source s: FileStat, mirror m: FileStat?, waits: Bool,
                       _ walk: inout TreeWalk, _ scan: inout SyncScan) throws {
        let listing = walk.prefetcher?.take(path, mirrorIsDirectory: m?.kind == .directory)
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
        let cases = limits.foldsCase ? CaseMatching(limits: limits, source: sourceEntries, mirror: mirrorEntries) : nil
        walk.frames.append(TreeWalk.Frame(path: path, source: s, entries: Self.merged(sourceEntries, mirrorEntries),
                                          cases: cases, waits: waits))
    }

    /// Both sides' names, once each, in walk order.
    static func merged(_ source: [DirectoryEntry], _ mirror: [DirectoryEntry]) -> [TreeWalk.Entry] {
        let order: (DirectoryEntry, DirectoryEntry) -> Bool = { RelativePath(bytes: $0.name) < RelativePath(bytes: $1.name) }
        let a = source.sorted(by: order), b = mirror.sorted(by: order)
        var out: [TreeWalk.Entry] = []
        out.reserveCapacity(max(a.count, b.count))
        var i = 0, j = 0
        while i < a.count || j < b.count {
            if j == b.count || (i < a.count && order(a[i], b[j])) {
                out.append(TreeWalk.Entry(name: a[i].name, source: a[i].stat, mirror: nil))
                i += 1
            } else if i == a.count || order(b[j], a[i]) {
                out.append(TreeWalk.Entry(name: b[j].name, source: nil, mirror: b[j].stat))
                j += 1
            } else {
                out.append(TreeWalk.Entry(name: a[i].name, source: a[i].stat, mirror: b[j].stat))
                i += 1
                j += 1
            }
        }
        return out
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

    /// One directory's names on a mirror without case (`MirrorLimits.foldsCase`).
    struct CaseMatching {
        /// Source names not mirrored, each with the name of the same case key sorted first,
        /// which is.
        var collisions: [[UInt8]: [UInt8]] = [:]
        /// Source names whose copy the mirror holds under another case: that name, its stat.
        var renamedFrom: [[UInt8]: (name: [UInt8], stat: FileStat)] = [:]
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
            for e in mirror.sorted(by: { order($0.name, $1.name) }) {
                guard let k = kept[limits.caseKey(e.name)], k != e.name, !mirrorNames.contains(k) else { continue }
                if renamedFrom[k] == nil { renamedFrom[k] = (e.name, e.stat) }
                claimed.insert(e.name)
            }
        }
    }

    /// The mirror paths below a directory, sorted; keepsync's temp files are not counted
    /// (they go with the directory, and never count toward the brake).
    func mirrorSubtree(_ dir: RelativePath) -> [RelativePath] {
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
