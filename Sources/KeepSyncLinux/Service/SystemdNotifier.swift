import KeepSyncCore

/// Speaks the sd_notify protocol by hand: one datagram per message to
/// `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace), from the main PID
/// only. Without `$NOTIFY_SOCKET` every call does nothing.
public final class SystemdNotifier: Notifier {
    private let address: [UInt8]?
    /// Half of `$WATCHDOG_USEC` when the watchdog is on for this process.
    public let watchdogInterval: Duration?

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `environment`; `pid`
    /// (this process when nil) is matched against `WATCHDOG_PID`.
    public init(environment: [String: String], pid: Int32? = nil) {
        let pid = pid ?? ProcessEnvironment.processID
        if let socket = environment["NOTIFY_SOCKET"], !socket.isEmpty, socket.first == "/" || socket.first == "@" {
            address = Array(socket.utf8)
        } else {
            address = nil
        }
        if let usec = environment["WATCHDOG_USEC"].flatMap({ UInt64($0) }), usec > 0,
           environment["WATCHDOG_PID"].flatMap({ Int32($0) }).map({ $0 == pid }) ?? true {
            watchdogInterval = .microseconds(usec / 2)
        } else {
            watchdogInterval = nil
        }
    }


    /// Sends `READY=1`.
    public func ready(status: String?) { send("READY=1" + (status.map { "\nSTATUS=\($0)" } ?? "")) }

    /// Sends `STATUS=`.
    public func status(_ text: String) { send("STATUS=\(text)") }

    /// Sends `RELOADING=1` with `MONOTONIC_USEC=`.
    public func reloading() {
        send("RELOADING=1\nMONOTONIC_USEC=\(ProcessEnvironment.monotonicMicroseconds())")
    }

    /// Sends `STOPPING=1`.
    public func stopping() { send("STOPPING=1") }

    /// Sends `WATCHDOG=1`.
    public func watchdog() { send("WATCHDOG=1") }

    /// Sends one datagram without blocking; errors are ignored (systemd may be gone, or
    /// a socket nobody reads may be full: the agent must never wait on it).
    public func send(_ message: String) {
        guard let address else { return }
        DatagramSocket.send(Array(message.utf8), to: address)
    }
}
