import KeepSyncTestSupport
import Synchronization
@testable import KeepSyncCore

/// I10 (versions, SPEC "Versions": durable with the change): a recorded change that
/// replaced or removed a file or link whose previous content was itself recorded leaves
/// that content in the versions directory, and there it stays through every later power
/// cut. Matched by content (every write of the workload is unique): a file renamed in the
/// mirror, then removed before the rename's record, is kept under its new name. (I2 judges
/// each version at the path its name gives.) At the append that records the change, the version is
/// on the disk already (the barrier that covered the change covered it). The one excuse:
/// a cut took the version before the change was recorded (the model keeps any subset of
/// what no barrier covered, the new file's rename without the link before it); the
/// restarted agent then records what it finds.
final class SimulationVersionOracle: Sendable {
    /// The versions directory, relative to the mirror root.
    let directory: RelativePath
    /// The simulated mirror (its live tree and its durable view).
    let mirror: InMemoryTree

    /// An entry's content: a file's bytes or a link's target.
    struct Content: Hashable {
        /// `.regular` or `.symlink`.
        var kind: FileKind
        /// The bytes, or the target.
        var bytes: [UInt8]
    }

    private struct State {
        /// What the mirror held for each record, seen at the append that stored it.
        var named: [RelativePath: [(record: FileRecord, content: Content)]] = [:]
        /// Old contents that recorded changes replaced or removed (and the path they had):
        /// they stay in the versions directory.
        var owed: [Content: RelativePath] = [:]
        /// Versions that power cuts took.
        var lost: Set<Content> = []
        var problems: [String] = []
        var counts: [String: Int] = [:]
    }
    private let state = Mutex(State())

    /// An oracle of the versions `mirror` keeps in `directory`.
    init(directory: RelativePath, mirror: InMemoryTree) {
        self.directory = directory
        self.mirror = mirror
    }

    // MARK: Reading the versions directory

    /// The path a version was kept for: its tagged component (the file's name, or the
    /// removed directory's) read back; nil for anything else there.
    func original(of path: RelativePath) -> RelativePath? {
        guard path.isWithin(directory), path != directory else { return nil }
        let inside = Array(path.components.dropFirst(directory.components.count))
        for (i, component) in inside.enumerated() {
            guard let name = VersionName(parsing: component, isDirectory: i < inside.count - 1) else { continue }
            var components = inside
            components[i] = name.original
            return components.reduce(RelativePath.root) { $0.appending($1) }
        }
        return nil
    }

    /// The content of every file and link in `nodes`' versions directory.
    func kept(in nodes: [RelativePath: InMemoryTree.Node]) -> Set<Content> {
        var out: Set<Content> = []
        for (path, node) in nodes where (node.kind == .regular || node.kind == .symlink) && path.isWithin(directory) {
            out.insert(Content(kind: node.kind, bytes: node.kind == .symlink ? node.target : node.content))
        }
        return out
    }

    // MARK: At each append

    /// Called with each batch about to be appended to the durable store, and the records
    /// stored before it.
    func appending(_ changes: [RecordChange], after stored: RecordSet) {
        let live = mirror.nodes
        guard let disk = mirror.durability else { return }
        let liveKept = kept(in: live), diskKept = kept(in: disk.entries)
        var records = stored
        state.withLock { s in
            for change in changes {
                switch change {
                case .put(let r):
                    if let old = records.table[r.path], old.mirrorInode != r.mirrorInode || old.kind != r.kind {
                        owe(old, &s, live, liveKept, diskKept)
                    }
                    if let node = live[r.path], node.inode == r.mirrorInode, node.kind == r.kind {
                        let content = Content(kind: r.kind, bytes: r.kind == .symlink ? node.target : node.content)
                        s.named[r.path, default: []].removeAll { $0.record == r }
                        s.named[r.path, default: []].append((r, content))
                    }
                case .remove(let path):
                    if let old = records.table[path] { owe(old, &s, live, liveKept, diskKept) }
                default:
                    break
                }
                records.apply(change)
            }
        }
    }

    /// The record `old` is being replaced or removed: its content is owed a version.
    private func owe(_ old: FileRecord, _ s: inout State, _ live: [RelativePath: InMemoryTree.Node],
                     _ liveKept: Set<Content>, _ diskKept: Set<Content>) {
        guard old.kind == .regular || old.kind == .symlink else { return }
        // A name like keepsync's temp files is swept as one, never kept (SPEC: not a version).
        if old.path.components.contains(where: TemporaryName.matches) {
            s.counts["versionsNotOwedTempName", default: 0] += 1
            return
        }
        guard let content = s.named[old.path]?.last(where: { $0.record == old })?.content else {
            s.counts["versionsUnknownOld", default: 0] += 1
            return
        }
        // Renamed, not replaced: the inode lives on at another name (SPEC: no version).
        if live.contains(where: { path, node in
            !path.isWithin(directory) && node.inode == old.mirrorInode && node.kind == old.kind
                && (node.kind == .symlink ? node.target : node.content) == content.bytes
        }) {
            s.counts["versionsNotOwedMoved", default: 0] += 1
            return
        }
        let what = "the \(old.kind == .symlink ? "link" : "file") \(old.path.escaped) (\(content.bytes.count) bytes, mirror inode \(old.mirrorInode))"
        if liveKept.contains(content) {
            if diskKept.contains(content) {
                s.owed[content] = old.path
                s.counts["versionsOwed", default: 0] += 1
            } else {
                s.problems.append("I10: the change of \(what) was recorded while its version was not durable")
            }
        } else if s.lost.contains(content) {
            s.counts["versionsLostBeforeTheirRecord", default: 0] += 1
        } else {
            s.problems.append("I10: the change of \(what) was recorded, and its old content is in no version")
        }
    }

    /// What the appends found since the last call.
    func takeProblems() -> [String] {
        state.withLock { s in
            defer { s.problems.removeAll() }
            return s.problems
        }
    }

    // MARK: At cuts and checkpoints

    /// A power cut turned the mirror from `before` into `after`: the versions it took.
    func cut(before: [RelativePath: InMemoryTree.Node], after: [RelativePath: InMemoryTree.Node]) {
        let gone = kept(in: before).subtracting(kept(in: after))
        state.withLock { $0.lost.formUnion(gone) }
    }

    /// The owed versions missing from the mirror now (with the path each had); how many
    /// were checked.
    func missing() -> (missing: [(path: RelativePath, content: Content)], checked: Int) {
        let now = kept(in: mirror.nodes)
        return state.withLock { s in
            (s.owed.filter { !now.contains($0.key) }.map { ($0.value, $0.key) }.sorted { $0.path < $1.path }, s.owed.count)
        }
    }

    /// Counters for the run's stats.
    var counts: [String: Int] { state.withLock { $0.counts } }
}
