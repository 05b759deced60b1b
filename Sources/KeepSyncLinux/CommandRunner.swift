import CKeepSyncShims
import Dispatch
import Glibc
import KeepSyncCore
import Synchronization

/// Carries out one invocation of the `keepsync` command: resolves configuration and
/// paths, takes the lock, wires the production seams and reports. Returns the exit code.
public struct CommandRunner: Sendable {
    let arguments: [[UInt8]]
    let environment: [String: String]

    /// A runner for argv (without argv[0]) and the process environment.
    public init(arguments: [[UInt8]], environment: [String: String]) {
        self.arguments = arguments
        self.environment = environment
    }

    /// Everything a command needs, resolved.
    struct Settings {
        var configuration: Configuration
        var invocation: Invocation
        var source: [UInt8]
        var mirror: [UInt8]
        var state: [UInt8]
        var excludes: ExcludeMatcher
        var configFile: [UInt8]?

        var options: SyncOptions {
            SyncOptions(deleteEnabled: configuration.deleteEnabled, compareContent: invocation.content,
                        maxDeletePercent: configuration.maxDeletePercent, allowMassDelete: invocation.allowMassDelete,
                        excludes: excludes)
        }
    }

    /// The process's arguments (without argv[0]) as raw bytes: argv need not be UTF-8.
    public static func processArguments() -> [[UInt8]] {
        (1..<Int(CommandLine.argc)).compactMap { i in
            CommandLine.unsafeArgv[i].map { Array(UnsafeRawBufferPointer(start: $0, count: strlen($0))) }
        }
    }

    /// The process's environment (later entries of a repeated name win).
    public static func processEnvironment() -> [String: String] {
        var env: [String: String] = [:]
        var i = 0
        while let entry = environ[i] {
            let text = String(cString: entry)
            if let eq = text.firstIndex(of: "=") { env[String(text[..<eq])] = String(text[text.index(after: eq)...]) }
            i += 1
        }
        return env
    }

    /// Runs `keepsync` with the process's arguments and environment, then exits.
    public static func main() -> Never {
        // Copy and scan threads would each get a malloc arena of their own: two are plenty
        // for what they allocate, and keep the resident set small.
        _ = ks_mallopt_arena_max(2)
        Sys.raiseOpenFileLimit()
        let code = CommandRunner(arguments: processArguments(), environment: processEnvironment()).run()
        exit(code.rawValue)
    }

    /// Runs the command and returns its exit code.
    public func run() -> ExitCode {
        if arguments.isEmpty {
            LogSink.write(CommandLineParser.usage)
            return .usage
        }
        let invocation: Invocation
        do { invocation = try CommandLineParser.parse(arguments) } catch {
            fail(error, foreground: LogSink.stderrIsTerminal || arguments.contains(Array("--foreground".utf8)))
            return .usage
        }
        // Under systemd (JOURNAL_STREAM set) lines carry journald priorities, never decoration.
        let foreground = invocation.foreground ?? (LogSink.stderrIsTerminal && environment["JOURNAL_STREAM"] == nil)
        do {
            switch invocation.command {
            case .help:
                LogSink.writeOut(CommandLineParser.usage)
                return .success
            case .version:
                LogSink.writeOut("keepsync \(KeepSyncVersion.current)\n")
                return .success
            case .sync:
                return try sync(try settings(invocation), foreground: foreground)
            case .check:
                return try check(try settings(invocation), foreground: foreground)
            case .status:
                return try status(invocation)
            case .run:
                return try runAgent(try settings(invocation), foreground: foreground)
            case .serviceInstall:
                return try ServiceInstaller(invocation: invocation, environment: environment, home: home).install()
            case .serviceUninstall:
                return try ServiceInstaller(invocation: invocation, environment: environment, home: home).uninstall()
            }
        } catch let error as KeepSyncError {
            fail(error, foreground: foreground)
            switch error.code {
            case .configuration: return .usage
            case .unsafe: return .unsafe
            default: return .failure
            }
        } catch {
            fail(error, foreground: foreground)
            return .failure
        }
    }

    /// Prints a one-line error.
    func fail(_ error: any Error, foreground: Bool) {
        let text = (error as? KeepSyncError)?.description ?? "\(error)"
        if foreground {
            LogSink.write("keepsync: error: \(text)\n")
        } else {
            LogSink.write("<3>keepsync: error: \(text)\n")
        }
    }

