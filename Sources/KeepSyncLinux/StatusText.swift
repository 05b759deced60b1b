import Foundation

/// Renders `status.json` for humans.
enum StatusText {
    /// The human-readable form; the raw text when it cannot be parsed.
    static func render(json bytes: [UInt8]) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
            return String(decoding: bytes, as: UTF8.self)
        }
        func field(_ key: String) -> String {
            switch object[key] {
            case let s as String: return s
            case let n as NSNumber: return n.stringValue
            default: return "-"
            }
        }
        let bytesValue = (object["bytes"] as? NSNumber)?.uint64Value ?? 0
        var out = "keepsync is \(field("state")) (pid \(field("pid")))\n"
        out += "  source          \(field("source"))\n"
        out += "  mirror          \(field("mirror"))\n"
        out += "  files           \(field("files")) (\(humanBytes(bytesValue)))\n"
        out += "  pending         \(field("pending"))\n"
        out += "  last full sync  \(field("lastFullSync"))\n"
        if let held = object["heldDeletes"] as? NSNumber, held.intValue > 0 {
            out += "  held deletions  \(held.intValue) (rerun with --allow-mass-delete to apply)\n"
        }
        let errors = object["errors"] as? [[String: Any]] ?? []
        if errors.isEmpty {
            out += "  errors          none\n"
        } else {
            out += "  errors          \(errors.count)\n"
            for e in errors { out += "    \(e["path"] as? String ?? "?"): \(e["message"] as? String ?? "")\n" }
        }
        return out
    }

    /// 1.5 GiB style sizes.
    static func humanBytes(_ n: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(n)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(n) B" : String(format: "%.1f %@", value, units[unit])
    }
}
