/// The contents of `status.json`.
public struct StatusReport: Equatable, Sendable {
    /// `starting`, `syncing`, `watching`, `stopped` or `error` (an `AgentState`'s name).
    public var state: String
    /// The agent's PID.
    public var pid: Int
    /// Source path, for display.
    public var source: String
    /// Mirror path, for display.
    public var mirror: String
    /// Regular files the mirror holds.
    public var files: Int
    /// Their total size.
    public var bytes: UInt64
    /// Queued paths.
    public var pending: Int
    /// When a full pass last completed (ISO 8601, UTC), if ever.
    public var lastFullSync: String?
    /// Deletions held by the brake.
    public var heldDeletes: Int
    /// Paths whose last attempt failed.
    public var errors: [(path: String, message: String)]
    /// What the mirror's file system holds (nil: not probed yet).
    public var mirrorLimits: MirrorLimits?
    /// Source paths the mirror cannot hold (escaped), sorted.
    public var skipped: [String] = []
    /// Directories the inotify watch limit leaves unwatched (0: all are watched).
    public var unwatchedDirectories = 0
    /// How often those are looked at, in seconds (nil while all are watched).
    public var pollSeconds: Double?
    /// The mirror's host, for a remote mirror (nil: local).
    public var remote: String?
    /// For a remote mirror: the age of the oldest change not yet on the remote, seconds.
    public var lagSeconds: Double = 0
    /// The versions the mirror keeps (nil: versions off, or not counted yet).
    public var versions: VersionSummary?
    /// How many paths `skipped` lists at most.
    public static let skippedShown = 20

    /// A report.
    public init(state: String, pid: Int, source: String, mirror: String, files: Int, bytes: UInt64, pending: Int,
                lastFullSync: String?, heldDeletes: Int = 0, errors: [(path: String, message: String)] = []) {
        self.state = state
        self.pid = pid
        self.source = source
        self.mirror = mirror
        self.files = files
        self.bytes = bytes
        self.pending = pending
        self.lastFullSync = lastFullSync
        self.heldDeletes = heldDeletes
        self.errors = errors
    }

    /// Compares every field.
    public static func == (a: StatusReport, b: StatusReport) -> Bool {
        a.state == b.state && a.pid == b.pid && a.source == b.source && a.mirror == b.mirror && a.files == b.files
            && a.bytes == b.bytes && a.pending == b.pending && a.lastFullSync == b.lastFullSync
            && a.heldDeletes == b.heldDeletes && a.errors.map(\.path) == b.errors.map(\.path)
            && a.errors.map(\.message) == b.errors.map(\.message) && a.mirrorLimits == b.mirrorLimits
            && a.skipped == b.skipped && a.unwatchedDirectories == b.unwatchedDirectories && a.pollSeconds == b.pollSeconds
            && a.remote == b.remote && a.lagSeconds == b.lagSeconds && a.versions == b.versions
    }

    /// The JSON text (one object, keys in SPEC order, newline-terminated).
    public var json: String {
        var s = "{\"state\": \(Self.quote(state)), \"pid\": \(pid), \"source\": \(Self.quote(source)), "
        s += "\"mirror\": \(Self.quote(mirror)), \"files\": \(files), \"bytes\": \(bytes), \"pending\": \(pending), "
        s += "\"lastFullSync\": \(lastFullSync.map(Self.quote) ?? "null"), \"heldDeletes\": \(heldDeletes), \"errors\": ["
        s += errors.map { "{\"path\": \(Self.quote($0.path)), \"message\": \(Self.quote($0.message))}" }.joined(separator: ", ")
        s += "]"
        if let mirrorLimits { s += ", \"mirrorLimits\": " + Self.render(mirrorLimits.json) }
        s += ", \"skipped\": {\"count\": \(skipped.count), \"paths\": ["
        s += skipped.prefix(Self.skippedShown).map(Self.quote).joined(separator: ", ")
        s += "]}"
        if unwatchedDirectories > 0 {
            s += ", \"unwatchedDirectories\": \(unwatchedDirectories), \"pollSeconds\": \(pollSeconds.map { String($0) } ?? "null")"
        }
        if let remote {
            s += ", \"remote\": \(Self.quote(remote)), \"lagSeconds\": \(lagSeconds)"
        }
        if let versions { s += ", \"versions\": " + versions.json }
        s += "}\n"
        return s
    }

    /// A JSON value as text (object keys sorted).
    static func render(_ value: JSONValue) -> String {
        switch value {
        case .string(let s): return quote(s)
        case .number(let n): return n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .bool(let b): return b ? "true" : "false"
        case .null: return "null"
        case .array(let items): return "[" + items.map(render).joined(separator: ", ") + "]"
        case .object(let fields):
            return "{" + fields.sorted { $0.key < $1.key }.map { quote($0.key) + ": " + render($0.value) }.joined(separator: ", ") + "}"
        }
    }

    /// A JSON string literal.
    static func quote(_ text: String) -> String {
        var out = "\""
        for u in text.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                if u.value < 0x20 {
                    let hex = String(u.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }
}
