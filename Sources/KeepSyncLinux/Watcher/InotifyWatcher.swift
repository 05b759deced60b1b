import Dispatch
import Glibc
import KeepSyncCore
import Synchronization

/// Watches a source tree with inotify and reports changes as `WatchEvent`s.
///
/// Every non-excluded directory gets a watch (files are covered by their directory's).
/// One dedicated thread blocks in `poll` on the inotify descriptor and a wake pipe; it
/// alone owns the watch map. A new directory is watched first and listed afterwards,
/// recursively, so nothing created in it right away is lost. Moves are paired by cookie.
/// A queue overflow, a read error or the watch limit leads to `.rescan`, never to a gap.
///
/// Watches are added through `/proc/self/fd/N` of a directory opened with `O_NOFOLLOW`
/// relative to its parent, so a symlink swapped in cannot redirect a watch outside the
/// tree. (That path is itself a link, so `IN_DONT_FOLLOW` is left out there; without
/// `/proc` the absolute path is used with `IN_DONT_FOLLOW`, which only guards the last
/// component: an intermediate directory swapped for a symlink in the instant between
/// the open and the watch could redirect it.)
///
/// After `.rescan(reason: "source root vanished")` nothing more is watched: `stop()` and
/// `start` again once the root is back.
public final class InotifyWatcher: WatcherProviding {
    /// Absolute path bytes of the source root.
    public let rootPath: [UInt8]
    private let logger: Logger
    private let limitRescanInterval: Duration
    private let eventLimit: Int
    fileprivate let heartbeat: Heartbeat?
    fileprivate let shared = Mutex(Shared())

    /// What the caller's threads and the watcher thread share.
    fileprivate struct Shared {
        /// Counts sessions; each `start` gets the next number.
        var generation = 0
        /// The running session, nil when stopped.
        var active: Int?
        /// The running session's wake pipe (write end).
        var wake: (generation: Int, fd: FileDescriptor)?
        /// The running session's stream.
        var continuation: AsyncStream<WatchEvent>.Continuation?
        var watched = 0
        var unwatched = 0
    }

    /// A watcher for the directory at `rootPath` (absolute path bytes). While the inotify
    /// watch limit leaves directories unwatched, a `.rescan` is reported every
    /// `limitRescanInterval`. At most `eventLimit` events wait in the stream: past that
    /// the watcher stops reading (the kernel's queue holds what comes, or overflows) and
    /// owes one `.rescan`, delivered as soon as there is room. Walks beat `heartbeat`
    /// once per directory.
    public init(rootPath: [UInt8], logger: Logger = .silent, limitRescanInterval: Duration = .seconds(30),
                eventLimit: Int = 65_536, heartbeat: Heartbeat? = nil) {
        self.heartbeat = heartbeat
        self.rootPath = rootPath
        self.logger = logger
        self.limitRescanInterval = limitRescanInterval
        self.eventLimit = eventLimit
    }

    /// Directories watched now.
    public var watchedDirectories: Int { shared.withLock { $0.watched } }

    /// Directories that could not be watched because of `fs.inotify.max_user_watches`.
    public var unwatchedDirectories: Int { shared.withLock { $0.unwatched } }

    /// Stops a running session.
    deinit { stop() }

    /// Watches the root and every non-excluded directory below it, then returns the stream;
    /// everything that changes after the return is reported. Throws when the root cannot
    /// be watched at all (`.notFound`, `.permissionDenied`, `.watchLimitReached`, …) or
    /// when the watcher is already running (`.conflict`).
    public func start(excluding excludes: ExcludeMatcher) throws -> AsyncStream<WatchEvent> {
        let generation = try shared.withLock { (s) throws(KeepSyncError) -> Int in
            guard s.active == nil else { throw KeepSyncError(.conflict, "the inotify watcher is already running") }
            s.generation += 1
            s.active = s.generation
            return s.generation
        }
        let (stream, continuation) = AsyncStream.makeStream(of: WatchEvent.self, bufferingPolicy: .bufferingOldest(eventLimit))
        let session: Session
        do {
            session = try Session(watcher: self, generation: generation, excludes: excludes,
                                  continuation: continuation, logger: logger, interval: limitRescanInterval)
        } catch is Stopped {
            // stop() came while the tree was being walked.
            continuation.finish()
            return stream
        } catch {
            shared.withLock { if $0.active == generation { $0.active = nil } }
            continuation.finish()
            throw error
        }
        let running = shared.withLock { s -> Bool in
            guard s.active == generation else { return false }
            s.wake = (generation, session.wakeWrite)
            s.continuation = continuation
            return true
        }
        guard running else {
            // stop() came while the tree was being walked.
            session.close()
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in self?.stop(generation: generation) }
        // A serial queue gets a thread of its own: the poll loop blocks in it until stop.
        DispatchQueue(label: "keepsync.inotify").async { session.run() }
        return stream
    }

