import Foundation
import Glibc
import Synchronization
import Testing
import KeepSyncTestSupport
import KeepSyncCore

/// keepsync as a unit of a REAL systemd user manager, started by the test (PID 1 is not
/// systemd on the CI machine): `keepsync service install` against the built binary and
/// temp folders, then start, status, live mirroring, reload, kill -9 and restart, stop,
/// and the `keepsync@NAME` template. Skipped, with the reason printed, where no manager
/// can run.
@Suite(.serialized, .offThePool, .enabled("needs a systemd user manager: /lib/systemd/systemd and systemctl (apt-get install systemd)") {
    if let problem = UserManager.missingPrerequisite {
        print("SystemdServiceTests skipped: \(problem)")
        return false
    }
    return true
})
struct SystemdServiceTests {
    /// Starts a manager for `sandbox`, or cancels the test (printing why) when none can run.
    static func startManager(_ sandbox: Sandbox) async throws -> UserManager {
        switch await UserManager.start(in: sandbox) {
        case .success(let manager): return manager
        case .failure(let problem):
            print("SystemdServiceTests: no systemd user manager could start, test skipped: \(problem.description)")
            try Test.cancel("no systemd user manager could start: \(problem.description)")
        }
    }

    /// `keepsync service install ARGS` with the manager's HOME and XDG_CONFIG_HOME.
    static func install(_ sandbox: Sandbox, _ manager: UserManager, _ arguments: [any CommandArgument]) throws -> ProcessResult {
        let result = try ChildProcess.run(sandbox.binary, arguments: (["service", "install"] + arguments).map(\.argumentBytes),
                                          environment: manager.environment, timeout: .seconds(30))
        #expect(!result.timedOut)
        return result
    }

