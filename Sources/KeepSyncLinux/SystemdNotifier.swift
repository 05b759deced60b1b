import Glibc
import KeepSyncCore

/// Speaks the sd_notify protocol by hand: one datagram per message to
/// `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace), from the main PID
/// only. Without `$NOTIFY_SOCKET` every call does nothing.
public final class SystemdNotifier: Notifier {
    private let address: [UInt8]?
    /// Half of `$WATCHDOG_USEC` when the watchdog is on for this process.
    public let watchdogInterval: Duration?

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `environment`.
    public init(environment: [String: String], pid: Int32 = getpid()) {
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

    /// True when messages go somewhere.
    public var isEnabled: Bool { address != nil }

    /// Sends `READY=1`.
    public func ready(status: String?) { send("READY=1" + (status.map { "\nSTATUS=\($0)" } ?? "")) }

    /// Sends `STATUS=`.
    public func status(_ text: String) { send("STATUS=\(text)") }

    /// Sends `RELOADING=1` with `MONOTONIC_USEC=`.
    public func reloading() {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let usec = UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
        send("RELOADING=1\nMONOTONIC_USEC=\(usec)")
    }

    /// Sends `STOPPING=1`.
    public func stopping() { send("STOPPING=1") }

    /// Sends `WATCHDOG=1`.
    public func watchdog() { send("WATCHDOG=1") }

    /// Sends one datagram without blocking; errors are ignored (systemd may be gone, or
    /// a socket nobody reads may be full: the agent must never wait on it).
    public func send(_ message: String) {
        guard let address else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard address.count < capacity else { return }
        var bytes = address
        if bytes.first == 0x40 { bytes[0] = 0 }   // "@name" → abstract namespace
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
            if address.first != 0x40 { raw[bytes.count] = 0 }
        }
        // Abstract addresses have an exact length; path addresses include the NUL.
        let length = MemoryLayout<sa_family_t>.size + bytes.count + (address.first == 0x40 ? 0 : 1)
        let payload = Array(message.utf8)
        _ = payload.withUnsafeBytes { buf in
            withUnsafePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    sendto(fd, buf.baseAddress, buf.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT), sa, socklen_t(length))
                }
            }
        }
    }
}
