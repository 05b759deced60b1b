import KeepSyncCore
import Synchronization

/// A notifier that keeps every message, as the sd_notify datagram would carry it.
public final class RecordingNotifier: Notifier {
    private let sent = Mutex<[String]>([])
    /// The watchdog interval it announces (nil: no watchdog).
    public let watchdogInterval: Duration?

    /// A notifier, with a watchdog when `watchdogInterval` is given.
    public init(watchdogInterval: Duration? = nil) {
        self.watchdogInterval = watchdogInterval
    }

    /// Every message so far, in order.
    public var messages: [String] { sent.withLock { $0 } }

    /// How many messages start with `prefix`.
    public func count(_ prefix: String) -> Int { messages.filter { $0.hasPrefix(prefix) }.count }

    /// The `STATUS=` texts so far (also those sent with READY=1).
    public var statusLines: [String] {
        messages.compactMap { m in
            m.split(separator: "\n").first { $0.hasPrefix("STATUS=") }.map { String($0.dropFirst(7)) }
        }
    }

    private func record(_ m: String) { sent.withLock { $0.append(m) } }

    /// Records `READY=1`.
    public func ready(status: String?) { record("READY=1" + (status.map { "\nSTATUS=\($0)" } ?? "")) }
    /// Records `STATUS=`.
    public func status(_ text: String) { record("STATUS=\(text)") }
    /// Records `RELOADING=1`.
    public func reloading() { record("RELOADING=1") }
    /// Records `STOPPING=1`.
    public func stopping() { record("STOPPING=1") }
    /// Records `WATCHDOG=1`.
    public func watchdog() { record("WATCHDOG=1") }
}