    static func property(_ manager: UserManager, _ unit: String, _ name: String) throws -> String {
        try manager.systemctl(["show", "-p", name, "--value", unit]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Sends the unit's stdout and stderr to a file (a drop-in, added after `verify`):
    /// there is no journald here, and the log is the diagnostics of every failure.
    static func captureOutput(_ manager: UserManager, unit: String, into log: [UInt8]) throws {
        let dir = manager.unitDirectory / "\(unit).d"
        try FS.mkdirs(dir)
        try FS.writeFile(dir / "test-output.conf",
                         "[Service]\nStandardOutput=append:\(ByteEscaping.escape(log))\nStandardError=append:\(ByteEscaping.escape(log))\n")
        try #require(try manager.systemctl(["daemon-reload"]).status == 0)
    }

    static func text(_ path: [UInt8]) -> String {
        String(decoding: (try? FS.readFile(path)) ?? [], as: UTF8.self)
    }

    // MARK: Cases

    @Test func theInstalledUnitStartsReloadsSurvivesAKillAndStopsUnderARealUserManager() async throws {
        let sandbox = try Sandbox()
        let manager = try await Self.startManager(sandbox)
        defer { withExtendedLifetime(sandbox) { manager.stop() } }
        try sandbox.buildSmallSource()
        let unit = "keepsync.service"
        let log = sandbox.root / "service.log"
        func diagnostics() -> String {
            let status = (try? manager.systemctl(["status", "--no-pager", unit]).stdoutText) ?? "(no status)"
            return "--- systemctl --user status ---\n\(status)--- service output ---\n\(Self.text(log))--- manager output ---\n\(manager.logText)"
        }

        // Install against the built binary and the sandbox's folders.
        let installed = try Self.install(sandbox, manager, sandbox.paths)
        try #require(installed.status == 0, "\(installed)")
        let unitFile = manager.unitDirectory / unit
        let unitText = Self.text(unitFile)
        // The unit runs a copy in ~/.local/bin, not the build folder's binary.
        let copy = manager.home / ".local/bin/keepsync"
        let execStart = "ExecStart=\(ByteEscaping.escape(copy)) run"
        #expect(unitText.split(separator: "\n").contains { $0 == execStart },
                "\(ByteEscaping.escape(unitFile)) does not say `\(execStart)`:\n\(unitText)\n\(installed)")
        #expect(try FS.readFile(copy) == FS.readFile(sandbox.binary), "the copy is not the binary that installed it")
        #expect(installed.stdoutText.contains("systemctl --user"), "install names the systemctl line to run:\n\(installed)")
        try #require(try manager.systemctl(["daemon-reload"]).status == 0)
        let verify = try manager.run(UserManager.systemdAnalyze, ["--user", "verify", ByteEscaping.escape(unitFile)])
        #expect(verify.status == 0 && verify.stdout.isEmpty && verify.stderr.isEmpty,
                "systemd-analyze --user verify is not clean:\n\(verify)")
        try Self.captureOutput(manager, unit: unit, into: log)

        // start: Type=notify returns once READY=1 came, so the initial sync is done.
        let start = try manager.systemctl(["start", unit], timeout: .seconds(40))
        try #require(start.status == 0, "systemctl --user start: \(start)\n\(diagnostics())")
        let completeAtStart = sandbox.differencesFromSource().isEmpty
        #expect(completeAtStart,
                "`systemctl start` returned (READY=1) before the initial sync was done:\n\(sandbox.differencesFromSourceSummary())")
        #expect(try manager.systemctl(["is-active", unit]).stdoutText == "active\n", "\(diagnostics())")
        let status = try manager.systemctl(["status", "--no-pager", unit])
        print("SystemdServiceTests: `systemctl --user status keepsync` after start:\n\(status.stdoutText)")
        #expect(status.status == 0, "\(status)")
        #expect(status.stdoutText.contains("Status: \"watching 3 files, 0 pending\""),
                "no `Status: \"watching 3 files, 0 pending\"` line:\n\(status.stdoutText)")
        #expect(status.stdoutText.contains("Active: active (running)"), "\(status.stdoutText)")
        let firstPID = try Self.property(manager, unit, "MainPID")

        // A file written in the source is mirrored.
        try FS.writeFile(sandbox.source / "new.txt", "written while the service runs\n")
        let mirrored = await eventually(timeout: .seconds(15)) { FS.exists(sandbox.mirror / "new.txt") && sandbox.differencesFromSource().isEmpty }
        #expect(mirrored, "new.txt never mirrored: \(sandbox.differencesFromSourceSummary())\n\(diagnostics())")

        // reload = SIGHUP = full resync: it completes (no hang) and repairs the mirror.
        try FS.unlink(sandbox.mirror / "top.txt")
        try FS.writeFile(sandbox.source / "probe.txt", "probe\n")
        let probed = await eventually(timeout: .seconds(15)) { FS.exists(sandbox.mirror / "probe.txt") }
        try #require(probed, "probe.txt never mirrored\n\(diagnostics())")
        #expect(!FS.exists(sandbox.mirror / "top.txt"), "top.txt came back without a reload: the reload check proves nothing")
        let clock = ContinuousClock()
        let reloadStarted = clock.now
        let reload = try manager.systemctl(["reload", unit], timeout: .seconds(20))
        let reloadTook = clock.now - reloadStarted
        print("SystemdServiceTests: systemctl --user reload took \(reloadTook)")
        #expect(!reload.timedOut && reload.status == 0 && reloadTook < .seconds(10),
                "systemctl --user reload did not complete promptly (\(reloadTook)): \(reload)\n\(diagnostics())")
        let repaired = await eventually(timeout: .seconds(15)) { FS.exists(sandbox.mirror / "top.txt") }
        #expect(repaired, "top.txt, deleted from the mirror, is not back after reload\n\(diagnostics())")
        #expect(try manager.systemctl(["is-active", unit]).stdoutText == "active\n", "\(diagnostics())")
        #expect(try Self.property(manager, unit, "MainPID") == firstPID, "reload restarted the process")

        // kill -9 of the main PID: systemd restarts it, and it converges.
        let pidText = try Self.property(manager, unit, "MainPID")
        let killed = try #require(pid_t(pidText), "MainPID=\(pidText)")
        try #require(killed > 0, "MainPID=\(pidText)\n\(diagnostics())")
        kill(killed, SIGKILL)
        try FS.writeFile(sandbox.source / "during-restart.txt", "written while keepsync was down\n")
        var newPID = ""
        let restarted = await eventually(timeout: .seconds(20), every: .milliseconds(100)) {
            newPID = (try? Self.property(manager, unit, "MainPID")) ?? ""
            let active = (try? manager.systemctl(["is-active", unit]).stdoutText) == "active\n"
            return active && newPID != "0" && newPID != "" && newPID != pidText
        }
        #expect(restarted, "not restarted after kill -9 of \(killed) (MainPID now \(newPID))\n\(diagnostics())")
        #expect(try Self.property(manager, unit, "NRestarts") == "1", "\(diagnostics())")
        let converged = await eventually(timeout: .seconds(20)) { sandbox.differencesFromSource().isEmpty }
        #expect(converged, "no convergence after the restart: \(sandbox.differencesFromSourceSummary())\n\(diagnostics())")

        // stop: inactive, not failed (SIGTERM is a clean exit 0).
        let stop = try manager.systemctl(["stop", unit], timeout: .seconds(40))
        #expect(stop.status == 0, "\(stop)\n\(diagnostics())")
        #expect(try manager.systemctl(["is-active", unit]).stdoutText == "inactive\n", "\(diagnostics())")
        #expect(try Self.property(manager, unit, "Result") == "success", "\(diagnostics())")
        let finalStatus = try manager.systemctl(["status", "--no-pager", unit])
        print("SystemdServiceTests: `systemctl --user status keepsync` after stop:\n\(finalStatus.stdoutText)")

        // Its stderr goes to a file here (no journald: systemd sets no JOURNAL_STREAM for
        // it), so plain lines, never a <N> prefix (LoggingTests covers the journal stream).
        let lines = Self.text(log).split(separator: "\n")
        #expect(!lines.isEmpty, "the service logged nothing")
        #expect(lines.allSatisfy { $0.hasPrefix("keepsync: ") }, "lines not plain:\n\(Self.text(log))")
        #expect(try sandbox.strayTemporaryFiles().isEmpty)
    }

    @Test func theTemplateInstanceReadsItsOwnConfigurationAndMirrors() async throws {
        let sandbox = try Sandbox()
        let manager = try await Self.startManager(sandbox)
        defer { withExtendedLifetime(sandbox) { manager.stop() } }
        try sandbox.buildSmallSource()
        let unit = "keepsync@docs.service"
        let log = sandbox.root / "service.log"
        func diagnostics() -> String {
            let status = (try? manager.systemctl(["status", "--no-pager", unit]).stdoutText) ?? "(no status)"
            return "--- systemctl --user status ---\n\(status)--- service output ---\n\(Self.text(log))--- manager output ---\n\(manager.logText)"
        }

        let installed = try Self.install(sandbox, manager, ["--name", "docs"] + sandbox.paths)
        try #require(installed.status == 0, "\(installed)")
        let template = manager.unitDirectory / "keepsync@.service"
        let templateText = Self.text(template)
        let execStart = "ExecStart=\(ByteEscaping.escape(manager.home / ".local/bin/keepsync")) run --config %E/keepsync/%i.conf"
        #expect(templateText.split(separator: "\n").contains { $0 == execStart }, "\(ByteEscaping.escape(template)):\n\(templateText)")
        let config = Self.text(manager.configHome / "keepsync/docs.conf")
        #expect(config.contains("source = \(ByteEscaping.escape(sandbox.source))") && config.contains("mirror = \(ByteEscaping.escape(sandbox.mirror))"),
                "docs.conf:\n\(config)")
        try #require(try manager.systemctl(["daemon-reload"]).status == 0)
        let verify = try manager.run(UserManager.systemdAnalyze, ["--user", "verify", "\(ByteEscaping.escape(template)):\(unit)"])
        #expect(verify.status == 0 && verify.stdout.isEmpty && verify.stderr.isEmpty,
                "systemd-analyze --user verify of the template is not clean:\n\(verify)")
        try Self.captureOutput(manager, unit: "keepsync@.service", into: log)

        let start = try manager.systemctl(["start", unit], timeout: .seconds(40))
        try #require(start.status == 0, "systemctl --user start \(unit): \(start)\n\(diagnostics())")
        let completeAtStart = sandbox.differencesFromSource().isEmpty
        #expect(completeAtStart, "started before the initial sync was done: \(sandbox.differencesFromSourceSummary())")
        #expect(try manager.systemctl(["is-active", unit]).stdoutText == "active\n", "\(diagnostics())")
        let status = try manager.systemctl(["status", "--no-pager", unit])
        print("SystemdServiceTests: `systemctl --user status \(unit)`:\n\(status.stdoutText)")
        #expect(status.stdoutText.contains("Status: \"watching 3 files, 0 pending\""), "\(status.stdoutText)")

        try FS.writeFile(sandbox.source / "docs-new.txt", "written while the instance runs\n")
        let mirrored = await eventually(timeout: .seconds(15)) { sandbox.differencesFromSource().isEmpty }
        #expect(mirrored, "\(sandbox.differencesFromSourceSummary())\n\(diagnostics())")

        let stop = try manager.systemctl(["stop", unit], timeout: .seconds(40))
        #expect(stop.status == 0, "\(stop)\n\(diagnostics())")
        #expect(try manager.systemctl(["is-active", unit]).stdoutText == "inactive\n", "\(diagnostics())")
        #expect(try Self.property(manager, unit, "Result") == "success", "\(diagnostics())")
    }
}