    /// Stops watching: the stream ends now, the thread closes its descriptors and exits.
    public func stop() {
        stop(generation: nil)
    }

    /// Stops the session `generation` (any running one when nil).
    private func stop(generation: Int?) {
        let continuation = shared.withLock { s -> AsyncStream<WatchEvent>.Continuation? in
            guard let active = s.active, generation == nil || generation == active else { return nil }
            if let wake = s.wake, wake.generation == active { Inotify.wake(wake.fd) }
            s.active = nil
            defer { s.continuation = nil }
            return s.continuation
        }
        continuation?.finish()
    }
}

// MARK: - The watcher thread's state

extension InotifyWatcher {
    /// One directory of the tree: its watch (nil when the limit left it unwatched), its
    /// place (so a moved directory takes its subtree along) and its identity.
    private final class Node {
        var wd: Int32?
        var name: [UInt8]
        weak var parent: Node?
        var children: [[UInt8]: Node] = [:]
        var identity: Identity
        /// Set once the node left the tree.
        var detached = false

        init(wd: Int32?, name: [UInt8], parent: Node?, identity: Identity) {
            self.wd = wd
            self.name = name
            self.parent = parent
            self.identity = identity
        }

        /// The names from the root down to this node.
        var names: [[UInt8]] {
            var names: [[UInt8]] = []
            var node = self
            while let parent = node.parent {
                names.append(node.name)
                node = parent
            }
            return names.reversed()
        }

        /// The path relative to the root.
        var path: RelativePath {
            var bytes: [UInt8] = []
            for name in names {
                if !bytes.isEmpty { bytes.append(0x2F) }
                bytes.append(contentsOf: name)
            }
            return RelativePath(bytes: bytes)
        }
    }

    /// Device and inode of a directory.
    private struct Identity: Hashable {
        var device: UInt64
        var inode: UInt64
    }

    /// A MOVED_FROM waiting for its MOVED_TO.
    private struct PendingMove {
        var cookie: UInt32
        var parent: Node
        var name: [UInt8]
        var path: RelativePath
        var isDirectory: Bool
        var excluded: Bool
        /// The moved directory's node, when it is one.
        var node: Node?
        /// The read that brought it.
        var readIndex: Int
        var deadline: ContinuousClock.Instant
    }

    /// A directory being walked: its open descriptor and the subdirectories left to enter.
    private struct Frame {
        var fd: FileDescriptor
        var node: Node
        var path: RelativePath
        var subdirectories: [[UInt8]]
    }

    /// How a new directory turned out.
    private enum Outcome {
        /// Watched (or gone, or not a directory any more).
        case done
        /// The parent is not where the map says (a move not yet processed): retry later.
        case stale
    }

    /// A walk ended because `stop()` was called.
    private struct Stopped: Error {}

    /// The state of one `start`…`stop`. Owned by one thread at a time: the caller of
    /// `start` while the initial watches are added, then the watcher thread alone;
    /// `@unchecked Sendable` only for that single handover to the thread.
    private final class Session: @unchecked Sendable {
        /// Weak, so that dropping the watcher without `stop()` still ends the thread (`deinit`).
        weak var watcher: InotifyWatcher?
        let rootPath: [UInt8]
        let generation: Int
        let excludes: ExcludeMatcher
        let continuation: AsyncStream<WatchEvent>.Continuation
        let logger: Logger
        let interval: Duration
        let heartbeat: Heartbeat?
        let inotify: FileDescriptor
        let wakeRead: FileDescriptor
        let wakeWrite: FileDescriptor
        /// The root directory, opened once: every other directory is opened below it.
        let rootFD: FileDescriptor
        let useProc: Bool
        let clock = ContinuousClock()

