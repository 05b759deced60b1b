/// The service manager's notification channel (sd_notify in production).
public protocol Notifier: Sendable {
    /// Half of the watchdog timeout when the service manager watches this process.
    var watchdogInterval: Duration? { get }
    /// `READY=1`, with `STATUS=` when given.
    func ready(status: String?)
    /// `STATUS=`.
    func status(_ text: String)
    /// `RELOADING=1` (with the monotonic time).
    func reloading()
    /// `STOPPING=1`.
    func stopping()
    /// `WATCHDOG=1`.
    func watchdog()
}
