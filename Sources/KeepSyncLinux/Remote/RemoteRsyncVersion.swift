import KeepSyncCore

/// The remote rsync, as `rsync --version` names it.
public struct RemoteRsyncVersion: Sendable, Equatable {
    /// `rsync --version`'s first line.
    public var line: String
    /// Major, minor, patch (0.0.0 when the line did not parse).
    public var version: (Int, Int, Int)
    /// rsync 3.2.4 and later fsync each file before its rename (`--fsync`).
    public var hasFsync: Bool { version >= (3, 2, 4) }

    /// Parses `rsync  version 3.2.7  protocol version 31`.
    public init(line: String) {
        self.line = line
        let words = line.split(separator: " ")
        let number = words.firstIndex(of: "version").map { words.index(after: $0) }.flatMap { $0 < words.endIndex ? words[$0] : nil }
        let parts = (number ?? "").split(whereSeparator: { !$0.isNumber }).prefix(3).compactMap { Int($0) }
        version = (parts.count > 0 ? parts[0] : 0, parts.count > 1 ? parts[1] : 0, parts.count > 2 ? parts[2] : 0)
    }

    /// Same line, same version.
    public static func == (a: Self, b: Self) -> Bool { a.line == b.line }
}