        var root: Node!
        var watches: [Int32: Node] = [:]
        var unwatched: [ObjectIdentifier: Node] = [:]
        var pending: [PendingMove] = []
        var deferred: [(parent: Node, name: [UInt8], since: ContinuousClock.Instant)] = []
        var buffer = [UInt8](repeating: 0, count: Inotify.bufferSize)
        var readIndex = 0
        /// Why the watch tree must be rebuilt and a rescan reported, when it must.
        var reconcileReason: String?
        var rescanReason: String?
        var rootGone = false
        var limitWarned = false
        var nextLimitRescan: ContinuousClock.Instant?
        var backoff: Duration = .zero
        var backoffUntil: ContinuousClock.Instant?
        /// Per-walk guard against bind-mount loops.
        var walkVisited: Set<Identity> = []
        /// Nodes reached by a reconciling walk.
        var reached: Set<ObjectIdentifier>?

        static let mask = Inotify.create | Inotify.delete | Inotify.modify | Inotify.attrib | Inotify.closeWrite
            | Inotify.movedFrom | Inotify.movedTo | Inotify.deleteSelf | Inotify.moveSelf
            | Inotify.onlyDirectory | Inotify.excludeUnlinked
        static let pairingWindow: Duration = .milliseconds(5)
        static let staleRetryLimit: Duration = .seconds(1)
        static let directoryFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW

        init(watcher: InotifyWatcher, generation: Int, excludes: ExcludeMatcher,
             continuation: AsyncStream<WatchEvent>.Continuation, logger: Logger, interval: Duration) throws {
            self.watcher = watcher
            self.rootPath = watcher.rootPath
            self.generation = generation
            self.excludes = excludes
            self.continuation = continuation
            self.logger = logger
            self.interval = interval
            self.heartbeat = watcher.heartbeat
            self.useProc = Inotify.hasProcFileDescriptors
            let display = ByteEscaping.escape(rootPath)
            do throws(Errno) {
                inotify = try Inotify.initialize()
            } catch {
                if error.rawValue == EMFILE {
                    throw KeepSyncError(.watchLimitReached, "inotify_init1: too many inotify instances; raise fs.inotify.max_user_instances (sysctl fs.inotify.max_user_instances=N)", errno: error.rawValue)
                }
                throw error.error("inotify_init1")
            }
            let pipe: (read: FileDescriptor, write: FileDescriptor)
            do throws(Errno) { pipe = try Inotify.makePipe() } catch {
                inotify.close()
                throw error.error("pipe")
            }
            wakeRead = pipe.read
            wakeWrite = pipe.write
            do throws(Errno) {
                rootFD = try Sys.open(.currentDirectory, rootPath, O_RDONLY | O_DIRECTORY)
            } catch {
                inotify.close()
                wakeRead.close()
                wakeWrite.close()
                throw KeepSyncError(error.code, "cannot watch \(display): open: \(error.text)", errno: error.rawValue)
            }
            do {
                try watchRoot()
            } catch {
                close()
                throw error
            }
            publish()
            noteLimit()
        }

        /// Watches the root and the tree below it; throws when the root itself cannot be watched.
        private func watchRoot() throws {
            let display = ByteEscaping.escape(rootPath)
            let fd: FileDescriptor
            do throws(Errno) { fd = try Sys.open(rootFD, [0x2E], O_RDONLY | O_DIRECTORY) } catch {
                throw KeepSyncError(error.code, "cannot watch \(display): open: \(error.text)", errno: error.rawValue)
            }
            let wd: Int32?
            do throws(Errno) { wd = try addWatch(fd, path: .root) } catch {
                fd.close()
                throw KeepSyncError(error.code, "cannot watch \(display): inotify_add_watch: \(error.text)", errno: error.rawValue)
            }
            guard let wd else {
                fd.close()
                throw KeepSyncError(.watchLimitReached, "cannot watch \(display): inotify_add_watch: the watch limit is reached; raise it with `sysctl fs.inotify.max_user_watches=N`", errno: ENOSPC)
            }
            let identity = (try? fd.stat()).map { Identity(device: $0.device, inode: $0.inode) } ?? Identity(device: 0, inode: 0)
            let node = Node(wd: wd, name: [], parent: nil, identity: identity)
            root = node
            watches[wd] = node
            walkVisited = [identity]
            try walk(from: list(fd, node: node, path: .root, emit: false), emit: false)
        }

