import Dispatch
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
///
/// This type is the facade (generations, start and stop). The parts, in `Watcher/`:
/// `InotifySession` (the thread: poll, read, backoff), `EventTranslator` (raw events to
/// `WatchEvent`s), `MovePairer` (cookies), `WatchTree` of `WatchNode`s (wd to path),
/// `DirectoryWalker` (watch then list), `WatchLimitMonitor` (ENOSPC) and `EventOutbox`
/// (the bounded stream).
public final class InotifyWatcher: WatcherProviding {
    /// Absolute path bytes of the source root.
    public let rootPath: [UInt8]
    private let logger: Logger
    private let limitRescanInterval: Duration
    private let eventLimit: Int
    /// Beaten once per directory walked.
    let heartbeat: Heartbeat?
    /// Once set, a walk ends as if stopped (a stop can come before `start` made a session).
    let cancellation: CancellationFlag?
    /// What the caller's threads and the watcher thread share.
    let shared = Mutex(Shared())

    /// What the caller's threads and the watcher thread share.
    struct Shared {
        /// Counts sessions; each `start` gets the next number.
        var generation = 0
        /// The running session, nil when stopped.
        var active: Int?
        /// The running session's wake pipe (write end).
        var wake: (generation: Int, fd: FileDescriptor)?
        /// The running session's stream.
        var continuation: AsyncStream<WatchEvent>.Continuation?
        /// Directories watched, as last published by the session.
        var watched = 0
        /// Directories left unwatched by the watch limit, as last published.
        var unwatched = 0
        /// How often they are looked at now.
        var pollPeriod: Duration?
    }

    /// How often directories the watch limit left unwatched are looked at.
    public static let pollInterval: Duration = .seconds(10)

    /// A watcher for the directory at `rootPath` (absolute path bytes). While the inotify
    /// watch limit leaves directories unwatched, they are looked at every
    /// `limitRescanInterval` (the changes found there reported as events). At most `eventLimit` events wait in the stream: past that
    /// the watcher stops reading (the kernel's queue holds what comes, or overflows) and
    /// owes one `.rescan`, delivered as soon as there is room. Walks beat `heartbeat`
    /// once per directory. Once `cancellation` is set, a walk ends as `stop` ends it.
    public init(rootPath: [UInt8], logger: Logger = .silent, limitRescanInterval: Duration = InotifyWatcher.pollInterval,
                eventLimit: Int = 65_536, heartbeat: Heartbeat? = nil, cancellation: CancellationFlag? = nil) {
        self.heartbeat = heartbeat
        self.cancellation = cancellation
        self.rootPath = rootPath
        self.logger = logger
        self.limitRescanInterval = limitRescanInterval
        self.eventLimit = eventLimit
    }

    /// Directories watched now.
    public var watchedDirectories: Int { shared.withLock { $0.watched } }

    /// Directories that could not be watched because of `fs.inotify.max_user_watches`.
    public var unwatchedDirectories: Int { shared.withLock { $0.unwatched } }

    /// How often the unwatched directories are looked at now (nil: all are watched).
    public var pollPeriod: Duration? { shared.withLock { $0.unwatched > 0 ? $0.pollPeriod : nil } }

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
        let session: InotifySession
        do {
            session = try InotifySession(watcher: self, generation: generation, excludes: excludes,
                                  continuation: continuation, logger: logger, interval: limitRescanInterval)
        } catch is DirectoryWalker.Stopped {
            // stop() came while the tree was being walked, or the cancellation was set.
            shared.withLock { if $0.active == generation { $0.active = nil } }
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