    var home: [UInt8] {
        if let h = environment["HOME"], !h.isEmpty { return Array(h.utf8) }
        if let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir { return Array(String(cString: dir).utf8) }
        return [0x2F]
    }

    func xdg(_ variable: String, fallback: String) -> [UInt8] {
        if let v = environment[variable], v.first == "/" { return Array(v.utf8) }
        return home + Array("/\(fallback)".utf8)
    }

    /// Loads the configuration file and flags, resolves and checks the paths.
    func settings(_ invocation: Invocation) throws -> Settings {
        var file = Configuration()
        var configPath: [UInt8]?
        if let explicit = invocation.configFile {
            configPath = explicit
        } else {
            let candidate = xdg("XDG_CONFIG_HOME", fallback: ".config") + Array("/keepsync/keepsync.conf".utf8)
            if HostPaths.stat(candidate) != nil { configPath = candidate }
        }
        if let configPath {
            let bytes: [UInt8]
            do { bytes = try HostPaths.read(configPath) } catch let e as KeepSyncError {
                throw KeepSyncError(.configuration, "--config: \(e.message)")
            }
            file = try ConfigFileParser.parse(bytes, fileName: HostPaths.display(configPath), home: home)
        }
        let config = CommandLineParser.merge(file: file, invocation: invocation, home: home)
        func orKey(_ key: String) -> String { configPath.map { " (or '\(key) =' in \(HostPaths.display($0)))" } ?? "" }
        guard let rawSource = config.source else {
            throw KeepSyncError(.configuration, "missing --source\(orKey("source"))")
        }
        guard let rawMirror = config.mirror else {
            throw KeepSyncError(.configuration, "missing --mirror\(orKey("mirror"))")
        }
        let source = HostPaths.resolve(rawSource)
        let mirror = HostPaths.resolve(rawMirror)
        let s = HostPaths.display(source), m = HostPaths.display(mirror)
        if source == mirror { throw KeepSyncError(.configuration, "source and mirror are the same directory: \(s)") }
        if HostPaths.isWithin(mirror, source) { throw KeepSyncError(.configuration, "mirror \(m) is inside source \(s)") }
        if HostPaths.isWithin(source, mirror) { throw KeepSyncError(.configuration, "source \(s) is inside mirror \(m)") }
        let state: [UInt8]
        if let explicit = config.state {
            state = HostPaths.resolve(explicit)
        } else {
            state = xdg("XDG_STATE_HOME", fallback: ".local/state") + Array("/keepsync/".utf8)
                + Array(StateDirectoryName.name(source: source, mirror: mirror).utf8)
        }
        if HostPaths.isWithin(state, source) || HostPaths.isWithin(state, mirror) {
            throw KeepSyncError(.configuration, "--state \(HostPaths.display(state)) must not be inside the source or the mirror")
        }
        let excludes = try ExcludeMatcher(patterns: config.excludes)
        return Settings(configuration: config, invocation: invocation, source: source, mirror: mirror, state: state,
                        excludes: excludes, configFile: configPath)
    }

    // MARK: sync

