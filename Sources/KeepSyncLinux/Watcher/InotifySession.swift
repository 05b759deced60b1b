import Glibc
import KeepSyncCore

/// The state of one `start`…`stop` of an `InotifyWatcher`: the inotify descriptor, the wake
/// pipe and the thread's loop (poll, read, back off after errors, hand the raw events to
/// the `EventTranslator`), the rebuild after an overflow and the periodic rescan while the
/// watch limit leaves directories unwatched.
///
/// Owned by one thread at a time: the caller of `start` while the initial watches are
/// added, then the watcher thread alone; `@unchecked Sendable` only for that single
/// handover to the thread.
final class InotifySession: @unchecked Sendable {
    /// Weak, so that dropping the watcher without `stop()` still ends the thread (`deinit`).
    private weak var watcher: InotifyWatcher?
    private let rootPath: [UInt8]
    private let generation: Int
    private let outbox: EventOutbox
    private let logger: Logger
    private let inotify: FileDescriptor
    private let wakeRead: FileDescriptor
    /// The wake pipe's write end, which `stop()` writes to.
    let wakeWrite: FileDescriptor
    private let rootFD: FileDescriptor
    private let walker: DirectoryWalker
    private var tree: WatchTree { walker.tree }
    /// The directories the watch limit left unwatched, looked at every `limit.interval`.
    private let poller = UnwatchedPoller()
    private let clock = ContinuousClock()
    private let translator: EventTranslator
    private var limit: WatchLimitMonitor
    private var buffer = [UInt8](repeating: 0, count: Inotify.bufferSize)
    private var readIndex = 0
    /// Why the watch tree must be rebuilt and a rescan reported, when it must.
    private var reconcileReason: String?
    private var rootGone: Bool { translator.rootGone }
    private var backoff: Duration = .zero
    private var backoffUntil: ContinuousClock.Instant?

    /// How long a new directory waits before it is retried.
    static let retryDelay: Duration = .milliseconds(5)

