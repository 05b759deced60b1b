import KeepSyncCore

/// Renders `status.json` for humans.
public enum StatusText {
    /// The human-readable form; the raw text when it cannot be parsed.
    public static func render(json bytes: [UInt8]) -> String {
        guard case .object(let object)? = JSONValue.parse(bytes) else {
            return String(decoding: bytes, as: UTF8.self)
        }
        func field(_ key: String) -> String {
            switch object[key] {
            case .string(let s)?: return s
            case .number(let n)?: return n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
            default: return "-"
            }
        }
        let bytesValue = object["bytes"]?.number.map { UInt64(max(0, $0)) } ?? 0
        var out = "keepsync is \(field("state")) (pid \(field("pid")))\n"
        out += "  source          \(field("source"))\n"
        out += "  mirror          \(field("mirror"))\n"
        out += "  files           \(field("files")) (\(ByteSize.human(bytesValue)))\n"
        out += "  pending         \(field("pending"))\n"
        out += "  last full sync  \(field("lastFullSync"))\n"
        if let held = object["heldDeletes"]?.number, held > 0 {
            out += "  held deletions  \(Int(held)) (rerun with --allow-mass-delete to apply)\n"
        }
        if case .object(let limits)? = object["mirrorLimits"], let summary = limits["summary"]?.string, !summary.isEmpty {
            out += "  mirror holds    \(summary)\n"
        }
        if case .object(let skipped)? = object["skipped"], let count = skipped["count"]?.number, count > 0 {
            var paths: [String] = []
            if case .array(let list)? = skipped["paths"] { paths = list.compactMap(\.string) }
            out += "  skipped         \(Int(count)) (what the mirror cannot hold)\n"
            for p in paths { out += "    \(p)\n" }
        }
        if case .object(let versions)? = object["versions"], let count = versions["count"]?.number {
            let bytes = UInt64(max(0, versions["bytes"]?.number ?? 0))
            let oldest = versions["oldest"]?.string.map { ", oldest \($0)" } ?? ""
            out += "  versions        \(Int(count)) (\(ByteSize.human(bytes)))\(oldest)\n"
        }
        var errors: [[String: JSONValue]] = []
        if case .array(let list)? = object["errors"] {
            for case .object(let e) in list { errors.append(e) }
        }
        if errors.isEmpty {
            out += "  errors          none\n"
        } else {
            out += "  errors          \(errors.count)\n"
            for e in errors { out += "    \(e["path"]?.string ?? "?"): \(e["message"]?.string ?? "")\n" }
        }
        return out
    }
}
