import Glibc
import KeepSyncCore

/// The agent's machine: the state directory's lock and journal, the source and mirror
/// trees, inotify, the directory warmer, the source root's stat, a Dispatch timer.
public struct LinuxAgentHost: AgentHost {
    /// The remote mirror's root over its session (nil: a local mirror).
    public let remote: RemoteRoot?
    /// This mirror's own copy and listing threads (another mirror's slow barrier or round
    /// trip never waits in front of its work: their queues are serial). Copies staged at
    /// once: enough to keep a disk's queue busy on a cold cache; listings ahead of a
    /// scan: a cold disk answers many at once.
    let copyIO = ParallelIO(width: 4)
    let scanIO = ParallelIO(width: 12)

    /// The host of this machine; `remote` for a mirror on another host.
    public init(remote: RemoteRoot? = nil) {
        self.remote = remote
    }

    /// The host for `settings`: with a session to the mirror's host when it is remote
    /// (connected at its first command).
    public init(settings: Settings) throws {
        guard let target = settings.remote else {
            self.init()
            return
        }
        self.init(remote: RemoteRoot(session: try RemoteSession(settings: settings), target: target))
    }

    /// This process's ID.
    public var processID: Int { Int(ProcessEnvironment.processID) }

    /// The time now, UTC, as status shows it.
    public func timestamp() -> String { LogSink.utcTimestamp() }

    /// Copies on four Dispatch threads; staging and listing widths.
    public var copies: (executor: CopyExecutor, io: ParallelIO, scanIO: ParallelIO) {
        (.dispatch(limit: 4), copyIO, scanIO)
    }

    /// Takes the state's lock and loads (or refuses) its records.
    public func prepare(_ settings: Settings, logger: Logger, heartbeat: Heartbeat?, pausingForMirror: Bool,
                 refused: (RecordSet, String) -> Void) throws -> PreparedRecords {
        let prepared = try PreparedState(settings, logger: logger, heartbeat: heartbeat, remote: remote,
                                         pausingForMirror: pausingForMirror, refused: refused)
        let lock = prepared.lock
        return PreparedRecords(store: prepared.store, records: prepared.records, root: prepared.root,
                               mirrorAway: prepared.mirrorAway, release: { lock.release() })
    }

    /// The source as a POSIX tree; the mirror as a local mirror over atomic file steps, or
    /// a remote one over the host's session. `live` (`run`): a local copy whose source
    /// changed during it is settled again, not retried at once.
    public func openTrees(_ settings: Settings, limits: MirrorLimits, cancellation: CancellationFlag, live: Bool) throws
        -> (source: any FileSystemProviding, mirror: any MirrorProviding) {
        if let remote {
            return (try PosixFileSystem(rootPath: settings.source),
                    remote.mirror(settings))
        }
        let mirror = settings.mirror
        let versions = try settings.versions.map { versions in
            let directory = try versions.elsewhere.map { path in
                VersionsDirectory.elsewhere(try Self.openVersions(path, mirror: mirror, cancellation: cancellation,
                                                                  setsAccessTime: !limits.syncfsReaches))
            } ?? .inMirror(versions.directory)
            let now: @Sendable () -> Int64 = { Int64(Glibc.time(nil)) }
            let space: @Sendable () -> (free: UInt64, total: UInt64)? = { Self.space(mirror) }
            return (directory, now, space)
        }
        return (try PosixFileSystem(rootPath: settings.source),
         LocalMirror(try AtomicFileAccessor(rootPath: mirror, cancellation: cancellation,
                                            setsAccessTime: !limits.syncfsReaches), limits: limits,
                    changedCopyRetries: live ? 0 : 5, versions: versions))
    }