        // MARK: Running

        /// The thread's loop: poll, read, handle, until `stop()`.
        func run() {
            defer { shutdown() }
            while !stopRequested {
                let now = clock.now
                let ready: (events: Bool, wake: Bool)
                do throws(Errno) {
                    if owesRescan {
                        // The stream is full: read nothing until the owed rescan fits.
                        let r = try Inotify.poll(wakeRead, wakeRead, timeoutMilliseconds: 20)
                        if r.first || stopRequested { return }
                        if case .enqueued = continuation.yield(.rescan(reason: "changes came faster than they were handled")) {
                            owesRescan = false
                        }
                        continue
                    }
                    if let until = backoffUntil, now < until {
                        let r = try Inotify.poll(wakeRead, wakeRead, timeoutMilliseconds: milliseconds(until - now))
                        ready = (false, r.first)
                    } else {
                        let r = try Inotify.poll(inotify, wakeRead, timeoutMilliseconds: timeout(now))
                        ready = (r.first, r.second)
                    }
                } catch {
                    failed("poll", error)
                    usleep(100_000)  // poll itself is failing: do not spin
                    continue
                }
                if ready.wake || stopRequested { return }
                var queueEmpty = !ready.events
                if ready.events, backoffUntil.map({ clock.now >= $0 }) ?? true {
                    queueEmpty = drain()
                }
                do {
                    try afterBatch(queueEmpty: queueEmpty)
                } catch {
                    return
                }
            }
        }

        /// Reads until the queue is empty (or a bound, to notice `stop()`); true when empty.
        private func drain() -> Bool {
            for _ in 0..<64 {
                let events: [Inotify.Event]?
                do throws(Errno) { events = try Inotify.read(inotify, buffer: &buffer) } catch {
                    failed("read", error)
                    return true
                }
                guard let events else { return true }
                backoff = .zero
                readIndex += 1
                logger.debug("inotify: read \(events.count) events")
                for event in events { handle(event) }
                let now = clock.now
                flushMoves { $0.readIndex < readIndex && now >= $0.deadline }
                if stopRequested { return false }
            }
            return false
        }

        /// Flushes expired moves, retries deferred directories, rebuilds after an overflow,
        /// reports the watch limit, publishes the counters.
        private func afterBatch(queueEmpty: Bool) throws {
            var now = clock.now
            if queueEmpty { flushMoves { now >= $0.deadline } }
            if !deferred.isEmpty { try retryDeferred() }
            if let reason = reconcileReason {
                reconcileReason = nil
                if !rootGone { try reconcile() }
                emit(.rescan(reason: reason))
            }
            if let reason = rescanReason {
                rescanReason = nil
                emit(.rescan(reason: reason))
            }
            now = clock.now
            if let due = nextLimitRescan, now >= due, !rootGone {
                nextLimitRescan = nil
                try reconcile()
                let missing = unwatched.count
                emit(.rescan(reason: missing > 0
                    ? "watch limit reached: \(missing) directories unwatched"
                    : "watch limit no longer reached: all directories watched"))
            }
            noteLimit()
            publish()
        }

        /// The poll timeout: the nearest move deadline, deferred retry or limit rescan.
        private func timeout(_ now: ContinuousClock.Instant) -> Int32 {
            var next: ContinuousClock.Instant?
            func consider(_ instant: ContinuousClock.Instant) {
                if next == nil || instant < next! { next = instant }
            }
            for move in pending { consider(move.deadline) }
            if !deferred.isEmpty { consider(now + Session.pairingWindow) }
            if let due = nextLimitRescan { consider(due) }
            if reconcileReason != nil || rescanReason != nil { consider(now) }
            guard let next else { return -1 }
            return milliseconds(next - now)
        }

