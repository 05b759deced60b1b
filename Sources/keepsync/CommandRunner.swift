import Dispatch
import KeepSyncCore
import KeepSyncLinux
import Synchronization

/// Carries out one invocation of the `keepsync` command: parses it, and wires Core's
/// commands and agent to this machine's adapters (KeepSyncLinux). Returns the exit code.
struct CommandRunner: Sendable {
    let arguments: [[UInt8]]
    let environment: [String: String]

    /// Runs the command and returns its exit code.
    func run() -> ExitCode {
        if arguments.isEmpty {
            LogSink.write(CommandLineParser.usage)
            return .usage
        }
        let invocation: Invocation
        do { invocation = try CommandLineParser.parse(arguments) } catch {
            fail(error, style: LogSink.style(foreground: arguments.contains(Array("--foreground".utf8)) ? true : nil,
                                             environment: environment))
            return .usage
        }
        let style = LogSink.style(foreground: invocation.foreground, environment: environment)
        do {
            switch invocation.command {
            case .help:
                LogSink.writeOut(invocation.manual ? HelpText.manual
                                 : invocation.completionShell != nil ? HelpText.bashCompletion : HelpText.usage)
                return .success
            case .version:
                LogSink.writeOut("keepsync \(KeepSyncVersion.current)\n")
                return .success
            case .sync:
                return try syncEach(invocation, style: style)
            case .check:
                return try checkEach(invocation, style: style)
            case .status:
                return try status(invocation)
            case .versions:
                return try versions(try settings(invocation))
            case .restore:
                return try restore(try settings(invocation))
            case .run:
                return try runAgent(try mirrors(invocation), style: style)
            case .serviceInstall:
                return try ServiceInstaller(invocation: invocation, environment: environment, home: home).install()
            case .serviceUninstall:
                return try ServiceInstaller(invocation: invocation, environment: environment, home: home).uninstall()
            }
        } catch {
            fail(error, style: style)
            return ExitCode(failure: error)
        }
    }

    /// Prints a one-line error; `mirror NAME: ` before it when one of several failed.
    func fail(_ error: any Error, style: LogSink.Style, mirror: String? = nil) {
        let text = (error as? KeepSyncError)?.description ?? "\(error)"
        let prefix = mirror.map { "mirror \($0): " } ?? ""
        LogSink.write((style == .journal ? "<3>" : "") + "keepsync: error: \(prefix)\(text)\n")
    }

    var home: [UInt8] { LinuxProcess.home(environment: environment) }

    /// Resolves settings against this machine's paths.
    var resolver: SettingsResolver { SettingsResolver(environment: environment, home: home, paths: HostPathResolver()) }

    /// Loads the configuration file and flags, resolves and checks the paths.
    func settings(_ invocation: Invocation) throws -> Settings { try resolver.settings(invocation) }

    /// Every mirror's settings (SPEC "Several mirrors").
    func mirrors(_ invocation: Invocation) throws -> [Settings] { try resolver.eachMirror(invocation) }

    /// A remote mirror's next rsync run starts ahead of it: a live change's, a pass's next
    /// group's (the login shell and rsync's start off their path).
    private func keepRsyncWarm(_ host: LinuxAgentHost, _ settings: Settings) {
        guard let remote = host.remote else { return }
        remote.mirror(settings).keepRsyncWarm()
    }

    // MARK: sync

    /// One mirror's `sync`; with `label`, each log line starts with `mirror LABEL: `.
    func sync(_ settings: Settings, style: LogSink.Style, label: String? = nil) throws -> ExitCode {
        let progress = TerminalProgress(enabled: style == .foreground)
        var logger = LogSink.logger(level: settings.configuration.logLevel, style: style, progress: progress)
        if let label {
            let sink = logger.sink
            logger.sink = { level, message in sink(level, "mirror \(label): \(message)") }
        }
        let host = try LinuxAgentHost(settings: settings)
        // The ssh master and its socket directory go with the command, not with the process.
        defer { host.remote?.session.close() }
        keepRsyncWarm(host, settings)
        return try SyncCommand(settings: settings, host: host, statusWriter: StatusFileWriter(stateDirectory: settings.state),
                               progress: progress, clock: ContinuousClock(), logger: logger).run()
    }

    // MARK: run

    func runAgent(_ mirrors: [Settings], style: LogSink.Style) throws -> ExitCode {
        let settings = mirrors[0]
        let progress = TerminalProgress(enabled: style == .foreground)
        let logger = LogSink.logger(level: settings.configuration.logLevel, style: style, progress: progress)
        let runner = self
        let invocation = settings.invocation
        // One host per mirror: a remote mirror's connection is its own.
        let hosts = try mirrors.map { try LinuxAgentHost(settings: $0) }
        defer { for host in hosts { host.remote?.session.close() } }
        for (host, settings) in zip(hosts, mirrors) { keepRsyncWarm(host, settings) }
        let agent = Agent(mirrors: mirrors, hosts: hosts, notifier: SystemdNotifier(environment: environment),
                          statusWriters: mirrors.map { StatusFileWriter(stateDirectory: $0.state) }, progress: progress,
                          clock: ContinuousClock(), logger: logger, reload: { try runner.mirrors(invocation) })
        let (signals, signalSource) = SignalSource.stream()
        defer { signalSource.cancel() }
        let outcome = Mutex<Result<ExitCode, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<ExitCode, any Error>
            do { result = .success(try await agent.run(signals: signals)) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0! }.get()
    }

    // MARK: check

    func check(_ settings: Settings) throws -> ExitCode {
        guard let root = HostPaths.stat(settings.source), root.kind == .directory else {
            throw KeepSyncError(.configuration, "source \(HostPaths.display(settings.source)) does not exist or is not a directory")
        }
        let sourceTree = try PosixFileSystem(rootPath: settings.source)
        let host = try LinuxAgentHost(settings: settings)
        defer { host.remote?.session.close() }
        let mirrorTree: any FileSystemProviding
        if let remote = host.remote {
            // The whole remote tree in one listing.
            mirrorTree = try remote.current() == nil ? AbsentTree()
                : try remote.mirror(settings).snapshot()
        } else if HostPaths.stat(settings.mirror)?.kind == .directory {
            mirrorTree = try PosixFileSystem(rootPath: settings.mirror)
        } else {
            mirrorTree = AbsentTree()
        }
        return try CheckCommand(source: sourceTree, mirror: mirrorTree, options: settings.options, io: host.copies.scanIO,
                                limits: host.recordedMirrorLimits(settings))
            .run(output: LogSink.writeOut, errors: LogSink.write)
    }

    // MARK: status

    /// `status`: `--state DIR` alone names a pair (its status file says which); a pair given
    /// by flags or the configuration file finds its state as the other commands do (one
    /// block per mirror when there are several); with neither, every pair under the state
    /// home is listed (exit 1 only if there is none).
    func status(_ invocation: Invocation) throws -> ExitCode {
        let json = invocation.json
        if let explicit = invocation.state { return try printStatus(of: HostPaths.resolve(explicit), json: json) }
        let defaultConfig = resolver.defaultConfigFile
        if invocation.source != nil || invocation.mirror != nil || invocation.configFile != nil || HostPaths.stat(defaultConfig) != nil {
            let all = try resolver.eachMirror(invocation)
            return all.count == 1 ? try printStatus(of: all[0].state, json: json) : try printStatuses(all, json: json)
        }
        let home = resolver.stateHome
        let names = ((try? HostPaths.list(home)) ?? []).sorted { $0.lexicographicallyPrecedes($1) }
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