extension SystemdServiceTests {
    @Test func installWithEnableStartsTheServiceInOneStepAndUninstallReversesIt() async throws {
        let sandbox = try Sandbox()
        let manager = try await Self.startManager(sandbox)
        defer { withExtendedLifetime(sandbox) { manager.stop() } }
        try sandbox.buildSmallSource()
        let unit = "keepsync.service"
        let log = sandbox.root / "service.log"
        func diagnostics() -> String {
            let status = (try? manager.systemctl(["status", "--no-pager", unit]).stdoutText) ?? "(no status)"
            return "--- systemctl --user status ---\n\(status)--- service output ---\n\(Self.text(log))--- manager output ---\n\(manager.logText)"
        }
        // The drop-in may come first: it applies once the unit file appears.
        try Self.captureOutput(manager, unit: unit, into: log)

        let installed = try Self.install(sandbox, manager, sandbox.paths + ["--enable"])
        try #require(installed.status == 0, "\(installed)\n\(diagnostics())")
        #expect(try manager.systemctl(["is-active", unit]).stdoutText == "active\n", "\(installed)\n\(diagnostics())")
        #expect(try manager.systemctl(["is-enabled", unit]).stdoutText == "enabled\n", "\(diagnostics())")
        let complete = sandbox.differencesFromSource().isEmpty
        #expect(complete, "install --enable returned before the initial sync was done: \(sandbox.differencesFromSourceSummary())")

        let removed = try ChildProcess.run(sandbox.binary, arguments: ["service", "uninstall"].map { Array($0.utf8) },
                                           environment: manager.environment, timeout: .seconds(40))
        #expect(removed.status == 0 && !removed.timedOut, "\(removed)\n\(diagnostics())")
        #expect(!FS.exists(manager.unitDirectory / unit), "the unit file is still there after uninstall")
        #expect(try manager.systemctl(["is-active", unit]).stdoutText == "inactive\n", "\(diagnostics())")
        #expect(try Self.property(manager, unit, "LoadState") == "not-found", "\(diagnostics())")
        #expect(FS.exists(manager.configHome / "keepsync/keepsync.conf"), "uninstall keeps the configuration")
        let differences = sandbox.differencesFromSource()
        #expect(differences.isEmpty && FS.exists(sandbox.mirror / "top.txt"), "uninstall keeps the mirror")
    }
}

