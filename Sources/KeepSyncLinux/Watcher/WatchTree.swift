import KeepSyncCore

/// The watched directories as a tree, and the map from watch descriptor to directory.
/// Pure bookkeeping: a watch dropped from the tree is handed to `release` (which removes
/// it from the kernel), in the order the tree lets go of it.
///
/// Compact: one 48-byte entry per directory in one array (children as a linked list of
/// siblings), names in one byte arena and a single open-addressing table from (parent,
/// name) to child. A node per directory as an object, with its name array and a dictionary
/// of children, took 196 bytes a directory: 38 MiB for 200,000.
final class WatchTree {
    private struct Entry {
        var identity: FileIdentity
        var wd: Int32 = -1
        var parent: Int32 = -1
        var firstChild: Int32 = -1
        var next: Int32 = -1
        var previous: Int32 = -1
        var nameStart: UInt32 = 0
        var generation: UInt32 = 0
        var nameLength: UInt16 = 0
        var flags: UInt8 = 0
    }

    private static let live: UInt8 = 1, linked: UInt8 = 2, reached: UInt8 = 4

    private var entries: [Entry] = []
    private var freeSlots: [Int32] = []
    private var arena: [UInt8] = []
    private var garbage = 0
    /// (parent, name) to child, for linked entries: slot index, -1 empty, -2 deleted.
    private var table = [Int32](repeating: -1, count: 16)
    private var tableUsed = 0
    private var linkedCount = 0

    /// The source root's node (slot 0, never freed).
    var root: WatchNode { handle(0) }
    /// Watched directories' slots by watch descriptor.
    private(set) var watches: [Int32: Int32] = [:]
    /// Directories the watch limit left unwatched.
    private(set) var unwatched: Set<WatchNode> = []
    /// Directories left unwatched since the last `takeNewlyUnwatched`.
    private var newlyUnwatched: [WatchNode] = []
    private let release: (Int32) -> Void

    /// A tree holding only the root, watched as `rootWatch`.
    init(rootWatch: Int32, identity: FileIdentity, release: @escaping (Int32) -> Void) {
        self.release = release
        let index = allocate(name: [], parent: -1, wd: rootWatch, identity: identity)
        entries[Int(index)].flags = Self.live
        watches[rootWatch] = index
    }

    // MARK: Reading a node

    private func handle(_ index: Int32) -> WatchNode {
        WatchNode(index: index, generation: entries[Int(index)].generation, tree: self)
    }

    /// True while `node` is in the tree.
    func holds(_ node: WatchNode) -> Bool {
        let e = entries[Int(node.index)]
        return e.generation == node.generation && e.flags & Self.live != 0
    }

    func wd(of node: WatchNode) -> Int32? {
        let wd = entries[Int(node.index)].wd
        return wd < 0 ? nil : wd
    }

    func name(of node: WatchNode) -> [UInt8] {
        let e = entries[Int(node.index)]
        return Array(arena[Int(e.nameStart)..<Int(e.nameStart) + Int(e.nameLength)])
    }

    func parent(of node: WatchNode) -> WatchNode? {
        let p = entries[Int(node.index)].parent
        return p < 0 ? nil : handle(p)
    }

    func identity(of node: WatchNode) -> FileIdentity { entries[Int(node.index)].identity }

    /// A directory found again under its name, swapped for another one.
    func setIdentity(_ node: WatchNode, _ identity: FileIdentity) { entries[Int(node.index)].identity = identity }

    func firstChild(of node: WatchNode) -> WatchNode? {
        let c = entries[Int(node.index)].firstChild
        return c < 0 ? nil : handle(c)
    }

    /// The subdirectories held below `node`.
    func children(of node: WatchNode) -> [WatchNode] {
        var out: [WatchNode] = []
        var c = entries[Int(node.index)].firstChild
        while c >= 0 {
            out.append(handle(c))
            c = entries[Int(c)].next
        }
        return out
    }

    func child(of node: WatchNode, named name: [UInt8]) -> WatchNode? {
        let slot = name.withUnsafeBytes { find(parent: node.index, name: $0) }
        return slot.map(handle)
    }

    /// The path of `node` relative to the root.
    func path(of node: WatchNode) -> RelativePath {
        var chain: [Int32] = []
        var i = node.index
        while entries[Int(i)].parent >= 0 {
            chain.append(i)
            i = entries[Int(i)].parent
        }
        var bytes: [UInt8] = []
        for i in chain.reversed() {
            let e = entries[Int(i)]
            if !bytes.isEmpty { bytes.append(0x2F) }
            bytes += arena[Int(e.nameStart)..<Int(e.nameStart) + Int(e.nameLength)]
        }
        return RelativePath(bytes: bytes)
    }

    /// The directory watched as `wd`.
    func node(for wd: Int32) -> WatchNode? { watches[wd].map(handle) }

    /// The path of the directory watched as `wd`.
    func path(of wd: Int32) -> RelativePath? { node(for: wd)?.path }

