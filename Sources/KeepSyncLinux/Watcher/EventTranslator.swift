import KeepSyncCore

/// Turns raw inotify events into `WatchEvent`s: the watch descriptor and name become a
/// path through the `WatchTree`, moves are paired by cookie (`MovePairer`), a new
/// directory goes to the `DirectoryWalker` (watched, then listed), excluded names only
/// report their directory's change, the root's own events say when it vanished.
/// Runs on the watcher thread.
final class EventTranslator {
    /// Why the watch tree must be rebuilt.
    enum Trouble {
        /// The kernel's event queue overflowed: events were lost.
        case overflow
        /// A move contradicts the tree (a directory paired below itself).
        case outOfStep
    }

    /// How long a MOVED_FROM waits for its MOVED_TO.
    static let pairingWindow: Duration = .milliseconds(5)

    /// True once the source root vanished or moved: nothing more is watched.
    private(set) var rootGone = false
    private let rootPath: [UInt8]
    private let excludes: ExcludeMatcher
    private let walker: DirectoryWalker
    private var tree: WatchTree { walker.tree }
    private let outbox: EventOutbox
    private let logger: Logger
    private let clock = ContinuousClock()
    private var moves = MovePairer<ContinuousClock.Instant>(window: EventTranslator.pairingWindow)

    /// A translator reporting to `outbox`, walking new directories with `walker`.
    init(rootPath: [UInt8], excludes: ExcludeMatcher, walker: DirectoryWalker, outbox: EventOutbox, logger: Logger) {
        self.rootPath = rootPath
        self.excludes = excludes
        self.walker = walker
        self.outbox = outbox
        self.logger = logger
    }

    /// The nearest instant a waiting MOVED_FROM expires.
    var nextMoveDeadline: ContinuousClock.Instant? { moves.nextDeadline }

    /// Reports the MOVED_FROMs whose window passed at `now` (of reads before `readIndex`,
    /// when given) as moved out of the tree.
    func expireMoves(at now: ContinuousClock.Instant, readBefore readIndex: Int? = nil) {
        emit(moves.expire(at: now, readBefore: readIndex, in: tree))
    }

    /// Translates one raw event read in read `readIndex`; returns why the tree must be
    /// rebuilt, when it must.
    func handle(_ event: Inotify.Event, readIndex: Int) -> Trouble? {
        if event.wd == -1 || event.has(Inotify.overflow) {
            logger.warning("inotify event queue overflowed (fs.inotify.max_queued_events); rescanning")
            return .overflow
        }
        if event.has(Inotify.ignored) {
            watchVanished(event.wd)
            return nil
        }
        guard let node = tree.node(for: event.wd) else { return nil }
        if event.name.isEmpty {
            if node == tree.root {
                if event.has(Inotify.deleteSelf | Inotify.moveSelf | Inotify.unmount) {
                    rootVanished()
                } else if event.has(Inotify.attrib) {
                    outbox.emit(.changed(.root))
                }
            }
            return nil
        }
        let isDirectory = event.has(Inotify.isDirectory)
        let path = node.path.appending(event.name)
        let excluded = excludes.excludes(path, isDirectory: isDirectory)
        // A later event on a path waiting as a move source ends the wait (keeps the order).
        emit(moves.supersede(by: path, cookie: event.cookie, in: tree))
        if event.has(Inotify.movedFrom) {
            moves.departed(cookie: event.cookie, name: event.name, from: node, path: path, isDirectory: isDirectory,
                           excluded: excluded, readIndex: readIndex, now: clock.now)
            return nil
        }
        if event.has(Inotify.movedTo) {
            let arrival = moves.arrived(cookie: event.cookie, name: event.name, in: node, path: path,
                                        isDirectory: isDirectory, excluded: excluded, tree: tree)
            emit(arrival.events)
            if arrival.newDirectory { walker.newDirectory(parent: node, name: event.name) }
            return arrival.outOfStep ? .outOfStep : nil
        }
        if excluded {
            // Not mirrored, but an entry created or removed changes its directory's
            // mtime: the manager fixes the directory (and copies nothing).
            if event.has(Inotify.create | Inotify.delete) { outbox.emit(.changed(path)) }
            return nil
        }
        if event.has(Inotify.create) {
            outbox.emit(.changed(path))
            if isDirectory { walker.newDirectory(parent: node, name: event.name) }
        }
        if event.has(Inotify.delete) {
            outbox.emit(.removed(path))
            if isDirectory, let child = node.child(event.name) { tree.removeSubtree(child) }
        }
        if event.has(Inotify.modify | Inotify.attrib) { outbox.emit(.changed(path)) }
        if event.has(Inotify.closeWrite) { outbox.emit(.closedAfterWrite(path)) }
        return nil
    }

    /// The kernel dropped a watch (its directory is gone, or we removed it).
    private func watchVanished(_ wd: Int32) {
        guard let node = tree.watchVanished(wd) else { return }
        if node == tree.root {
            rootVanished()
            return
        }
        tree.removeSubtree(node)
    }

    private func rootVanished() {
        guard !rootGone else { return }
        rootGone = true
        logger.error("inotify: the source root \(ByteEscaping.escape(rootPath)) vanished or moved")
        outbox.emit(.rescan(reason: "source root vanished"))
    }

    private func emit(_ events: [WatchEvent]) {
        for event in events { outbox.emit(event) }
    }
}