        /// A duration as a poll timeout, rounded up.
        private func milliseconds(_ duration: Duration) -> Int32 {
            if duration <= .zero { return 0 }
            let (seconds, attoseconds) = duration.components
            let ms = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
            return Int32(clamping: ms)
        }

        /// A poll or read failed unexpectedly: report a rescan, back off, rebuild afterwards.
        private func failed(_ call: String, _ error: Errno) {
            logger.error("inotify: \(call) failed: \(error.text); rescanning")
            backoff = backoff == .zero ? .seconds(1) : min(backoff * 2, .seconds(30))
            backoffUntil = clock.now + backoff
            if reconcileReason == nil { reconcileReason = "inotify \(call) failed: \(error.text)" }
        }

        private var stopRequested: Bool {
            watcher?.shared.withLock { $0.active != generation } ?? true
        }

        /// True when an event found the stream full: it and everything after it are
        /// covered by one `.rescan`, sent when there is room.
        private var owesRescan = false

        private func emit(_ event: WatchEvent) {
            if owesRescan { return }
            if case .dropped = continuation.yield(event) {
                owesRescan = true
                logger.warning("inotify: events wait faster than they are handled; a full rescan follows")
            }
        }

        /// Copies the counters where the public properties read them.
        private func publish() {
            let counts = (watches.count, unwatched.count)
            watcher?.shared.withLock { s in
                guard s.active == generation else { return }
                s.watched = counts.0
                s.unwatched = counts.1
            }
        }

        /// Logs the watch limit once per episode and schedules the periodic rescan.
        private func noteLimit() {
            let missing = unwatched.count
            if missing > 0 {
                if nextLimitRescan == nil { nextLimitRescan = clock.now + interval }
                if !limitWarned {
                    limitWarned = true
                    let current = Inotify.maxUserWatches()
                    let suggested = current.map { (($0 + 2 * missing) / 1024 + 1) * 1024 }
                    logger.warning("inotify watch limit reached: \(missing) directories are not watched"
                        + (current.map { " (fs.inotify.max_user_watches = \($0))" } ?? "")
                        + "; they are rescanned every \(interval); raise the limit with `sysctl fs.inotify.max_user_watches=\(suggested.map(String.init) ?? "N")`")
                }
            } else {
                nextLimitRescan = nil
                if limitWarned {
                    limitWarned = false
                    logger.info("inotify: every directory is watched again")
                }
            }
        }

        /// Closes the descriptors and ends the stream (on the thread, at its end).
        private func shutdown() {
            close()
            watcher?.shared.withLock { s in
                if s.active == generation {
                    s.active = nil
                    s.continuation = nil
                }
            }
            continuation.finish()
        }

        /// Closes every descriptor; the write end under the lock, so `stop()` never writes
        /// to a closed (or reused) descriptor.
        func close() {
            inotify.close()
            wakeRead.close()
            rootFD.close()
            guard let watcher else {
                wakeWrite.close()  // nobody is left to write to it
                return
            }
            watcher.shared.withLock { s in
                if let wake = s.wake, wake.generation == generation { s.wake = nil }
                wakeWrite.close()
            }
        }

        // MARK: Events