    // MARK: Changing the tree

    /// Adds `name` below `parent` (replacing what was there, with its subtree): watched as
    /// `wd`, or unwatched when nil.
    @discardableResult
    func add(_ name: [UInt8], under parent: WatchNode, wd: Int32?, identity: FileIdentity) -> WatchNode {
        if let old = child(of: parent, named: name) { removeSubtree(old) }
        let index = allocate(name: name, parent: parent.index, wd: wd ?? -1, identity: identity)
        entries[Int(index)].flags = Self.live
        link(index)
        let node = handle(index)
        if let wd {
            watches[wd] = index
        } else {
            unwatched.insert(node)
            newlyUnwatched.append(node)
        }
        return node
    }

    /// The directories left unwatched since the last call (for a first look at them).
    func takeNewlyUnwatched() -> [WatchNode] {
        defer { newlyUnwatched = [] }
        return newlyUnwatched.filter { !$0.detached && unwatched.contains($0) }
    }

    /// An unwatched directory is watched now, as `wd`.
    func watched(_ node: WatchNode, as wd: Int32) {
        guard unwatched.remove(node) != nil else { return }
        entries[Int(node.index)].wd = wd
        watches[wd] = node.index
    }

    /// Moves a node (and so its subtree) to a new place, replacing what was there. The
    /// caller makes sure `parent` is not below `node`.
    func move(_ node: WatchNode, to parent: WatchNode, name: [UInt8]) {
        unlink(node.index)
        if let existing = child(of: parent, named: name), existing != node { removeSubtree(existing) }
        let e = entries[Int(node.index)]
        garbage += Int(e.nameLength)
        entries[Int(node.index)].nameStart = store(name)
        entries[Int(node.index)].nameLength = UInt16(name.count)
        entries[Int(node.index)].parent = parent.index
        link(node.index)
        compactArenaIfWasteful()
    }

    /// Lets go of the subdirectories below `node` (a rebuild finds them again, or drops
    /// them); they keep their own subtrees.
    func unlinkChildren(_ node: WatchNode) {
        var c = entries[Int(node.index)].firstChild
        while c >= 0 {
            let next = entries[Int(c)].next
            unlink(c)
            c = next
        }
    }

    /// Removes a node and everything below it, releasing their watches.
    func removeSubtree(_ top: WatchNode) {
        guard holds(top) else { return }
        var order: [Int32] = []
        var stack = [top.index]
        while let i = stack.popLast() {
            order.append(i)
            var c = entries[Int(i)].firstChild
            while c >= 0 {
                stack.append(c)
                c = entries[Int(c)].next
            }
        }
        for i in order { releaseWatch(i) }
        for i in order.reversed() { free(i) }
        compactArenaIfWasteful()
    }

    /// The kernel dropped the watch `wd`: forgets it and returns its node (still in the tree).
    func watchVanished(_ wd: Int32) -> WatchNode? {
        guard let index = watches.removeValue(forKey: wd) else { return nil }
        entries[Int(index)].wd = -1
        return handle(index)
    }

    // MARK: Rebuilding

    /// Starts a rebuild: every node counts as not reached (hand the ones the rebuild
    /// reaches to `markReached`); the unwatched list starts empty again. Returns how many
    /// nodes the tree holds.
    @discardableResult
    func beginRebuild() -> Int {
        var held = 0
        for i in entries.indices where entries[i].flags & Self.live != 0 {
            entries[i].flags &= ~Self.reached
            held += 1
        }
        unwatched = []
        return held
    }

    /// A rebuild reached `node`.
    func markReached(_ node: WatchNode) {
        guard holds(node) else { return }
        entries[Int(node.index)].flags |= Self.reached
    }

    /// Ends a rebuild: drops (and releases) the nodes it did not reach.
    func discardUnreached() {
        var dropped: [Int32] = []
        for i in entries.indices where entries[i].flags & (Self.live | Self.reached) == Self.live {
            dropped.append(Int32(i))
        }
        for i in dropped { releaseWatch(i) }
        for i in dropped { free(i) }
        compactArenaIfWasteful()
    }

    // MARK: Storage

    private func allocate(name: [UInt8], parent: Int32, wd: Int32, identity: FileIdentity) -> Int32 {
        let start = store(name)
        let entry = Entry(identity: identity, wd: wd, parent: parent, nameStart: start, nameLength: UInt16(name.count))
        if let i = freeSlots.popLast() {
            let generation = entries[Int(i)].generation
            entries[Int(i)] = entry
            entries[Int(i)].generation = generation
            return i
        }
        entries.append(entry)
        return Int32(entries.count - 1)
    }

    private func store(_ name: [UInt8]) -> UInt32 {
        let start = UInt32(arena.count)
        arena += name
        return start
    }

