/// Watches a tree and reports changes below its root.
public protocol WatcherProviding: Sendable {
    /// Starts watching; the stream ends when `stop` is called.
    func start(excluding excludes: ExcludeMatcher) throws -> AsyncStream<WatchEvent>
    /// Stops watching and ends the stream.
    func stop()
    /// Directories that could not be watched (inotify's watch limit).
    var unwatchedDirectories: Int { get }
    /// How often those directories are looked at now: a change there reaches the mirror
    /// within this period (nil while every directory is watched).
    var pollPeriod: Duration? { get }
}
