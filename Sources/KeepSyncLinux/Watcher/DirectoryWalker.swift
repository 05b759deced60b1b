import Glibc
import KeepSyncCore

/// Watches directories, then lists them: the root and its tree at the start, each new
/// directory (recursively, so a `mkdir -p` chain loses nothing), and the whole tree again
/// when it must be rebuilt. Keeps the `WatchTree` in step with the watches it adds, and
/// counts the directories the watch limit (ENOSPC) leaves unwatched.
///
/// Every directory is opened with `O_NOFOLLOW` relative to its parent, from the root's
/// descriptor down, and watched through `/proc/self/fd/N` when there is one (see
/// `InotifyWatcher`). Runs on the thread that owns the session.
final class DirectoryWalker {
    /// A walk ended because `stop()` was called.
    struct Stopped: Error {}

    /// A directory being walked: its open descriptor and the subdirectories left to enter.
    private struct Frame {
        var fd: FileDescriptor
        var node: WatchNode
        var path: RelativePath
        var subdirectories: [[UInt8]]
    }

    /// How a new directory turned out.
    private enum Outcome {
        /// Watched (or gone, or not a directory any more).
        case done
        /// The parent is not where the tree says (a move not yet processed): retry later.
        case stale
    }

    static let mask = Inotify.create | Inotify.delete | Inotify.modify | Inotify.attrib | Inotify.closeWrite
        | Inotify.movedFrom | Inotify.movedTo | Inotify.deleteSelf | Inotify.moveSelf
        | Inotify.onlyDirectory | Inotify.excludeUnlinked
    /// How long a new directory whose parent is not where the tree says is retried.
    static let staleRetryLimit: Duration = .seconds(1)
    static let directoryFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW

    /// The watched directories.
    let tree: WatchTree
    private let inotify: FileDescriptor
    /// The root directory, opened once: every other directory is opened below it.
    private let rootFD: FileDescriptor
    private let rootPath: [UInt8]
    private let useProc: Bool
    /// openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS works here (Linux 5.6+).
    private let hasOpenat2: Bool
    private let excludes: ExcludeMatcher
    private let outbox: EventOutbox
    private let logger: Logger
    private let heartbeat: Heartbeat?
    private let stopRequested: () -> Bool
    private let clock = ContinuousClock()

    /// New directories whose parent was not where the tree said, and since when.
    private var deferred: [(parent: WatchNode, name: [UInt8], since: ContinuousClock.Instant)] = []
    /// Why a rescan must be reported (a directory could not be listed or opened).
    private var rescanReason: String?
    /// Per-walk guard against bind-mount loops.
    private var walkVisited: Set<FileIdentity> = []
    /// True while a walk rebuilds the tree (it marks the nodes it reaches).
    private var rebuilding = false

    /// Watches the root (opened as `rootFD`) and the tree below it, reporting nothing.
    /// Throws when the root itself cannot be watched, or `Stopped`.
    init(inotify: FileDescriptor, rootFD: FileDescriptor, rootPath: [UInt8], excludes: ExcludeMatcher,
         outbox: EventOutbox, logger: Logger, heartbeat: Heartbeat?, stopRequested: @escaping () -> Bool) throws {
        self.inotify = inotify
        self.rootFD = rootFD
        self.rootPath = rootPath
        self.useProc = Inotify.hasProcFileDescriptors
        hasOpenat2 = PosixFileSystem.confinedOpenWorks(rootFD)
        self.excludes = excludes
        self.outbox = outbox
        self.logger = logger
        self.heartbeat = heartbeat
        self.stopRequested = stopRequested
        let display = ByteEscaping.escape(rootPath)
        let fd: FileDescriptor
        do throws(Errno) { fd = try Sys.open(rootFD, [0x2E], O_RDONLY | O_DIRECTORY) } catch {
            throw KeepSyncError(error.code, "cannot watch \(display): open: \(error.text)", errno: error.rawValue)
        }
        let wd: Int32?
        do throws(Errno) {
            wd = try DirectoryWalker.addWatch(inotify, fd, path: .root, rootPath: rootPath, useProc: useProc)
        } catch {
            fd.close()
            throw KeepSyncError(error.code, "cannot watch \(display): inotify_add_watch: \(error.text)", errno: error.rawValue)
        }
        guard let wd else {
            fd.close()
            throw KeepSyncError(.watchLimitReached, "cannot watch \(display): inotify_add_watch: the watch limit is reached; raise it with `sysctl fs.inotify.max_user_watches=N`", errno: ENOSPC)
        }
        let identity = (try? fd.stat()).map { FileIdentity(device: $0.device, inode: $0.inode) }
            ?? FileIdentity(device: 0, inode: 0)
        tree = WatchTree(rootWatch: wd, identity: identity) { [inotify] in Inotify.removeWatch(inotify, $0) }
        walkVisited = [identity]
        defer { walkVisited = [] }
        try walk(from: list(fd, node: tree.root, path: .root, emit: false), emit: false)
    }