    /// Opens inotify and the wake pipe and watches the tree (see `DirectoryWalker`). Throws
    /// when the root cannot be watched, or `DirectoryWalker.Stopped` when `stop()` came first.
    init(watcher: InotifyWatcher, generation: Int, excludes: ExcludeMatcher,
         continuation: AsyncStream<WatchEvent>.Continuation, logger: Logger, interval: Duration) throws {
        self.watcher = watcher
        self.rootPath = watcher.rootPath
        self.generation = generation
        self.outbox = EventOutbox(continuation, logger: logger)
        self.logger = logger
        self.limit = WatchLimitMonitor(interval: interval, logger: logger)
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
            walker = try DirectoryWalker(inotify: inotify, rootFD: rootFD, rootPath: rootPath, excludes: excludes,
                                         outbox: outbox, logger: logger, heartbeat: watcher.heartbeat,
                                         stopRequested: { [weak watcher] in
                                             guard let watcher else { return true }
                                             return watcher.cancellation?.isSet == true
                                                 || watcher.shared.withLock { $0.active != generation }
                                         })
        } catch {
            InotifySession.close(inotify: inotify, wakeRead: wakeRead, wakeWrite: wakeWrite, rootFD: rootFD,
                                 watcher: watcher, generation: generation)
            throw error
        }
        translator = EventTranslator(rootPath: rootPath, excludes: excludes, walker: walker, outbox: outbox, logger: logger)
        // Before the first full pass reads them: what changes after is a difference.
        poller.adopt(tree.takeNewlyUnwatched(), list: look)
        publish()
        limit.note(unwatched: tree.unwatched.count, now: clock.now)
    }

    // MARK: Running

    /// The thread's loop: poll, read, handle, until `stop()`.
    func run() {
        defer { shutdown() }
        while !stopRequested {
            let now = clock.now
            let ready: (events: Bool, wake: Bool)
            do throws(Errno) {
                if outbox.owesRescan {
                    // The stream is full: read nothing until the owed rescan fits.
                    let r = try Inotify.poll(wakeRead, wakeRead, timeoutMilliseconds: 20)
                    if r.first || stopRequested { return }
                    outbox.settleRescan()
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
                Inotify.pause(milliseconds: 100)  // poll itself is failing: do not spin
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
            for event in events {
                switch translator.handle(event, readIndex: readIndex) {
                case .overflow?: reconcileReason = "inotify event queue overflowed"
                case .outOfStep?: reconcileReason = reconcileReason ?? "inotify watch map out of step"
                case nil: break
                }
            }
            translator.expireMoves(at: clock.now, readBefore: readIndex)
            if stopRequested { return false }
        }
        return false
    }

    /// Flushes expired moves, retries deferred directories, rebuilds after an overflow,
    /// reports the watch limit, publishes the counters.
    private func afterBatch(queueEmpty: Bool) throws {
        if queueEmpty { translator.expireMoves(at: clock.now) }
        if walker.hasDeferred, try walker.retryDeferred(), reconcileReason == nil {
            reconcileReason = "a new directory could not be followed"
        }
        if let reason = reconcileReason {
            reconcileReason = nil
            if !rootGone { try walker.rebuild() }
            outbox.emit(.rescan(reason: reason))
        }
        if let reason = walker.takeRescanReason() {
            outbox.emit(.rescan(reason: reason))
        }
        poller.adopt(tree.takeNewlyUnwatched(), list: look)
        if limit.isDue(now: clock.now), !rootGone {
            let started = clock.now, cpu = Self.threadCPUTime()
            let count = tree.unwatched.count
            pollUnwatched()
            let took = started.duration(to: clock.now), cost = Self.threadCPUTime() - cpu
            limit.polled(started: started, took: took, cost: cost)
            logger.debug("polled \(count) unwatched directories in \(milliseconds(took)) ms (\(milliseconds(cost)) ms of CPU); the next poll in \(limit.period.components.seconds) s")
        }
        limit.note(unwatched: tree.unwatched.count, now: clock.now)
        publish()
    }

    /// Looks at the unwatched directories: what changed in each is reported as the events
    /// inotify would have given (a new subdirectory is walked and watched where the limit
    /// allows); then each is watched if the limit allows it now.
    private func pollUnwatched() {
        for (node, changes) in poller.poll(tree.unwatched, digest: digest, list: look) {
            for change in changes {
                switch change {
                case .changed(let path): outbox.emit(.changed(path))
                case .removed(let path): outbox.emit(.removed(path))
                case .directoryGone(let name):
                    if let child = node.child(name) { tree.removeSubtree(child) }
                    outbox.emit(.removed(node.path.appending(name)))
                case .newDirectory(let name):
                    outbox.emit(.changed(node.path.appending(name)))
                    walker.newDirectory(parent: node, name: name)
                }
            }
        }
        poller.adopt(tree.takeNewlyUnwatched(), list: look)
        for node in UnwatchedPoller.inPathOrder(tree.unwatched) {
            guard let wd = walker.watchExisting(node) else { break }
            tree.watched(node, as: wd)
            poller.forget(node)
        }
    }

    /// One unwatched directory's entries as they are now; nil when it is not where the
    /// tree says.
    private func look(_ node: WatchNode) -> [[UInt8]: UnwatchedPoller.Stamp]? {
        guard let fd = walker.open(node) else { return nil }
        defer { fd.close() }
        guard let names = try? Sys.readDirectory(fd) else { return nil }
        var entries: [[UInt8]: UnwatchedPoller.Stamp] = [:]
        for name in names {
            if let stat = (try? Sys.lstat(fd, name)) ?? nil { entries[name] = UnwatchedPoller.Stamp(stat) }
        }
        return entries
    }

    /// The digest of one unwatched directory's entries as they are now (what `look` would
    /// give, without keeping them); nil when it is not where the tree says.
    private func digest(_ node: WatchNode) -> UInt64? {
        guard let fd = walker.open(node) else { return nil }
        defer { fd.close() }
        var sum: UInt64 = 0
        do throws(Errno) {
            try Sys.forEachEntry(fd) { (name, _) throws(Errno) in
                if let stat = (try? Sys.lstat(fd, terminatedName: name)) ?? nil {
                    sum &+= UnwatchedPoller.digest(name, UnwatchedPoller.Stamp(stat))
                }
            }
        } catch { return nil }
        return sum
    }

    /// CPU time of the calling thread.
    static func threadCPUTime() -> Duration { Sys.threadCPUTime() }

    /// The poll timeout: the nearest move deadline, deferred retry or limit poll.
    private func timeout(_ now: ContinuousClock.Instant) -> Int32 {
        var next: ContinuousClock.Instant?
        func consider(_ instant: ContinuousClock.Instant?) {
            guard let instant else { return }
            if next == nil || instant < next! { next = instant }
        }
        consider(translator.nextMoveDeadline)
        if walker.hasDeferred { consider(now + InotifySession.retryDelay) }
        consider(limit.due)
        if reconcileReason != nil || walker.hasRescanReason { consider(now) }
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

    /// Copies the counters where the public properties read them.
    private func publish() {
        let counts = (tree.watches.count, tree.unwatched.count), period = limit.period
        watcher?.shared.withLock { s in
            guard s.active == generation else { return }
            s.watched = counts.0
            s.unwatched = counts.1
            s.pollPeriod = period
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
        outbox.finish()
    }

    /// Closes every descriptor; the write end under the lock, so `stop()` never writes
    /// to a closed (or reused) descriptor.
    func close() {
        InotifySession.close(inotify: inotify, wakeRead: wakeRead, wakeWrite: wakeWrite, rootFD: rootFD,
                             watcher: watcher, generation: generation)
    }

    private static func close(inotify: FileDescriptor, wakeRead: FileDescriptor, wakeWrite: FileDescriptor,
                              rootFD: FileDescriptor, watcher: InotifyWatcher?, generation: Int) {
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
}
