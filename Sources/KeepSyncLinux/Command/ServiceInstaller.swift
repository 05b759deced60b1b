import Glibc
import KeepSyncCore

/// `keepsync service install|uninstall`: copies the binary to `~/.local/bin`, writes or
/// removes the user unit (and the configuration from flags, the manual page and the
/// completions), and enables it when asked.
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

    /// Where the binary, the manual page and the completions go.
    var binDirectory: [UInt8] { home + Array("/.local/bin".utf8) }
    var dataHome: [UInt8] {
        if let v = environment["XDG_DATA_HOME"], v.first == "/" { return Array(v.utf8) }
        return home + Array("/.local/share".utf8)
    }

    /// Bytes every keepsync binary holds (this constant): how an older copy is told from
    /// another program of the same name.
    static let executableMarker = Array("keepsync-executable: keeps a mirror identical to a source".utf8)

    /// Copies the running binary to `~/.local/bin/keepsync` (atomically), so that the
    /// service outlives the build folder; an older keepsync there is replaced, another
    /// program of that name refused. Returns the copy's path.
    func installBinary() throws -> [UInt8] {
        let target = binDirectory + Array("/keepsync".utf8)
        guard let running = ProcessEnvironment.executablePath() else {
            throw KeepSyncError(.io, "service install: cannot find the running binary (/proc/self/exe)")
        }
        if (try? Sys.realPath(target)) == running { return target }
        let bytes = try HostPaths.read(running)
        if let existing = HostPaths.stat(target) {
            let old = existing.kind == .regular ? try HostPaths.read(target) : []
            if old == bytes { return target }
            guard old.firstRange(of: Self.executableMarker) != nil else {
                throw KeepSyncError(.configuration, "service install: \(HostPaths.display(target)) is another program, not keepsync; move it away, then install again")
            }
        }
        try HostPaths.makeDirectories(binDirectory, mode: 0o755)
        try HostPaths.writeAtomically(target, bytes, mode: 0o755)
        LogSink.writeOut("installed \(HostPaths.display(target))\n")
        return target
    }

    /// The manual page and the bash completions, where man and bash-completion look.
    func installDocuments() throws {
        for (directory, name, text) in [("/man/man1", "keepsync.1", HelpText.manual),
                                        ("/bash-completion/completions", "keepsync", HelpText.bashCompletion)] {
            let dir = dataHome + Array(directory.utf8)
            try HostPaths.makeDirectories(dir, mode: 0o755)
            try HostPaths.writeAtomically(dir + Array("/\(name)".utf8), Array(text.utf8))
        }
    }

    /// What a user may need to do: put `~/.local/bin` in PATH; `loginctl enable-linger`
    /// for the service to run while logged out.
    func notes() -> String {
        var out = ""
        let dir = HostPaths.display(binDirectory)
        if !(environment["PATH"] ?? "").split(separator: ":").contains(where: { $0 == dir }) {
            out += "note: \(dir) is not in PATH (the service runs it by its full path); to type keepsync, add it to PATH\n"
        }
        let user = environment["USER"] ?? environment["LOGNAME"] ?? ""
        if !user.isEmpty, HostPaths.stat(Array("/var/lib/systemd/linger/\(user)".utf8)) == nil {
            out += "note: the service stops when you log out; to keep it running: loginctl enable-linger \(user)\n"
        }
        return out
    }

    /// Writes the unit (and the configuration from flags) and enables it when asked.
    public func install() throws -> ExitCode {
        if invocation.source != nil || invocation.mirror != nil {
            guard let source = invocation.source, !invocation.mirrors.isEmpty else {
                throw KeepSyncError(.configuration, "service install: give both --source and --mirror, or neither (to use an existing \(HostPaths.display(configFile)))")
            }
            // HOST:DIR is not a path to resolve (it would become ~/HOST:DIR, a local folder).
            let mirrors = try invocation.mirrors.map { mirror in
                try RemoteTarget.parse(mirror).map { (path: $0.normalized, directory: $0.directory, host: $0.host) }
                    ?? { let path = HostPaths.resolve(mirror); return (path: path, directory: path, host: "") }()
            }
            try HostPaths.makeDirectories(configHome + Array("/keepsync".utf8), mode: 0o755)
            var text = "# Written by keepsync service install.\n"
            text += "source = \(HostPaths.display(HostPaths.resolve(source)))\n"
            if mirrors.count == 1 { text += "mirror = \(HostPaths.display(mirrors[0].path))\n" }
            if let ssh = invocation.sshCommand { text += "ssh_command = \(HostPaths.display(ssh))\n" }
            if let path = invocation.rsyncPath { text += "rsync_path = \(HostPaths.display(path))\n" }
            if let state = invocation.state { text += "state = \(HostPaths.display(HostPaths.resolve(state)))\n" }
            for e in invocation.excludes { text += "exclude = \(HostPaths.display(e))\n" }
            if let v = invocation.settleMilliseconds { text += "settle_ms = \(v)\n" }
            if let v = invocation.maxDelayMilliseconds { text += "max_delay_ms = \(v)\n" }
            if invocation.noDelete { text += "delete = false\n" }
            if let v = invocation.maxDeletePercent { text += "max_delete_percent = \(v)\n" }
            if let v = invocation.logLevel { text += "log_level = \(v.name)\n" }
            if let v = invocation.verifyIntervalSeconds { text += "verify_interval = \(v)\n" }
            if let v = invocation.keepVersionsSeconds { text += "keep_versions = \(ConfigFileParser.durationText(v))\n" }
            if let dir = invocation.versionsDirectory { text += "versions_dir = \(HostPaths.display(HostPaths.resolve(dir)))\n" }
            // Several mirrors: one section each, the keys above shared.
            if mirrors.count > 1 {
                let names = Self.sectionNames(mirrors.map { $0.directory.isEmpty ? Array($0.host.utf8) : $0.directory })
                for (name, mirror) in zip(names, mirrors) { text += "\n[mirror \(name)]\npath = \(HostPaths.display(mirror.path))\n" }
            }
            try HostPaths.writeAtomically(configFile, Array(text.utf8))
            LogSink.writeOut("wrote \(HostPaths.display(configFile))\n")
        } else if HostPaths.stat(configFile) == nil {
            throw KeepSyncError(.configuration, "service install: no \(HostPaths.display(configFile)); give --source and --mirror to create it")
        }
        let binary = try installBinary()
        try installDocuments()
        let unit = ServiceUnit.render(executable: HostPaths.display(binary), template: invocation.name != nil)
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
        LogSink.writeOut(notes())
        return .success
    }

    /// A section name for each mirror: the last component of `directories`, each byte
    /// outside `[A-Za-z0-9_-]` made `_`, `-2`, `-3` … after one already taken.
    static func sectionNames(_ directories: [[UInt8]]) -> [String] {
        var taken: Set<String> = []
        return directories.map { directory in
            let last = directory.split(separator: UInt8(ascii: "/")).last ?? []
            var name = String(decoding: last.map { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x5F
                    ? b : UInt8(ascii: "_")
            }, as: UTF8.self)
            if name.isEmpty { name = "mirror" }
            var unique = name, n = 1
            while taken.contains(unique) {
                n += 1
                unique = "\(name)-\(n)"
            }
            taken.insert(unique)
            return unique
        }
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
