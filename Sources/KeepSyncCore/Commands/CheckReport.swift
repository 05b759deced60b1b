/// Turns a scan into `check`'s lines: `+ path`, `- path`, `~ path`, sorted by path.
public enum CheckReport {
    /// One difference.
    public struct Line: Equatable, Sendable {
        /// `+`, `-` or `~`.
        public var mark: Character
        /// The path.
        public var path: RelativePath

        /// A line.
        public init(_ mark: Character, _ path: RelativePath) {
            self.mark = mark
            self.path = path
        }

        /// The printed form.
        public var text: String { "\(mark) \(path.escaped)" }
    }

    /// The differences in a scan. `mirrorDirectory` gives the mirror's stat of a
    /// directory the scan left unchanged, to compare its mode and mtime (as far as `limits`
    /// say the mirror keeps them).
    public static func lines(of scan: SyncScan, limits: MirrorLimits = .none,
                             mirrorDirectory: (RelativePath) -> FileStat?) -> [Line] {
        var lines: [Line] = []
        var reported: Set<RelativePath> = []
        for step in scan.steps {
            switch step {
            case .removeTemporary:
                continue
            case .path(let state, let actions, _):
                let path = state.path
                let differs = actions.contains { action in
                    switch action {
                    case .copyFile, .makeDirectory, .makeSymlink, .setAttributes, .remove, .renameFrom: return true
                    case .updateRecord, .dropRecord, .skipSpecial, .skipUnholdable: return false
                    }
                }
                guard differs else { continue }
                if state.source == nil {
                    lines.append(Line("-", path))
                } else if state.mirror == nil {
                    lines.append(Line("+", path))
                } else {
                    lines.append(Line("~", path))
                }
                reported.insert(path)
                for below in scan.removedBelow[path] ?? [] { lines.append(Line("-", below)) }
            case .finishDirectory(let path, let source):
                if reported.contains(path) { continue }
                guard let m = mirrorDirectory(path), m.kind == .directory else { continue }
                if !limits.modesEqual(source: source.mode, mirror: m.mode) || !limits.mtimesEqual(m.mtime, source.mtime) {
                    lines.append(Line("~", path))
                }
            }
        }
        return lines.sorted { $0.path < $1.path }
    }

    /// The summary line: `N differences` / `1 difference`.
    public static func summary(_ count: Int) -> String {
        count == 1 ? "1 difference" : "\(count) differences"
    }
}
