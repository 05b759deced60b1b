import Glibc
import KeepSyncCore

/// `keepsync service install|uninstall`: writes or removes the user unit (and the
/// configuration from flags), and enables it when asked.
public struct ServiceInstaller {
    let invocation: Invocation
    let environment: [String: String]
    let home: [UInt8]

    /// An installer for `invocation`'s unit, under the user's `home`.
    public init(invocation: Invocation, environment: [String: String], home: [UInt8]) {
        self.invocation = invocation
        self.environment = environment
        self.home = home
    }

    var configHome: [UInt8] {
        if let v = environment["XDG_CONFIG_HOME"], v.first == "/" { return Array(v.utf8) }
        return home + Array("/.config".utf8)
    }

    var unitName: String { invocation.name.map { "keepsync@\($0).service" } ?? "keepsync.service" }
    var unitFile: [UInt8] {
        configHome + Array("/systemd/user/".utf8) + Array((invocation.name == nil ? "keepsync.service" : "keepsync@.service").utf8)
    }
    var configFile: [UInt8] {
        configHome + Array("/keepsync/\(invocation.name ?? "keepsync").conf".utf8)
    }

    /// The running binary's absolute path.
    static func executablePath() -> String {
        ProcessEnvironment.executablePath().map { String(decoding: $0, as: UTF8.self) } ?? CommandLine.arguments[0]
    }

    /// Writes the unit (and the configuration from flags) and enables it when asked.
    public func install() throws -> ExitCode {
        if invocation.source != nil || invocation.mirror != nil {
            guard let source = invocation.source, let mirror = invocation.mirror else {
                throw KeepSyncError(.configuration, "service install: give both --source and --mirror, or neither (to use an existing \(HostPaths.display(configFile)))")
            }
            // HOST:DIR is not a path to resolve (it would become ~/HOST:DIR, a local folder).
            let remote = try RemoteTarget.parse(mirror)
            try HostPaths.makeDirectories(configHome + Array("/keepsync".utf8), mode: 0o755)
            var text = "# Written by keepsync service install.\n"
            text += "source = \(HostPaths.display(HostPaths.resolve(source)))\n"
            text += "mirror = \(HostPaths.display(remote?.normalized ?? HostPaths.resolve(mirror)))\n"
            if let ssh = invocation.sshCommand { text += "ssh_command = \(HostPaths.display(ssh))\n" }
            if let path = invocation.rsyncPath { text += "rsync_path = \(HostPaths.display(path))\n" }
            if let state = invocation.state { text += "state = \(HostPaths.display(HostPaths.resolve(state)))\n" }
            for e in invocation.excludes { text += "exclude = \(HostPaths.display(e))\n" }
            if let v = invocation.settleMilliseconds { text += "settle_ms = \(v)\n" }
            if let v = invocation.maxDelayMilliseconds { text += "max_delay_ms = \(v)\n" }
            if invocation.noDelete { text += "delete = false\n" }
            if let v = invocation.maxDeletePercent { text += "max_delete_percent = \(v)\n" }
            if let v = invocation.logLevel { text += "log_level = \(v.name)\n" }
            try HostPaths.writeAtomically(configFile, Array(text.utf8))
            LogSink.writeOut("wrote \(HostPaths.display(configFile))\n")
        } else if HostPaths.stat(configFile) == nil {
            throw KeepSyncError(.configuration, "service install: no \(HostPaths.display(configFile)); give --source and --mirror to create it")
        }
        let unit = ServiceUnit.render(executable: ServiceInstaller.executablePath(), template: invocation.name != nil)
        try HostPaths.makeDirectories(configHome + Array("/systemd/user".utf8), mode: 0o755)
        try HostPaths.writeAtomically(unitFile, Array(unit.utf8))
        LogSink.writeOut("wrote \(HostPaths.display(unitFile))\n")
        if invocation.enable {
            try systemctl(["daemon-reload"])
            try systemctl(["enable", "--now", unitName])
            LogSink.writeOut("enabled and started \(unitName)\n")
        } else {
            LogSink.writeOut("to start it now and at every login:\n  systemctl --user daemon-reload && systemctl --user enable --now \(unitName)\n")
        }
        return .success
    }

    /// Disables and removes the unit.
    public func uninstall() throws -> ExitCode {
        _ = try? systemctl(["disable", "--now", unitName])
        if invocation.name == nil || !otherInstancesEnabled() {
            HostPaths.removeFile(unitFile)
            LogSink.writeOut("removed \(HostPaths.display(unitFile))\n")
        }
        _ = try? systemctl(["daemon-reload"])
        LogSink.writeOut("kept \(HostPaths.display(configFile)) and the mirror; delete them by hand if you no longer need them\n")
        return .success
    }

    func otherInstancesEnabled() -> Bool {
        let wants = configHome + Array("/systemd/user/default.target.wants".utf8)
        guard let names = try? Sys.readDirectoryPath(wants) else { return false }
        return names.contains { $0.starts(with: Array("keepsync@".utf8)) }
    }

    /// Runs `systemctl --user ARGS`; throws with its stderr when it fails.
    @discardableResult
    func systemctl(_ args: [String]) throws -> String {
        let (status, message) = try Subprocess.run(["/usr/bin/env", "systemctl", "--user"] + args)
        guard status == 0 else {
            let trimmed = message.split(whereSeparator: \.isNewline).joined(separator: " ")
            throw KeepSyncError(.io, "systemctl --user \(args.joined(separator: " ")) failed: \(trimmed)")
        }
        return message
    }
}