// MARK: - The user manager

/// A `systemd --user` started by the test, with a private XDG_RUNTIME_DIR (0700) and
/// HOME / XDG_CONFIG_HOME in the sandbox, in a cgroup of its own where the hierarchy
/// allows it (so two managers never share unit cgroups). `stop()` ends it by PID.
final class UserManager {
    static let systemdBinary = "/lib/systemd/systemd"
    static let systemctlBinary = (["/usr/bin/systemctl", "/bin/systemctl"] as [String]).first { access($0, X_OK) == 0 } ?? "/usr/bin/systemctl"
    static let systemdAnalyze = (["/usr/bin/systemd-analyze", "/bin/systemd-analyze"] as [String]).first { access($0, X_OK) == 0 } ?? "/usr/bin/systemd-analyze"
    /// systemctl answers "offline" unless this directory exists (sd_booted()).
    static let bootedMarker = "/run/systemd/system"
    /// Left next to it while a test's manager may need it: the marker was made by a test
    /// (not by a booted systemd), so the last test manager to stop removes it again.
    static let bootedMarkerFlag = "/run/keepsync-tests-made-run-systemd-system"
    static let cgroupHierarchies = ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"]
    private static let counter = Mutex(0)

    /// Why no manager can run here, or nil.
    static var missingPrerequisite: String? {
        if access(systemdBinary, X_OK) != 0 { return "\(systemdBinary) is missing (apt-get install systemd)" }
        if access(systemctlBinary, X_OK) != 0 { return "systemctl is missing (apt-get install systemd)" }
        if access(systemdAnalyze, X_OK) != 0 { return "systemd-analyze is missing (apt-get install systemd)" }
        var st = stat()
        if stat(bootedMarker, &st) != 0 && geteuid() != 0 {
            return "\(bootedMarker) does not exist and only root may create it"
        }
        return nil
    }

