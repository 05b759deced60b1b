/// `keepsync status` over several mirrors: one entry per mirror, from its state
/// directory's `status.json`, or a note when it has none yet.
public enum StatusList {
    /// The status file of a state directory.
    public static func file(in state: [UInt8]) -> [UInt8] { state + Array("/status.json".utf8) }

    /// What is said of a mirror whose state directory `state` holds no status file.
    public static func missing(in state: [UInt8]) -> String {
        "no status file at \(ByteEscaping.escape(file(in: state))) (has keepsync run or sync been started?)"
    }

    /// The `--json` text: an array of each mirror's status file as written; for a mirror
    /// without one, `{"state": "none", "source": …, "mirror": …, "message": …}`.
    public static func json(_ entries: [(settings: Settings, status: [UInt8]?)]) -> String {
        let items = entries.map { settings, status in
            guard let status else {
                return "{\"state\": \"none\", \"source\": \(StatusReport.quote(settings.sourceName)), "
                    + "\"mirror\": \(StatusReport.quote(settings.mirrorName)), "
                    + "\"message\": \(StatusReport.quote(missing(in: settings.state)))}"
            }
            var text = Substring(String(decoding: status, as: UTF8.self))
            while text.last == "\n" { text = text.dropLast() }
            return String(text)
        }
        return "[" + items.joined(separator: ",\n") + "]\n"
    }
}