        private func handle(_ event: Inotify.Event) {
            if event.wd == -1 || event.has(Inotify.overflow) {
                logger.warning("inotify event queue overflowed (fs.inotify.max_queued_events); rescanning")
                reconcileReason = "inotify event queue overflowed"
                return
            }
            if event.has(Inotify.ignored) {
                watchVanished(event.wd)
                return
            }
            guard let node = watches[event.wd] else { return }
            if event.name.isEmpty {
                if node === root {
                    if event.has(Inotify.deleteSelf | Inotify.moveSelf | Inotify.unmount) {
                        rootVanished()
                    } else if event.has(Inotify.attrib) {
                        emit(.changed(.root))
                    }
                }
                return
            }
            let isDirectory = event.has(Inotify.isDirectory)
            let path = node.path.appending(event.name)
            // A later event on a path waiting as a move source ends the wait (keeps the order).
            if !pending.isEmpty {
                flushMoves { $0.cookie != event.cookie && path.isWithin($0.path) }
            }
            if event.has(Inotify.movedFrom) {
                pending.append(PendingMove(cookie: event.cookie, parent: node, name: event.name, path: path,
                                           isDirectory: isDirectory,
                                           excluded: excludes.excludes(path, isDirectory: isDirectory),
                                           node: isDirectory ? node.children[event.name] : nil,
                                           readIndex: readIndex, deadline: clock.now + Session.pairingWindow))
                return
            }
            if event.has(Inotify.movedTo) {
                movedTo(parent: node, name: event.name, path: path, cookie: event.cookie, isDirectory: isDirectory)
                return
            }
            if excludes.excludes(path, isDirectory: isDirectory) {
                // Not mirrored, but an entry created or removed changes its directory's
                // mtime: the manager fixes the directory (and copies nothing).
                if event.has(Inotify.create | Inotify.delete) { emit(.changed(path)) }
                return
            }
            if event.has(Inotify.create) {
                emit(.changed(path))
                if isDirectory { newDirectory(parent: node, name: event.name) }
            }
            if event.has(Inotify.delete) {
                emit(.removed(path))
                if isDirectory, let child = node.children[event.name] { removeSubtree(child) }
            }
            if event.has(Inotify.modify | Inotify.attrib) { emit(.changed(path)) }
            if event.has(Inotify.closeWrite) { emit(.closedAfterWrite(path)) }
        }

        /// A MOVED_TO: pairs it with its MOVED_FROM by cookie, or reports a new entry.
        private func movedTo(parent: Node, name: [UInt8], path: RelativePath, cookie: UInt32, isDirectory: Bool) {
            let excluded = excludes.excludes(path, isDirectory: isDirectory)
            guard cookie != 0, let index = pending.firstIndex(where: { $0.cookie == cookie }) else {
                emit(.changed(path))
                if !excluded, isDirectory { newDirectory(parent: parent, name: name) }
                return
            }
            let from = pending.remove(at: index)
            switch (from.excluded, excluded) {
            case (false, false):
                emit(.moved(from: from.path, to: path))
                if isDirectory {
                    if let node = from.node, !node.detached {
                        if isAncestor(node, of: parent) {
                            // Impossible on disk, so the map is out of step: rebuild it.
                            reconcileReason = reconcileReason ?? "inotify watch map out of step"
                        } else {
                            move(node, to: parent, name: name)
                        }
                    } else {
                        newDirectory(parent: parent, name: name)
                    }
                }
            case (true, false):
                emit(.changed(from.path))   // its directory's mtime
                emit(.changed(path))
                if isDirectory { newDirectory(parent: parent, name: name) }
            case (false, true):
                emit(.removed(from.path))
                emit(.changed(path))
                if let node = from.node, !node.detached { removeSubtree(node) }
            case (true, true):
                emit(.changed(from.path))
                emit(.changed(path))
            }
        }

        /// Reports the moves that match as removals (their MOVED_TO did not come).
        private func flushMoves(where expired: (PendingMove) -> Bool) {
            guard pending.contains(where: expired) else { return }
            var kept: [PendingMove] = []
            let moves = pending
            pending = []
            for move in moves {
                guard expired(move) else {
                    kept.append(move)
                    continue
                }
                emit(move.excluded ? .changed(move.path) : .removed(move.path))
                // Moved out of the tree: drop its watches, unless it was found elsewhere meanwhile.
                if let node = move.node, !node.detached, node.parent === move.parent, node.name == move.name {
                    removeSubtree(node)
                }
            }
            pending = kept + pending
        }

        /// The kernel dropped a watch (its directory is gone, or we removed it).
        private func watchVanished(_ wd: Int32) {
            guard let node = watches.removeValue(forKey: wd) else { return }
            node.wd = nil
            if node === root {
                rootVanished()
                return
            }
            removeSubtree(node)
        }

        private func rootVanished() {
            guard !rootGone else { return }
            rootGone = true
            logger.error("inotify: the source root \(ByteEscaping.escape(rootPath)) vanished or moved")
            emit(.rescan(reason: "source root vanished"))
        }