    func sync(_ settings: Settings, foreground: Bool) throws -> ExitCode {
        let progress = TerminalProgress(enabled: foreground)
        let logger = LogSink.logger(level: settings.configuration.logLevel, foreground: foreground, progress: progress)
        let prepared = try PreparedState(settings, logger: logger) { records, message in
            writeStatus(settings, state: "error", records: records, summary: nil, extraErrors: [(path: ".", message: message)])
        }
        defer { prepared.lock.release() }
        let store = prepared.store, records = prepared.records, rootStat = prepared.root
        let sourceName = HostPaths.display(settings.source)
        let sourceTree = try PosixFileSystem(rootPath: settings.source)
        guard let opened = try sourceTree.stat(.root), opened.device == rootStat.device, opened.inode == rootStat.inode else {
            throw KeepSyncError(.unsafe, "source \(sourceName) changed while it was being opened; nothing done")
        }
        let mirrorTree = try AtomicFileAccessor(rootPath: settings.mirror)
        let engine = SyncEngine(source: sourceTree, mirror: mirrorTree, store: store, records: records,
                                options: settings.options, logger: logger)
        engine.io = CommandRunner.copyIO
        engine.scanIO = CommandRunner.scanIO
        let scan = try engine.prepare(.root)
        let planned = scan.plannedCopies
        let started = ContinuousClock.now
        if progress.isActive && planned.files > 0 {
            var done = (files: 0, bytes: UInt64(0))
            var drawn = started - .seconds(1)
            engine.onCopy = { bytes in
                done.files += 1
                done.bytes += bytes
                let now = ContinuousClock.now
                guard now - drawn >= .milliseconds(100) else { return }
                drawn = now
                let elapsed = now - started
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                progress.update(TerminalProgress.describe(files: done.files, totalFiles: planned.files, bytes: done.bytes,
                                                          totalBytes: planned.bytes, seconds: seconds))
            }
        }
        var summary = engine.apply(scan)
        // Records that could not be written fail the run (the writer keeps why).
        if var failure = engine.recordWriter.failure {
            if failure.path == nil { failure.path = .root }
            summary.errors.append(failure)
        }
        progress.finish()
        try engine.recordRoot(RootIdentity(device: opened.device, inode: opened.inode))
        if summary != SyncSummary() || records.wasDamaged { try store.compact(engine.records) }
        let held = summary.heldDeletes
        logger.info(describe(summary))
        writeStatus(settings, state: "stopped", records: engine.records, summary: summary, extraErrors: [],
                    kept: (scan.keptFiles, scan.keptBytes))
        if !summary.errors.isEmpty {
            logger.error("\(summary.errors.count) item\(summary.errors.count == 1 ? "" : "s") failed")
        }
        if held > 0 {
            // A refusal, like every exit 3: one error line with the reason and the way out.
            throw KeepSyncError(.unsafe, "held \(held) deletions: more than \(settings.configuration.maxDeletePercent)% of the mirror's \(scan.mirrorEntries) entries; check, then rerun with --allow-mass-delete to apply them")
        }
        return summary.errors.isEmpty ? .success : .failure
    }

    func describe(_ s: SyncSummary) -> String {
        var parts = ["\(s.copiedFiles) file\(s.copiedFiles == 1 ? "" : "s") copied (\(StatusText.humanBytes(s.copiedBytes)))"]
        if s.renamed > 0 { parts.append("\(s.renamed) renamed") }
        if s.createdDirectories > 0 { parts.append("\(s.createdDirectories) directories created") }
        if s.createdLinks > 0 { parts.append("\(s.createdLinks) links made") }
        if s.removedEntries > 0 { parts.append("\(s.removedEntries) removed") }
        if s.skippedSpecial > 0 { parts.append("\(s.skippedSpecial) special files skipped") }
        if !s.errors.isEmpty { parts.append("\(s.errors.count) failed") }
        return "sync done: " + parts.joined(separator: ", ")
    }

    func writeStatus(_ settings: Settings, state: String, records: RecordSet, summary: SyncSummary?,
                     extraErrors: [(path: String, message: String)], kept: (files: Int, bytes: UInt64) = (0, 0)) {
        let report = StatusReport(
            state: state, pid: Int(getpid()), source: HostPaths.display(settings.source),
            mirror: HostPaths.display(settings.mirror), files: records.records.regularFiles + kept.files,
            bytes: records.records.regularBytes + kept.bytes, pending: 0,
            lastFullSync: summary == nil ? nil : LogSink.utcTimestamp(), heldDeletes: summary?.heldDeletes ?? 0,
            errors: extraErrors + (summary?.errors ?? []).map { (path: ($0.path ?? .root).escaped, message: $0.message) })
        try? HostPaths.writeAtomically(settings.state + Array("/status.json".utf8), Array(report.json.utf8))
    }

    // MARK: run

