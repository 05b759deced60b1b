import KeepSyncCore

/// The agent's machine: the state directory's lock and journal, the source and mirror
/// trees, inotify, the directory warmer, the source root's stat, a Dispatch timer.
struct LinuxAgentHost: AgentHost {
    var processID: Int { Int(ProcessEnvironment.processID) }

    func timestamp() -> String { LogSink.utcTimestamp() }

    var copies: (executor: CopyExecutor, io: ParallelIO, scanIO: ParallelIO) {
        (.dispatch(limit: 4), CommandRunner.copyIO, CommandRunner.scanIO)
    }

    func prepare(_ settings: Settings, logger: Logger, heartbeat: Heartbeat?,
                 refused: (RecordSet, String) -> Void) throws -> PreparedRecords {
        let prepared = try PreparedState(settings, logger: logger, heartbeat: heartbeat, refused: refused)
        let lock = prepared.lock
        return PreparedRecords(store: prepared.store, records: prepared.records, root: prepared.root,
                               release: { lock.release() })
    }

    func openTrees(_ settings: Settings, cancellation: CancellationFlag) throws
        -> (source: any FileSystemProviding, mirror: any MirrorProviding) {
        (try PosixFileSystem(rootPath: settings.source),
         LocalMirror(try AtomicFileAccessor(rootPath: settings.mirror, cancellation: cancellation)))
    }

    func makeWatcher(_ settings: Settings, logger: Logger, heartbeat: Heartbeat) -> any WatcherProviding {
        InotifyWatcher(rootPath: settings.source, logger: logger, heartbeat: heartbeat)
    }

    func warmDirectories(_ settings: Settings) -> @Sendable () -> Void {
        let warmer = DirectoryWarmer(root: settings.source, excludes: settings.excludes, width: 8)
        return { warmer.stop() }
    }

    func sourceRootStat(_ path: [UInt8]) -> FileStat? { HostPaths.stat(path) }

    func sourceRootIsEmpty(_ path: [UInt8]) -> Bool { (try? Sys.readDirectoryPath(path))?.isEmpty ?? false }

    func repeating(every interval: Duration, _ tick: @escaping @Sendable () -> Void) -> any TimerHandle {
        RepeatingTimer(label: "keepsync.watchdog", every: interval, tick)
    }
}

/// The journal says when its log outgrew its snapshot.
extension JournalBookmarkStore: AgentRecordStore {}