        // MARK: The tree

        /// True when `ancestor` is `node` or lies above it.
        private func isAncestor(_ ancestor: Node, of node: Node) -> Bool {
            var current: Node? = node
            while let n = current {
                if n === ancestor { return true }
                current = n.parent
            }
            return false
        }

        /// Moves a node (and so its subtree) to a new place; never below itself.
        private func move(_ node: Node, to parent: Node, name: [UInt8]) {
            if let old = node.parent, old.children[node.name] === node { old.children[node.name] = nil }
            if let existing = parent.children[name], existing !== node { removeSubtree(existing) }
            node.name = name
            node.parent = parent
            parent.children[name] = node
        }

        /// Removes a node and everything below it, with their watches.
        private func removeSubtree(_ top: Node) {
            if let parent = top.parent, parent.children[top.name] === top { parent.children[top.name] = nil }
            var stack = [top]
            while let node = stack.popLast() {
                if let wd = node.wd, watches[wd] === node {
                    Inotify.removeWatch(inotify, wd)
                    watches[wd] = nil
                }
                unwatched[ObjectIdentifier(node)] = nil
                node.detached = true
                stack.append(contentsOf: node.children.values)
                node.children = [:]
            }
        }

        /// Opens a node's directory from the root, never following a symlink, and checks it
        /// is the same directory; nil when the map is behind the file system.
        private func open(_ node: Node) -> FileDescriptor? {
            guard var fd = try? Sys.open(rootFD, [0x2E], O_RDONLY | O_DIRECTORY) else { return nil }
            for name in node.names {
                let next = try? Sys.open(fd, name, Session.directoryFlags)
                fd.close()
                guard let next else { return nil }
                fd = next
            }
            guard let stat = try? fd.stat(), Identity(device: stat.device, inode: stat.inode) == node.identity else {
                fd.close()
                return nil
            }
            return fd
        }

        /// A directory appeared (created or moved in): watch it, then list it and report
        /// every entry, recursively. Deferred when the parent is not where the map says.
        private func newDirectory(parent: Node, name: [UInt8]) {
            if case .stale = watchNewDirectory(parent: parent, name: name) {
                deferred.append((parent, name, clock.now))
            }
        }

