import KeepSyncTestSupport
@testable import KeepSyncCore

/// What users and programs do to the source, and what the watcher reports for it. Every
/// operation changes the in-memory source through the tree's building API (never through
/// the product's seams) and returns the `WatchEvent`s the inotify watcher would emit for
/// it, in order.
struct SimulationWorkload {
    let tree: InMemoryTree
    /// The workload's own calls to `tree.rename` (the only counted source operation it uses).
    private(set) var renames = 0
    private var tag = 0
    /// Explicit modification times (`touch -d`, files moved in) come from a counter below
    /// every tick of the tree, so an mtime never names two different contents.
    private var past: Int64 = 10

    init(tree: InMemoryTree) { self.tree = tree }

    /// Names, as bytes: plain, with spaces, newline, backslash, a leading dash, UTF-8,
    /// not UTF-8, an excluded suffix, and one that looks like keepsync's temp files.
    static let names: [[UInt8]] = [
        Array("a".utf8), Array("b".utf8), Array("c".utf8), Array("d".utf8), Array("e.txt".utf8),
        Array("f.o".utf8), Array("g h".utf8), Array("-n".utf8), Array("new\nline".utf8),
        Array("back\\slash".utf8), Array("caf\u{e9}".utf8), [0x66, 0xFF, 0xFE],
        Array(".keepsync-tmp-ffffffffffffffff".utf8),
    ]

    static let linkTargets: [[UInt8]] = [
        Array("a".utf8), Array("../b".utf8), Array("/etc/passwd".utf8), Array("d/e.txt".utf8),
        Array("loop".utf8), [0x78, 0xFF], Array(String(repeating: "x/", count: 40).utf8),
    ]

    enum Op: CaseIterable {
        case create, overwrite, append, truncate, atomicSave, chmod, touchPast, mkdir, mkdirChain
        case removeFile, removeTree, renameFile, renameDirectory, symlink, touchLink, typeFlip
        case special, moveOut, moveIn, populate
    }

    static let weights: [Op: Int] = [
        .create: 14, .overwrite: 9, .append: 6, .truncate: 3, .atomicSave: 4, .chmod: 4, .touchPast: 2,
        .mkdir: 7, .mkdirChain: 2, .removeFile: 5, .removeTree: 3, .renameFile: 6, .renameDirectory: 4,
        .symlink: 4, .touchLink: 1, .typeFlip: 4, .special: 1, .moveOut: 2, .moveIn: 2, .populate: 1,
    ]

    // MARK: Looking at the tree

    /// The tree as the current operation found it, paths sorted (taken once per operation:
    /// sorting is most of the workload's cost).
    private var before: (nodes: [RelativePath: InMemoryTree.Node], sorted: [RelativePath]) = ([:], [])

    /// A fixed order of paths (by their escaped text: a path before everything below it),
    /// much cheaper in a debug build than `RelativePath`'s byte-wise `<`.
    static func canonicalOrder<S: Sequence>(_ paths: S) -> [RelativePath] where S.Element == RelativePath {
        paths.map { ($0.escaped, $0) }.sorted { $0.0 < $1.0 }.map(\.1)
    }

    private func paths(_ kinds: Set<FileKind>, root: Bool = false) -> [RelativePath] {
        before.sorted.filter { (root || !$0.isRoot) && kinds.contains(before.nodes[$0]!.kind) }
    }

    private func exists(_ path: RelativePath) -> Bool { tree.node(path) != nil }

    private func subtree(_ path: RelativePath) -> [RelativePath] {
        before.sorted.filter { $0.isWithin(path) }
    }

    /// A path that does not exist, in an existing directory at most two levels deep.
    private func freshPath(_ rng: inout SplitMix64) -> RelativePath? {
        let dirs = paths([.directory], root: true).filter { $0.depth < 3 }
        for _ in 0..<6 {
            let parent = rng.chance(0.35) ? RelativePath.root : rng.pick(dirs)
            let path = parent.appending(rng.pick(Self.names))
            if !exists(path) { return path }
        }
        return nil
    }

    private mutating func content(_ rng: inout SplitMix64) -> [UInt8] {
        tag += 1
        var bytes = Array("v\(tag):".utf8)
        for _ in 0..<rng.int(0...24) { bytes.append(UInt8(rng.int(0x61...0x7A))) }
        return bytes
    }

    /// A link target (often one another link already has: `ln -sf` with the same target
    /// makes a new link whose only difference is its mtime).
    private mutating func linkTarget(_ rng: inout SplitMix64) -> [UInt8] {
        rng.pick(Self.linkTargets)
    }

    private mutating func pastTime() -> Timespec {
        past += 1
        return Timespec(seconds: past, nanoseconds: 456_789)
    }

    private static let fileModes: [UInt32] = [0o644, 0o600, 0o755, 0o640, 0o444]
    private static let directoryModes: [UInt32] = [0o755, 0o700, 0o750, 0o555]

