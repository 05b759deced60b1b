/// Sizes and transfer progress for people.
public enum ByteSize {
    /// 1.5 GiB style sizes.
    public static func human(_ n: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(n)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        let tenths = Int((value * 10).rounded())
        return unit == 0 ? "\(n) B" : "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }

    /// `syncing: 1234/20000 files, 120.0 MiB/511.0 MiB, 85.2 MiB/s, ETA 5s`; while the
    /// totals may still grow, `1234/1500+ files, 120.0 MiB/130.0 MiB+, 85.2 MiB/s`.
    public static func progress(files: Int, totalFiles: Int, bytes: UInt64, totalBytes: UInt64, seconds: Double,
                                totalKnown: Bool = true) -> String {
        let rate = seconds > 0 ? Double(bytes) / seconds : 0
        let more = totalKnown ? "" : "+"
        var text = "syncing: \(files)/\(totalFiles)\(more) files, \(human(bytes))/\(human(totalBytes))\(more)"
        if rate > 0 {
            text += ", \(human(UInt64(rate)))/s"
            // No ETA while the pass still finds what to copy.
            if totalKnown {
                let remaining = Double(totalBytes > bytes ? totalBytes - bytes : 0) / rate
                text += ", ETA \(Int(remaining.rounded(.up)))s"
            }
        }
        return text
    }

    /// A duration in seconds, with fractions.
    public static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
