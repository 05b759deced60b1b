/// `keepsync check`: compares source and mirror (read-only, records not used) and
/// prints one line per difference, then a summary. Exit 1 when anything differs or
/// could not be compared.
public struct CheckCommand {
    let source: any FileSystemProviding
    let mirror: any FileSystemProviding
    let options: SyncOptions
    let io: ParallelIO
    /// What the mirror's file system holds: compared within that.
    let limits: MirrorLimits

    /// A check of `source` against `mirror` (an `AbsentTree` when there is none), on a
    /// file system holding `limits`.
    public init(source: any FileSystemProviding, mirror: any FileSystemProviding, options: SyncOptions, io: ParallelIO,
                limits: MirrorLimits = .none) {
        self.source = source
        self.mirror = mirror
        self.options = options
        self.io = io
        self.limits = limits
    }

    /// Runs the comparison: the report goes to `output`, what could not be compared to `errors`.
    public func run(output: (String) -> Void, errors: (String) -> Void) throws -> ExitCode {
        var records = RecordSet()
        records.mirror = MirrorRoot(identity: FileIdentity(device: 0, inode: 0), fileSystem: [], limits: limits)
        let scanner = TreeScanner(source: source, mirror: mirror, records: records, options: options, io: io)
        let scan = try scanner.scan(.root, collectRemovedPaths: true)
        let mirror = self.mirror
        let lines = CheckReport.lines(of: scan, limits: limits) { path in try? mirror.stat(path) }
        var out = lines.map(\.text).joined(separator: "\n")
        if !out.isEmpty { out += "\n" }
        out += CheckReport.summary(lines.count) + "\n"
        output(out)
        // What could not be compared is not "no difference": named, and exit 1.
        for error in scan.unreadable { errors("keepsync: error: \(error.description) (not compared)\n") }
        return lines.isEmpty && scan.unreadable.isEmpty ? .success : .failure
    }
}
