import KeepSyncTestSupport
@testable import KeepSyncCore

/// The mirror's steps as the product runs them (under `LocalMirror`): an `InMemoryTree`
/// (whose own failure hook injects the faults) behind the crash points, with what a
/// crash in the middle of a copy leaves behind (a temp file holding part of the data),
/// faults on `publish` (which the tree's hook does not see) and the concurrent writer.
final class SimulationMirror: FileAccessorProviding {
    let tree: InMemoryTree
    let power: SimulationPower
    let faults: SimulationFaults
    let interference: SimulationInterference

    /// Where each mutating call is written in verbose runs.
    let log: SimulationLog?

    init(tree: InMemoryTree, power: SimulationPower, faults: SimulationFaults, interference: SimulationInterference,
         log: SimulationLog? = nil) {
        self.tree = tree
        self.power = power
        self.faults = faults
        self.interference = interference
        self.log = log
    }

    private func dead(_ path: RelativePath) -> KeepSyncError {
        KeepSyncError(.io, "the process was killed", path: path)
    }

    /// Passes when alive; throws when dead (after leaving debris when `debris` is given).
    private func gate(_ op: String, _ path: RelativePath, debris: (() -> Void)? = nil) throws {
        log?.append("  mirror \(op) \(path.escaped)")
        switch power.reach("\(op) \(path.escaped)") {
        case .alive: return
        case .crashesNow:
            if let debris, power.coin() { debris() }
            throw dead(path)
        case .dead: throw dead(path)
        }
    }

    /// A temp file of a copy killed half way: part of the data (or zeros), mode 0600.
    private func leaveTemporary(for path: RelativePath, from source: any SourceFile) {
        guard let parent = path.parent, tree.node(parent)?.kind == .directory else { return }
        var name = Array(".keepsync-tmp-e".utf8)
        let hex = Array("0123456789abcdef".utf8)
        for _ in 0..<15 { name.append(hex[power.draw(16)]) }
        let data = (try? source.read(upTo: Int(source.stat.size))) ?? []
        let cut = power.draw(data.count + 1)
        let bytes = power.coin() ? Array(data.prefix(cut)) : [UInt8](repeating: 0, count: data.count)
        tree.writeFile(parent.appending(name), bytes, mode: 0o600, mtime: Timespec(seconds: 0, nanoseconds: 0))
    }

    // MARK: Reads

    func stat(_ path: RelativePath) throws -> FileStat? { try tree.stat(path) }
    func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try tree.list(directory) }
    func readLink(_ path: RelativePath) throws -> [UInt8] { try tree.readLink(path) }
    func open(_ path: RelativePath) throws -> any SourceFile { try tree.open(path) }

    // MARK: Writes

    func stage(_ path: RelativePath, from source: any SourceFile, durable: Bool) throws -> StagedFile {
        try gate("stage", path) { self.leaveTemporary(for: path, from: source) }
        interference.copyStarts(path)
        return try tree.stage(path, from: source, durable: durable)
    }

    func barrier() throws {
        try gate("barrier", .root)
        try tree.barrier()
    }

    func syncEntry(_ path: RelativePath) throws {
        try gate("sync", path)
        try tree.syncEntry(path)
    }

    func probe() throws {
        try gate("probe", .root)
        try tree.probe()
    }

    func publish(_ staged: StagedFile) throws -> FileStat {
        try gate("publish", staged.path)
        if let error = faults.mirror("publish", staged.path) {
            // As `renameat` failing in the real accessor: the temp file is unlinked.
            tree.discard(staged)
            throw error
        }
        return try tree.publish(staged)
    }

    func discard(_ staged: StagedFile) {
        // A dead process unlinks nothing: the temp file stays for the next start's sweep.
        guard case .alive = power.reach("discard \(staged.path.escaped)") else { return }
        tree.discard(staged)
    }

    func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat {
        try gate("makeDirectory", path)
        return try tree.makeDirectory(path, mode: mode)
    }

    func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat {
        try gate("makeSymlink", path)
        return try tree.makeSymlink(path, target: target, mtime: mtime)
    }

    func remove(_ path: RelativePath) throws {
        try gate("remove", path)
        try tree.remove(path)
    }

    func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool {
        try gate("removeLeftoverTemporary", path)
        return try tree.removeLeftoverTemporary(path)
    }

    func rename(_ from: RelativePath, to: RelativePath) throws {
        try gate("rename", from)
        log?.append("  mirror   → \(to.escaped)")
        try tree.rename(from, to: to)
    }

    /// A hard link (a crash point; `.unsupported` unless the tree has hard links).
    func link(_ from: RelativePath, to: RelativePath) throws {
        try gate("link", from)
        log?.append("  mirror   → \(to.escaped)")
        try tree.link(from, to: to)
    }

    func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
        try gate("setAttributes", path)
        log?.append("  mirror   mode \(mode.map { String($0, radix: 8) } ?? "-") mtime \(mtime.map { "\($0.seconds)" } ?? "-")")
        try tree.setAttributes(path, mode: mode, mtime: mtime)
    }
}