    /// True while new directories wait to be retried.
    var hasDeferred: Bool { !deferred.isEmpty }

    /// True when a rescan is to be reported.
    var hasRescanReason: Bool { rescanReason != nil }

    /// The reason for a rescan to report, once.
    func takeRescanReason() -> String? {
        defer { rescanReason = nil }
        return rescanReason
    }

    // MARK: New directories

    /// A directory appeared (created or moved in): watch it, then list it and report
    /// every entry, recursively. Deferred when the parent is not where the tree says.
    func newDirectory(parent: WatchNode, name: [UInt8]) {
        if case .stale = watchNewDirectory(parent: parent, name: name) {
            deferred.append((parent, name, clock.now))
        }
    }

    /// Retries new directories whose parent was not where the tree said; true when one
    /// could not be followed within `staleRetryLimit` (the tree must be rebuilt).
    func retryDeferred() throws -> Bool {
        let waiting = deferred
        deferred = []
        let now = clock.now
        var lost = false
        for item in waiting where !item.parent.detached {
            if stopRequested() { throw Stopped() }
            guard case .stale = watchNewDirectory(parent: item.parent, name: item.name) else { continue }
            if now - item.since < DirectoryWalker.staleRetryLimit {
                deferred.append(item)
            } else {
                lost = true
            }
        }
        return lost
    }

    private func watchNewDirectory(parent: WatchNode, name: [UInt8]) -> Outcome {
        guard !parent.detached else { return .done }
        guard let parentFD = open(parent) else { return .stale }
        defer { parentFD.close() }
        let path = parent.path.appending(name)
        let fd: FileDescriptor
        do throws(Errno) { fd = try Sys.open(parentFD, name, DirectoryWalker.directoryFlags) } catch {
            openFailed(error, path: path, emit: true)
            return .done
        }
        // Guard against loops (a bind mount of an ancestor) even where watches are missing.
        walkVisited = []
        var ancestor: WatchNode? = parent
        while let node = ancestor {
            walkVisited.insert(node.identity)
            ancestor = node.parent
        }
        rebuilding = false
        defer { walkVisited = [] }
        do {
            if let frame = enter(fd, parent: parent, name: name, path: path, emit: true) {
                try walk(from: frame, emit: true)
            } else {
                fd.close()
            }
        } catch {
            // Stopping: the thread ends right after.
        }
        return .done
    }

    /// Opens a node's directory from the root, never following a symlink, and checks it
    /// is the same directory; nil when the tree is behind the file system.
    func open(_ node: WatchNode) -> FileDescriptor? {
        let path = node.path
        var opened: FileDescriptor?
        if !path.isRoot, hasOpenat2 {
            // One call, confined below the root with no link followed: what the loop does.
            opened = try? Sys.open2(rootFD, path.bytes, DirectoryWalker.directoryFlags, resolve: PosixFileSystem.resolveFlags)
        } else {
            opened = try? Sys.open(rootFD, [0x2E], O_RDONLY | O_DIRECTORY)
            for name in node.names {
                guard let fd = opened else { break }
                opened = try? Sys.open(fd, name, DirectoryWalker.directoryFlags)
                fd.close()
            }
        }
        guard let fd = opened else { return nil }
        guard let stat = try? fd.stat(), FileIdentity(device: stat.device, inode: stat.inode) == node.identity else {
            fd.close()
            return nil
        }
        return fd
    }

    /// Watches an unwatched directory of the tree now; nil when the limit still says no
    /// (or it cannot be opened where the tree says).
    func watchExisting(_ node: WatchNode) -> Int32? {
        guard let fd = open(node) else { return nil }
        defer { fd.close() }
        return try? DirectoryWalker.addWatch(inotify, fd, path: node.path, rootPath: rootPath, useProc: useProc) ?? nil
    }

    // MARK: Rebuilding

    /// Rebuilds the watch tree from the file system: watches what is missing (the
    /// watch limit, events lost in an overflow), drops what is gone, keeps the rest.
    func rebuild() throws {
        tree.beginRebuild()
        walkVisited = [tree.root.identity]
        tree.markReached(tree.root)
        rebuilding = true
        // What a walk visited is dropped after it (8 MiB for 200,000 directories).
        defer {
            rebuilding = false
            walkVisited = []
        }
        guard let fd = try? Sys.open(rootFD, [0x2E], O_RDONLY | O_DIRECTORY) else { return }
        tree.unlinkChildren(tree.root)
        try walk(from: list(fd, node: tree.root, path: .root, emit: false), emit: false)
        tree.discardUnreached()
    }

    // MARK: Walking