    /// The steps of a versions directory outside the mirror at `path`, made (0700, with its
    /// parents) when missing; `.configuration` when it is, or would be made, on another file
    /// system than the mirror (it was checked at start: a disk mounted or gone since).
    static func openVersions(_ path: [UInt8], mirror: [UInt8], cancellation: CancellationFlag,
                             setsAccessTime: Bool) throws -> AtomicFileAccessor {
        let elsewhere = KeepSyncError(.configuration, "--versions-dir \(HostPaths.display(path)): is on another file "
                                      + "system than the mirror (\(HostPaths.display(mirror)))")
        guard let device = HostPaths.stat(mirror)?.device else {
            throw KeepSyncError(.io, "mirror \(HostPaths.display(mirror)) does not exist")
        }
        if HostPaths.stat(path) == nil {
            guard HostPaths.fileSystem(path) == device else { throw elsewhere }
            try HostPaths.makeDirectories(path, mode: 0o700)
        }
        let steps = try AtomicFileAccessor(rootPath: path, cancellation: cancellation, setsAccessTime: setsAccessTime)
        guard try steps.stat(.root)?.device == device else { throw elsewhere }
        return steps
    }

    /// The file system holding `path`: bytes free to an unprivileged writer, and in all.
    static func space(_ path: [UInt8]) -> (free: UInt64, total: UInt64)? {
        var s = statvfs()
        let rc = path.withUnsafeBufferPointer { p in
            (Array(p) + [0]).withUnsafeBufferPointer { c in c.baseAddress!.withMemoryRebound(to: CChar.self, capacity: c.count) { statvfs($0, &s) } }
        }
        guard rc == 0 else { return nil }
        return (UInt64(s.f_bavail) * UInt64(s.f_frsize), UInt64(s.f_blocks) * UInt64(s.f_frsize))
    }

    /// An inotify watcher of the source.
    public func makeWatcher(_ settings: Settings, logger: Logger, heartbeat: Heartbeat,
                            cancellation: CancellationFlag) -> any WatcherProviding {
        InotifyWatcher(rootPath: settings.source, logger: logger, heartbeat: heartbeat, cancellation: cancellation)
    }

    /// Reads the source's directories ahead on threads of their own; returns the stop.
    public func warmDirectories(_ settings: Settings) -> @Sendable () -> Void {
        let warmer = DirectoryWarmer(root: settings.source, excludes: settings.excludes, width: 8)
        return { warmer.stop() }
    }

    /// Two readers per tree, each entry stat'ed: the record load keeps one core busy, the
    /// readers wait on the disk.
    public func readAhead(_ settings: Settings) -> @Sendable () -> Void {
        let source = DirectoryWarmer(root: settings.source, excludes: settings.excludes, width: 2, lookUp: true)
        let mirror = remote == nil ? DirectoryWarmer(root: settings.mirror, excludes: settings.excludes, width: 2, lookUp: true) : nil
        return {
            source.stop()
            mirror?.stop()
        }
    }

    /// `stat` of the source root.
    public func sourceRootStat(_ path: [UInt8]) -> FileStat? { HostPaths.stat(path) }

    /// True when the source root lists no entry.
    public func sourceRootIsEmpty(_ path: [UInt8]) -> Bool { (try? HostPaths.list(path))?.isEmpty ?? false }

    /// `check`'s view of the mirror: the limits the last pass recorded, else a probe's
    /// (none when the mirror is missing).
    public func recordedMirrorLimits(_ settings: Settings) -> MirrorLimits {
        if let store = try? JournalBookmarkStore(directory: settings.state, readOnly: true),
           let limits = (try? store.load())?.mirror?.limits {
            return limits
        }
        if let remote { return remote.limits }
        return (try? MirrorProbe.probe(settings.mirror))?.limits ?? .none
    }

    /// The mirror root's identity and file system now, from `stat` and the mount table (a
    /// remote one from the remote; throws when its host cannot be asked).
    public func mirrorRoot(_ path: [UInt8]) throws -> MirrorRoot? {
        if let remote { return try remote.current() }
        return MirrorProbe.currentMirrorRoot(path)
    }

    /// `malloc_trim`: a big pass's freed memory goes back to the system.
    public func releaseMemory() { ProcessEnvironment.releaseFreedMemory() }

    /// A Dispatch timer.
    public func repeating(every interval: Duration, _ tick: @escaping @Sendable () -> Void) -> any TimerHandle {
        RepeatingTimer(label: "keepsync.watchdog", every: interval, tick)
    }
}

/// The journal says when its log outgrew its snapshot.
extension JournalBookmarkStore: AgentRecordStore {}
