import Glibc
import KeepSyncCore

/// The machine's clock, time zone and umask, for the command layer.
public enum HostTime {
    /// Seconds since the epoch.
    public static func now() -> Int64 { Int64(time(nil)) }

    /// The local time zone (`TZ`, else /etc/localtime), by `localtime_r`.
    public static let zone = LocalZone { seconds in
        var t = time_t(seconds)
        var parts = tm()
        guard localtime_r(&t, &parts) != nil else { return 0 }
        return Int(parts.tm_gmtoff)
    }

    /// The process's umask (set and put back: call it before threads start).
    public static func umask() -> UInt32 {
        let mask = Glibc.umask(0o022)
        _ = Glibc.umask(mask)
        return UInt32(mask)
    }
}