    /// Releases the watch of slot `i` (when it is the one the tree maps), and forgets it
    /// as unwatched.
    private func releaseWatch(_ i: Int32) {
        let wd = entries[Int(i)].wd
        if wd >= 0, watches[wd] == i {
            release(wd)
            watches[wd] = nil
        }
        unwatched.remove(handle(i))
    }

    /// Takes slot `i` out of the tree; its handles turn detached.
    private func free(_ i: Int32) {
        unlinkChildren(handle(i))
        unlink(i)
        garbage += Int(entries[Int(i)].nameLength)
        entries[Int(i)].flags = 0
        entries[Int(i)].generation &+= 1
        entries[Int(i)].wd = -1
        freeSlots.append(i)
    }

    /// Puts slot `i` first among its parent's children, and in the table.
    private func link(_ i: Int32) {
        let p = entries[Int(i)].parent
        guard p >= 0, entries[Int(i)].flags & Self.linked == 0 else { return }
        let first = entries[Int(p)].firstChild
        entries[Int(i)].next = first
        entries[Int(i)].previous = -1
        if first >= 0 { entries[Int(first)].previous = i }
        entries[Int(p)].firstChild = i
        entries[Int(i)].flags |= Self.linked
        insertIntoTable(i)
    }

    /// Takes slot `i` out of its parent's children and the table; it keeps its parent.
    private func unlink(_ i: Int32) {
        guard entries[Int(i)].flags & Self.linked != 0 else { return }
        let e = entries[Int(i)]
        if e.previous >= 0 { entries[Int(e.previous)].next = e.next } else { entries[Int(e.parent)].firstChild = e.next }
        if e.next >= 0 { entries[Int(e.next)].previous = e.previous }
        entries[Int(i)].next = -1
        entries[Int(i)].previous = -1
        entries[Int(i)].flags &= ~Self.linked
        removeFromTable(i)
    }

    // Names are hashed and compared in place in the arena (raw buffers, for speed: the
    // tree holds a name per watched directory, up to millions).
    private func bucket(parent: Int32, name: UnsafeRawBufferPointer) -> Int {
        var hasher = Hasher()
        hasher.combine(parent)
        hasher.combine(bytes: name)
        return hasher.finalize() & (table.count - 1)
    }

    private func nameMatches(_ i: Int32, _ name: UnsafeRawBufferPointer) -> Bool {
        let e = entries[Int(i)]
        guard Int(e.nameLength) == name.count else { return false }
        return arena.withUnsafeBytes { a in
            name.elementsEqual(UnsafeRawBufferPointer(rebasing: a[Int(e.nameStart)..<Int(e.nameStart) + name.count]))
        }
    }

    private func find(parent: Int32, name: UnsafeRawBufferPointer) -> Int32? {
        var b = bucket(parent: parent, name: name)
        while true {
            let i = table[b]
            if i == -1 { return nil }
            if i >= 0, entries[Int(i)].parent == parent, nameMatches(i, name) { return i }
            b = (b + 1) & (table.count - 1)
        }
    }

    private func insertIntoTable(_ i: Int32) {
        if (tableUsed + 1) * 2 > table.count { rehash(minimum: (linkedCount + 1) * 4) }
        let e = entries[Int(i)]
        var b = arena.withUnsafeBytes { a in
            bucket(parent: e.parent, name: UnsafeRawBufferPointer(rebasing: a[Int(e.nameStart)..<Int(e.nameStart) + Int(e.nameLength)]))
        }
        while table[b] >= 0 { b = (b + 1) & (table.count - 1) }
        if table[b] == -1 { tableUsed += 1 }
        table[b] = i
        linkedCount += 1
    }

    private func removeFromTable(_ i: Int32) {
        let e = entries[Int(i)]
        var b = arena.withUnsafeBytes { a in
            bucket(parent: e.parent, name: UnsafeRawBufferPointer(rebasing: a[Int(e.nameStart)..<Int(e.nameStart) + Int(e.nameLength)]))
        }
        while table[b] != i { b = (b + 1) & (table.count - 1) }
        table[b] = -2
        linkedCount -= 1
    }

    private func rehash(minimum: Int) {
        var capacity = 16
        while capacity < minimum { capacity *= 2 }
        table = [Int32](repeating: -1, count: capacity)
        tableUsed = 0
        linkedCount = 0
        for i in entries.indices where entries[i].flags & Self.linked != 0 { insertIntoTable(Int32(i)) }
    }

    /// Copies the live names into a new arena once most of it is names gone.
    private func compactArenaIfWasteful() {
        guard garbage > 65_536, garbage * 2 > arena.count else { return }
        var fresh: [UInt8] = []
        fresh.reserveCapacity(arena.count - garbage)
        for i in entries.indices where entries[i].flags & Self.live != 0 {
            let e = entries[i]
            entries[i].nameStart = UInt32(fresh.count)
            fresh += arena[Int(e.nameStart)..<Int(e.nameStart) + Int(e.nameLength)]
        }
        arena = fresh
        garbage = 0
    }
}