        private func watchNewDirectory(parent: Node, name: [UInt8]) -> Outcome {
            guard !parent.detached else { return .done }
            guard let parentFD = open(parent) else { return .stale }
            defer { parentFD.close() }
            let path = parent.path.appending(name)
            let fd: FileDescriptor
            do throws(Errno) { fd = try Sys.open(parentFD, name, Session.directoryFlags) } catch {
                openFailed(error, path: path, emit: true)
                return .done
            }
            // Guard against loops (a bind mount of an ancestor) even where watches are missing.
            walkVisited = []
            var ancestor: Node? = parent
            while let node = ancestor {
                walkVisited.insert(node.identity)
                ancestor = node.parent
            }
            reached = nil
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

        /// Retries new directories whose parent was not where the map said.
        private func retryDeferred() throws {
            let waiting = deferred
            deferred = []
            let now = clock.now
            for item in waiting where !item.parent.detached {
                if stopRequested { throw Stopped() }
                guard case .stale = watchNewDirectory(parent: item.parent, name: item.name) else { continue }
                if now - item.since < Session.staleRetryLimit {
                    deferred.append(item)
                } else if reconcileReason == nil {
                    reconcileReason = "a new directory could not be followed"
                }
            }
        }

        /// Rebuilds the watch tree from the file system: watches what is missing (the
        /// watch limit, events lost in an overflow), drops what is gone, keeps the rest.
        private func reconcile() throws {
            var before: [ObjectIdentifier: Node] = [:]
            var stack: [Node] = [root]
            while let node = stack.popLast() {
                before[ObjectIdentifier(node)] = node
                stack.append(contentsOf: node.children.values)
            }
            for node in watches.values { before[ObjectIdentifier(node)] = node }
            unwatched = [:]
            walkVisited = [root.identity]
            reached = [ObjectIdentifier(root)]
            defer { reached = nil }
            guard let fd = try? Sys.open(rootFD, [0x2E], O_RDONLY | O_DIRECTORY) else { return }
            root.children = [:]
            try walk(from: list(fd, node: root, path: .root, emit: false), emit: false)
            let reachedNodes = reached ?? []
            for (id, node) in before where !reachedNodes.contains(id) {
                if let wd = node.wd, watches[wd] === node {
                    Inotify.removeWatch(inotify, wd)
                    watches[wd] = nil
                }
                node.detached = true
                node.children = [:]
            }
        }

        // MARK: Walking

        /// Adds a watch on an open directory; nil when the watch limit is reached.
        private func addWatch(_ fd: FileDescriptor, path: RelativePath) throws(Errno) -> Int32? {
            do throws(Errno) {
                if useProc {
                    return try Inotify.addWatch(inotify, path: Inotify.procPath(fd), mask: Session.mask)
                }
                var absolute = rootPath
                if !path.isRoot { absolute += [0x2F] + path.bytes }
                return try Inotify.addWatch(inotify, path: absolute, mask: Session.mask | Inotify.dontFollow)
            } catch {
                if error.rawValue == ENOSPC { return nil }
                throw error
            }
        }

        /// Watches an opened directory and lists it. Nil (the caller closes `fd`) when it
        /// was seen already in this walk, loops back to an ancestor, or cannot be watched.
        private func enter(_ fd: FileDescriptor, parent: Node, name: [UInt8], path: RelativePath, emit: Bool) -> Frame? {
            guard let stat = try? fd.stat() else { return nil }
            let identity = Identity(device: stat.device, inode: stat.inode)
            guard walkVisited.insert(identity).inserted else { return nil }
            let wd: Int32?
            do throws(Errno) { wd = try addWatch(fd, path: path) } catch {
                if error != .noSuchFileOrDirectory {
                    logger.warning("inotify: cannot watch \(path.escaped): inotify_add_watch: \(error.text)")
                }
                return nil
            }
            let node: Node
            if let wd, let existing = watches[wd] {
                // The directory is watched under another path: a move whose events are not
                // processed yet (or never came, when the target was not watched in time).
                // It is here now, so its node (and subtree) moves here; a MOVED_FROM still
                // pending for the old place then leaves it alone.
                if isAncestor(existing, of: parent) {
                    logger.debug("inotify: \(path.escaped) loops back to \(existing.path.escaped); not followed")
                    return nil
                }
                move(existing, to: parent, name: name)
                // A reconciling walk rebuilds the children; a new-directory walk re-finds them.
                if reached != nil { existing.children = [:] }
                existing.identity = identity
                node = existing
            } else {
                node = Node(wd: wd, name: name, parent: parent, identity: identity)
                if let old = parent.children[name] { removeSubtree(old) }
                parent.children[name] = node
                if let wd { watches[wd] = node } else { unwatched[ObjectIdentifier(node)] = node }
            }
            reached?.insert(ObjectIdentifier(node))
            return list(fd, node: node, path: path, emit: emit)
        }

        /// Lists a watched directory: reports its entries when asked, returns its subdirectories.
        private func list(_ fd: FileDescriptor, node: Node, path: RelativePath, emit: Bool) -> Frame {
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
                if emit { self.emit(.changed(child)) }
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
                if stopRequested { throw Stopped() }
                heartbeat?.beat()
                guard let name = stack[stack.count - 1].subdirectories.popLast() else {
                    stack.removeLast().fd.close()
                    continue
                }
                let top = stack[stack.count - 1]
                let path = top.path.appending(name)
                let fd: FileDescriptor
                do throws(Errno) { fd = try Sys.open(top.fd, name, Session.directoryFlags) } catch {
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
                if emit { self.emit(.changed(path)) }  // replaced by a file or a link
            case EMFILE, ENFILE:
                logger.error("inotify: cannot watch \(path.escaped): \(error.text)")
                rescanReason = "cannot watch \(path.escaped): \(error.text)"
            default:
                logger.warning("inotify: cannot watch \(path.escaped): \(error.text)")
            }
        }
    }
}