    /// The events of writing a file: create (new), modify, and usually the close.
    private func writeEvents(_ path: RelativePath, created: Bool, _ rng: inout SplitMix64) -> [WatchEvent] {
        var events: [WatchEvent] = created ? [.changed(path), .changed(path)] : [.changed(path)]
        if rng.chance(0.8) { events.append(.closedAfterWrite(path)) }
        return events
    }

    /// `rm -r`: a removal for every entry, deepest first, then the path itself.
    private func removeEvents(_ path: RelativePath) -> [WatchEvent] {
        subtree(path).reversed().map { .removed($0) }
    }

    // MARK: One operation

    /// Runs one random operation; returns its description and events (nil when the
    /// chosen operation had nothing to act on).
    mutating func step(_ rng: inout SplitMix64) -> (String, [WatchEvent])? {
        let nodes = tree.nodes
        before = (nodes, Self.canonicalOrder(nodes.keys))
        let ops = Op.allCases
        let op = ops[rng.weighted(ops.map { Self.weights[$0]! })]
        return perform(op, &rng)
    }

    mutating func perform(_ op: Op, _ rng: inout SplitMix64) -> (String, [WatchEvent])? {
        switch op {
        case .create:
            guard let path = freshPath(&rng) else { return nil }
            let bytes = content(&rng)
            tree.writeFile(path, bytes, mode: rng.pick(Self.fileModes))
            return ("create \(path.escaped) (\(bytes.count) bytes)", writeEvents(path, created: true, &rng))

        case .overwrite, .append, .truncate:
            let files = paths([.regular])
            guard !files.isEmpty else { return perform(.create, &rng) }
            let path = rng.pick(files)
            let node = tree.node(path)!
            var bytes: [UInt8]
            switch op {
            case .overwrite: bytes = content(&rng)
            case .append:
                tag += 1
                bytes = node.content + Array("+a\(tag);".utf8)
            default: bytes = Array(node.content.prefix(rng.below(max(1, node.content.count))))
            }
            tree.writeFile(path, bytes, mode: node.mode)
            return ("\(op) \(path.escaped) (\(bytes.count) bytes)", writeEvents(path, created: false, &rng))

        case .atomicSave:
            // An editor's save: write a temp name, then rename it over the file.
            let files = paths([.regular])
            guard let target = files.isEmpty || rng.chance(0.2) ? freshPath(&rng) : rng.pick(files),
                  let parent = target.parent else { return nil }
            let temp = parent.appending(Array("~save".utf8))
            guard !exists(temp) else { return nil }
            let bytes = content(&rng)
            tree.writeFile(temp, bytes, mode: tree.node(target)?.mode ?? 0o644)
            renames += 1
            guard (try? tree.rename(temp, to: target)) != nil else {
                tree.delete(temp)
                return nil
            }
            return ("save \(target.escaped) by rename (\(bytes.count) bytes)",
                    [.changed(temp), .changed(temp), .closedAfterWrite(temp), .moved(from: temp, to: target)])

        case .chmod:
            let candidates = paths([.regular, .directory], root: true)
            let path = rng.pick(candidates)
            let isDirectory = tree.node(path)!.kind == .directory
            let mode = rng.pick(isDirectory ? Self.directoryModes : Self.fileModes)
            tree.modify(path) { $0.mode = mode }
            return ("chmod \(String(mode, radix: 8)) \(path.escaped)", [.changed(path)])

        case .touchPast:
            let candidates = paths([.regular, .directory], root: true)
            let path = rng.pick(candidates)
            let t = pastTime()
            tree.modify(path) { $0.mtime = t }
            return ("touch -d \(t.seconds) \(path.escaped)", [.changed(path)])

        case .mkdir:
            guard let path = freshPath(&rng) else { return nil }
            tree.makeDirectory(path, mode: rng.pick(Self.directoryModes), mtime: nil)
            return ("mkdir \(path.escaped)", [.changed(path)])

        case .mkdirChain:
            guard var path = freshPath(&rng) else { return nil }
            var events: [WatchEvent] = []
            for level in 0..<rng.int(2...3) {
                if level > 0 { path = path.appending(rng.pick(Self.names)) }
                tree.makeDirectory(path, mode: 0o755, mtime: nil)
                events.append(.changed(path))
            }
            return ("mkdir -p \(path.escaped)", events)

        case .removeFile:
            let candidates = paths([.regular, .symlink, .special])
            guard !candidates.isEmpty else { return nil }
            let path = rng.pick(candidates)
            tree.delete(path)
            return ("rm \(path.escaped)", [.removed(path)])

        case .removeTree:
            let candidates = paths([.directory])
            guard !candidates.isEmpty else { return nil }
            let path = rng.pick(candidates)
            let events = removeEvents(path)
            tree.delete(path)
            return ("rm -r \(path.escaped) (\(events.count) entries)", events)

        case .renameFile, .renameDirectory:
            let candidates = op == .renameFile ? paths([.regular, .symlink]) : paths([.directory])
            guard !candidates.isEmpty else { return nil }
            let from = rng.pick(candidates)
            let fromIsDirectory = op == .renameDirectory
            var to: RelativePath?
            if rng.chance(0.3) {
                // Over an existing entry: a file or link over a file or link, a directory
                // over an empty directory (what rename(2) allows).
                let targets = fromIsDirectory
                    ? paths([.directory]).filter { d in !subtree(d).contains { $0 != d } }
                    : paths([.regular, .symlink])
                to = targets.isEmpty ? nil : rng.pick(targets)
            }
            if to == nil { to = freshPath(&rng) }
            guard let to, to != from, !to.isWithin(from) else { return nil }
            renames += 1
            guard (try? tree.rename(from, to: to)) != nil else { return nil }
            return ("mv \(from.escaped) \(to.escaped)", [.moved(from: from, to: to)])

        case .symlink:
            let candidates = paths([.regular, .symlink])
            let replace = !candidates.isEmpty && rng.chance(0.3)
            guard let path = replace ? rng.pick(candidates) : freshPath(&rng) else { return nil }
            let target = linkTarget(&rng)
            tree.makeLink(path, to: target)
            return ("ln -sf \(ByteEscaping.escape(target)) \(path.escaped)",
                    replace ? [.removed(path), .changed(path)] : [.changed(path)])

        case .touchLink:
            let links = paths([.symlink])
            guard !links.isEmpty else { return nil }
            let path = rng.pick(links)
            let t = pastTime()
            tree.modify(path) { $0.mtime = t }
            return ("touch -h -d \(t.seconds) \(path.escaped)", [.changed(path)])

        case .typeFlip:
            let candidates = paths([.regular, .directory, .symlink])
            guard !candidates.isEmpty else { return nil }
            let path = rng.pick(candidates)
            let old = tree.node(path)!.kind
            let new = rng.pick(([.regular, .directory, .symlink] as [FileKind]).filter { $0 != old })
            var events = removeEvents(path)
            tree.delete(path)
            switch new {
            case .regular:
                tree.writeFile(path, content(&rng))
                events += writeEvents(path, created: true, &rng)
            case .directory:
                tree.makeDirectory(path, mode: 0o755, mtime: nil)
                events.append(.changed(path))
            default:
                tree.makeLink(path, to: linkTarget(&rng))
                events.append(.changed(path))
            }
            return ("flip \(path.escaped) \(old) -> \(new)", events)

        case .special:
            guard let path = freshPath(&rng) else { return nil }
            tree.makeSpecial(path)
            return ("mkfifo \(path.escaped)", [.changed(path)])

        case .moveOut:
            // Moved out of the watched tree: the watcher reports only the top path.
            let candidates = paths([.regular, .directory, .symlink])
            guard !candidates.isEmpty else { return nil }
            let path = rng.pick(candidates)
            tree.delete(path)
            return ("mv \(path.escaped) out of the tree", [.removed(path)])

        case .populate:
            // `tar x` of a dozen or more files into a new directory: enough entries for the
            // mass-delete brake to matter when they go again.
            guard let path = freshPath(&rng) else { return nil }
            tree.makeDirectory(path, mode: 0o755, mtime: nil)
            var events: [WatchEvent] = [.changed(path)]
            let n = rng.int(11...18)
            for i in 0..<n {
                let child = path.appending(Array("p\(i)".utf8))
                tree.writeFile(child, content(&rng), mode: 0o644)
                events += writeEvents(child, created: true, &rng)
            }
            return ("populate \(path.escaped) with \(n) files", events)

        case .moveIn:
            // Moved in from outside: old mtimes, new inodes; the watcher reports the top
            // path, then lists the new directory and reports every entry below it.
            guard let path = freshPath(&rng) else { return nil }
            var events: [WatchEvent] = [.changed(path)]
            if rng.chance(0.4) {
                tree.writeFile(path, content(&rng), mode: rng.pick(Self.fileModes), mtime: pastTime())
                return ("mv file into \(path.escaped)", events)
            }
            tree.makeDirectory(path, mode: 0o755, mtime: nil)
            var directories = [path]
            for _ in 0..<rng.int(0...4) {
                let parent = rng.pick(directories)
                let child = parent.appending(rng.pick(Self.names))
                if exists(child) { continue }
                if rng.chance(0.25) && child.depth < 4 {
                    tree.makeDirectory(child, mode: rng.pick(Self.directoryModes), mtime: nil)
                    directories.append(child)
                } else {
                    tree.writeFile(child, content(&rng), mode: rng.pick(Self.fileModes), mtime: pastTime())
                }
                events.append(.changed(child))
            }
            for dir in directories.reversed() {
                let t = pastTime()
                tree.modify(dir) { $0.mtime = t }
            }
            return ("mv directory into \(path.escaped) (\(events.count - 1) entries)", events)
        }
    }
}