    let process: BackgroundChild
    let environment: [String: String]
    let home: [UInt8]
    let configHome: [UInt8]
    let logBase: [UInt8]
    private let cgroup: String?
    private var stopped = false

    var unitDirectory: [UInt8] { configHome / "systemd/user" }
    var logText: String { process.stderrText + String(decoding: (try? FS.readFile(logBase + Array(".stdout".utf8))) ?? [], as: UTF8.self) }

    struct Problem: Error, CustomStringConvertible { var description: String }

    private init(process: BackgroundChild, environment: [String: String], home: [UInt8], configHome: [UInt8], logBase: [UInt8],
                 cgroup: String?) {
        self.process = process
        self.environment = environment
        self.home = home
        self.configHome = configHome
        self.logBase = logBase
        self.cgroup = cgroup
    }

    deinit { stop() }

    /// Starts a manager and waits (deadline) until `systemctl --user` talks to it.
    static func start(in sandbox: Sandbox) async -> Result<UserManager, Problem> {
        var st = stat()
        if stat(bootedMarker, &st) != 0 {
            let flag = open(bootedMarkerFlag, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            if flag >= 0 { close(flag) }
            guard (try? FS.mkdirs(Array(bootedMarker.utf8))) != nil else {
                return .failure(Problem(description: "cannot create \(bootedMarker): errno \(errno)"))
            }
        }
        let runtime = sandbox.root / "run"
        do {
            try FS.mkdir(runtime, mode: 0o700)
        } catch {
            return .failure(Problem(description: "cannot create XDG_RUNTIME_DIR: \(error)"))
        }
        let home = sandbox.home
        let configHome = home / ".config"
        var env = sandbox.environment
        env["PATH"] = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        env["XDG_RUNTIME_DIR"] = ByteEscaping.escape(runtime)
        env["XDG_CONFIG_HOME"] = ByteEscaping.escape(configHome)
        env["HOME"] = ByteEscaping.escape(home)

        // A cgroup of its own (cgroup v1 name=systemd and the v2 hierarchy), best effort.
        let n = counter.withLock { $0 += 1; return $0 }
        let name = "keepsync-test-\(getpid())-\(n)"
        var cgroup: String?
        var moves = ""
        for h in cgroupHierarchies where access(h + "/cgroup.procs", W_OK) == 0 {
            if mkdir(h + "/" + name, 0o755) == 0 {
                cgroup = name
                moves += "echo $$ > \(h)/\(name)/cgroup.procs 2>/dev/null; "
            }
        }
        let logBase = sandbox.root / "manager"
        let process: BackgroundChild
        do {
            process = try BackgroundChild(Array("/bin/sh".utf8),
                                          arguments: [Array("-c".utf8), Array("\(moves)exec \(systemdBinary) --user".utf8)],
                                          environment: env, output: .files(base: logBase))
        } catch {
            return .failure(Problem(description: "cannot spawn \(systemdBinary) --user: \(error)"))
        }
        let manager = UserManager(process: process, environment: env, home: home, configHome: configHome, logBase: logBase,
                                  cgroup: cgroup)
        var answer = ""
        let up = await eventually(timeout: .seconds(20), every: .milliseconds(50)) {
            if process.poll() != nil { return true }
            answer = (try? manager.systemctl(["is-system-running"], timeout: .seconds(5)).stdoutText) ?? ""
            return ["running\n", "degraded\n"].contains(answer)
        }
        if let exit = process.poll() {
            manager.stop()
            return .failure(Problem(description: "\(systemdBinary) --user exited with status \(exit):\n\(manager.logText)"))
        }
        if !up {
            manager.stop()
            return .failure(Problem(description: "systemctl --user is-system-running still says \(answer.isEmpty ? "nothing" : answer) after 20 s:\n\(manager.logText)"))
        }
        return .success(manager)
    }

    /// `systemctl --user ARGS` against this manager.
    func systemctl(_ arguments: [String], timeout: Duration = .seconds(20)) throws -> ProcessResult {
        try run(Self.systemctlBinary, ["--user"] + arguments, timeout: timeout)
    }

    func run(_ program: String, _ arguments: [String], timeout: Duration = .seconds(20)) throws -> ProcessResult {
        try ChildProcess.run(Array(program.utf8), arguments: arguments.map { Array($0.utf8) }, environment: environment, timeout: timeout)
    }

    /// SIGTERM to the manager's PID (it stops its units), wait, then SIGKILL; anything
    /// left in its cgroup is killed; the cgroup and a marker it created are removed.
    func stop() {
        guard !stopped else { return }
        stopped = true
        if process.poll() == nil {
            process.send(SIGTERM)
            if !eventuallyBlocking(timeout: .seconds(15), { process.poll() != nil }) {
                print("SystemdServiceTests: the user manager (PID \(process.pid)) ignored SIGTERM for 15 s; SIGKILL")
                process.killNow()
            }
        }
        if let cgroup {
            for h in Self.cgroupHierarchies {
                let root = h + "/" + cgroup
                for pid in Self.processes(under: root) { kill(pid, SIGKILL) }
                _ = eventuallyBlocking(timeout: .seconds(5)) { Self.processes(under: root).isEmpty }
                Self.removeCgroups(root)
            }
        }
        // The marker goes once no test manager (this run's or a concurrent one's) needs it.
        if access(Self.bootedMarkerFlag, F_OK) == 0, !Self.anotherUserManagerRuns(besides: process.pid) {
            rmdir(Self.bootedMarker)
            unlink(Self.bootedMarkerFlag)
        }
    }

    /// True when a `systemd --user` other than `pid` is alive on the machine.
    private static func anotherUserManagerRuns(besides pid: pid_t) -> Bool {
        guard let entries = try? FS.list(Array("/proc".utf8)) else { return false }
        return entries.contains { name in
            guard let other = pid_t(String(decoding: name, as: UTF8.self)), other != pid,
                  let cmdline = try? FS.readFile(Array("/proc/\(other)/cmdline".utf8)) else { return false }
            let argv = cmdline.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            return argv.count >= 2 && argv[0].hasSuffix("/systemd") && argv[1] == "--user"
        }
    }

    private static func subdirectories(_ dir: String) -> [String] {
        guard let names = try? FS.list(Array(dir.utf8)) else { return [] }
        return names.map { dir + "/" + String(decoding: $0, as: UTF8.self) }.filter { FS.lstat(Array($0.utf8))?.kind == .directory }
    }

    private static func processes(under dir: String) -> [pid_t] {
        guard FS.exists(Array(dir.utf8)) else { return [] }
        let own = String(decoding: (try? FS.readFile(Array((dir + "/cgroup.procs").utf8))) ?? [], as: UTF8.self)
            .split(separator: "\n").compactMap { pid_t($0) }
        return own + subdirectories(dir).flatMap { processes(under: $0) }
    }

    private static func removeCgroups(_ dir: String) {
        guard FS.exists(Array(dir.utf8)) else { return }
        for sub in subdirectories(dir) { removeCgroups(sub) }
        rmdir(dir)
    }
}