    func runAgent(_ settings: Settings, foreground: Bool) throws -> ExitCode {
        let progress = TerminalProgress(enabled: foreground)
        let logger = LogSink.logger(level: settings.configuration.logLevel, foreground: foreground, progress: progress)
        let runner = self
        let invocation = settings.invocation
        let agent = Agent(settings: settings, logger: logger, notifier: SystemdNotifier(environment: environment), progress: progress,
                          reload: { try runner.settings(invocation) },
                          makeWatcher: { path, logger, heartbeat in
                              InotifyWatcher(rootPath: path, logger: logger, heartbeat: heartbeat)
                          })
        let outcome = Mutex<Result<ExitCode, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<ExitCode, any Error>
            do { result = .success(try await agent.run()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }

    // MARK: check

    func check(_ settings: Settings, foreground: Bool) throws -> ExitCode {
        guard let root = HostPaths.stat(settings.source), root.kind == .directory else {
            throw KeepSyncError(.configuration, "source \(HostPaths.display(settings.source)) does not exist or is not a directory")
        }
        let sourceTree = try PosixFileSystem(rootPath: settings.source)
        let mirrorTree: any FileSystemProviding
        if HostPaths.stat(settings.mirror)?.kind == .directory {
            mirrorTree = try PosixFileSystem(rootPath: settings.mirror)
        } else {
            mirrorTree = AbsentTree()
        }
        let scanner = TreeScanner(source: sourceTree, mirror: mirrorTree, records: RecordSet(), options: settings.options,
                                  io: CommandRunner.scanIO)
        let scan = try scanner.scan(.root, collectRemovedPaths: true)
        let lines = CheckReport.lines(of: scan) { path in try? mirrorTree.stat(path) }
        var out = lines.map(\.text).joined(separator: "\n")
        if !out.isEmpty { out += "\n" }
        out += CheckReport.summary(lines.count) + "\n"
        LogSink.writeOut(out)
        // What could not be compared is not "no difference": named, and exit 1.
        for error in scan.unreadable { LogSink.write("keepsync: error: \(error.description) (not compared)\n") }
        return lines.isEmpty && scan.unreadable.isEmpty ? .success : .failure
    }

    /// Copies staged at once by `sync`: enough to keep a disk's queue busy on a cold cache.
    static let copyIO = ParallelIO(width: 4)
    /// Directory listings ahead of a scan: a cold disk answers many at once.
    static let scanIO = ParallelIO(width: 12)

    // MARK: status

    /// `status`: `--state DIR` alone names a pair (its status file says which); a pair given
    /// by flags or the configuration file finds its state as the other commands do; with
    /// neither, every pair under the state home is listed (exit 1 only if there is none).
    func status(_ invocation: Invocation) throws -> ExitCode {
        let json = invocation.json
        if let explicit = invocation.state { return try printStatus(of: HostPaths.resolve(explicit), json: json) }
        let defaultConfig = xdg("XDG_CONFIG_HOME", fallback: ".config") + Array("/keepsync/keepsync.conf".utf8)
        if invocation.source != nil || invocation.mirror != nil || invocation.configFile != nil || HostPaths.stat(defaultConfig) != nil {
            return try printStatus(of: try settings(invocation).state, json: json)
        }
        let home = xdg("XDG_STATE_HOME", fallback: ".local/state") + Array("/keepsync".utf8)
        let names = ((try? Sys.readDirectoryPath(home)) ?? []).sorted { $0.lexicographicallyPrecedes($1) }
        let reports = names.compactMap { try? HostPaths.read(home + [0x2F] + $0 + Array("/status.json".utf8)) }
        guard !reports.isEmpty else {
            throw KeepSyncError(.io, "no keepsync state under \(HostPaths.display(home)) (has keepsync run or sync been started? name a pair with --source and --mirror, or --state)")
        }
        if json {
            let items = reports.map { String(decoding: $0, as: UTF8.self).trimmingSuffixNewlines }
            LogSink.writeOut("[" + items.joined(separator: ",\n") + "]\n")
        } else {
            LogSink.writeOut(reports.map { StatusText.render(json: $0) }.joined(separator: "\n"))
        }
        return .success
    }

    /// Prints the status file of one state directory.
    func printStatus(of state: [UInt8], json: Bool) throws -> ExitCode {
        let path = state + Array("/status.json".utf8)
        guard let bytes = try? HostPaths.read(path) else {
            throw KeepSyncError(.io, "no status file at \(HostPaths.display(path)) (has keepsync run or sync been started?)")
        }
        LogSink.writeOut(json ? String(decoding: bytes, as: UTF8.self) : StatusText.render(json: bytes))
        return .success
    }
}

extension String {
    /// The text without trailing newlines.
    var trimmingSuffixNewlines: String {
        var s = Substring(self)
        while s.last == "\n" { s = s.dropLast() }
        return String(s)
    }
}