    /// Adds a watch on an open directory; nil when the watch limit is reached.
    private static func addWatch(_ inotify: FileDescriptor, _ fd: FileDescriptor, path: RelativePath,
                                 rootPath: [UInt8], useProc: Bool) throws(Errno) -> Int32? {
        do throws(Errno) {
            if useProc {
                return try Inotify.addWatch(inotify, path: Inotify.procPath(fd), mask: mask)
            }
            var absolute = rootPath
            if !path.isRoot { absolute += [0x2F] + path.bytes }
            return try Inotify.addWatch(inotify, path: absolute, mask: mask | Inotify.dontFollow)
        } catch {
            if error.rawValue == ENOSPC { return nil }
            throw error
        }
    }

    /// Watches an opened directory and lists it. Nil (the caller closes `fd`) when it
    /// was seen already in this walk, loops back to an ancestor, or cannot be watched.
    private func enter(_ fd: FileDescriptor, parent: WatchNode, name: [UInt8], path: RelativePath, emit: Bool) -> Frame? {
        guard let stat = try? fd.stat() else { return nil }
        let identity = FileIdentity(device: stat.device, inode: stat.inode)
        guard walkVisited.insert(identity).inserted else { return nil }
        let wd: Int32?
        do throws(Errno) {
            wd = try DirectoryWalker.addWatch(inotify, fd, path: path, rootPath: rootPath, useProc: useProc)
        } catch {
            if error != .noSuchFileOrDirectory {
                logger.warning("inotify: cannot watch \(path.escaped): inotify_add_watch: \(error.text)")
            }
            return nil
        }
        let node: WatchNode
        if let wd, let existing = tree.node(for: wd) {
            // The directory is watched under another path: a move whose events are not
            // processed yet (or never came, when the target was not watched in time).
            // It is here now, so its node (and subtree) moves here; a MOVED_FROM still
            // pending for the old place then leaves it alone.
            if existing.isAncestor(of: parent) {
                logger.debug("inotify: \(path.escaped) loops back to \(existing.path.escaped); not followed")
                return nil
            }
            tree.move(existing, to: parent, name: name)
            // A rebuilding walk rebuilds the children; a new-directory walk re-finds them.
            if rebuilding { tree.unlinkChildren(existing) }
            tree.setIdentity(existing, identity)
            node = existing
        } else {
            node = tree.add(name, under: parent, wd: wd, identity: identity)
        }
        if rebuilding { tree.markReached(node) }
        return list(fd, node: node, path: path, emit: emit)
    }

    /// Lists a watched directory: reports its entries when asked, returns its subdirectories.
    private func list(_ fd: FileDescriptor, node: WatchNode, path: RelativePath, emit: Bool) -> Frame {
        var frame = Frame(fd: fd, node: node, path: path, subdirectories: [])
        let entries: [Inotify.Entry]
        do throws(Errno) { entries = try Inotify.entries(fd) } catch {
            logger.warning("inotify: cannot list \(path.escaped): \(error.text); rescanning")
            rescanReason = "cannot list \(path.escaped): \(error.text)"
            return frame
        }
        for entry in entries {
            let child = path.appending(entry.name)
            if excludes.excludes(child, isDirectory: entry.isDirectory) { continue }
            if emit { outbox.emit(.changed(child)) }
            if entry.isDirectory { frame.subdirectories.append(entry.name) }
        }
        return frame
    }

    /// Depth-first from `first`: each subdirectory is opened (O_NOFOLLOW) relative to its
    /// parent, watched, then listed (and its entries reported when `emitting`). Open
    /// descriptors: one per level.
    private func walk(from first: Frame, emit emitting: Bool) throws {
        var stack = [first]
        defer { for frame in stack { frame.fd.close() } }
        while !stack.isEmpty {
            if stopRequested() { throw Stopped() }
            heartbeat?.beat()
            guard let name = stack[stack.count - 1].subdirectories.popLast() else {
                stack.removeLast().fd.close()
                continue
            }
            let top = stack[stack.count - 1]
            let path = top.path.appending(name)
            let fd: FileDescriptor
            do throws(Errno) { fd = try Sys.open(top.fd, name, DirectoryWalker.directoryFlags) } catch {
                openFailed(error, path: path, emit: emitting)
                continue
            }
            guard let frame = enter(fd, parent: top.node, name: name, path: path, emit: emitting) else {
                fd.close()
                continue
            }
            stack.append(frame)
        }
    }

    /// A subdirectory could not be opened for watching.
    private func openFailed(_ error: Errno, path: RelativePath, emit: Bool) {
        switch error.rawValue {
        case ENOENT:
            break  // gone again; its removal is reported by its parent
        case ENOTDIR, ELOOP:
            if emit { outbox.emit(.changed(path)) }  // replaced by a file or a link
        case EMFILE, ENFILE:
            logger.error("inotify: cannot watch \(path.escaped): \(error.text)")
            rescanReason = "cannot watch \(path.escaped): \(error.text)"
        default:
            logger.warning("inotify: cannot watch \(path.escaped): \(error.text)")
        }
    }
}
