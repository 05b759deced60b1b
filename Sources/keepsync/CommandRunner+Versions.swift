import KeepSyncCore
import KeepSyncLinux

extension CommandRunner {
    // MARK: versions, restore

    /// The mirror's versions directory, read through the mirror's own steps (a remote
    /// mirror's over `host`'s session), or its own when it is elsewhere (nil when that is
    /// not there yet: nothing kept); versions on or off (what was kept stays until removed
    /// by hand).
    func versionStore(_ settings: Settings, command: String, host: LinuxAgentHost) throws -> VersionStore? {
        if let remote = host.remote {
            guard try remote.current() != nil else {
                throw KeepSyncError(.io, "\(command): mirror \(HostPaths.display(settings.mirror)) does not exist on \(remote.session.host)")
            }
            return VersionStore(steps: remote.mirror(settings), directory: settings.versionsDirectory)
        }
        guard HostPaths.stat(settings.mirror)?.kind == .directory else {
            throw KeepSyncError(.io, "\(command): mirror \(HostPaths.display(settings.mirror)) does not exist or is not a directory")
        }
        guard let elsewhere = settings.versionsElsewhere else {
            return VersionStore(steps: try AtomicFileAccessor(rootPath: settings.mirror), directory: settings.versionsDirectory)
        }
        guard HostPaths.stat(elsewhere) != nil else { return nil }
        return VersionStore(steps: try AtomicFileAccessor(rootPath: elsewhere), directory: .root)
    }

    /// PATH below the source root: as given, or absolute inside the source.
    func sourcePath(_ argument: [UInt8], _ settings: Settings) throws -> RelativePath {
        try VersionsCommand.sourcePath(argument, source: settings.source,
                                       absolute: [HostPaths.absolute(argument), HostPaths.resolve(argument)])
    }

    /// `versions [PATH] [--json]`.
    func versions(_ settings: Settings) throws -> ExitCode {
        let host = try LinuxAgentHost(settings: settings)
        defer { host.remote?.session.close() }
        let store = try versionStore(settings, command: "versions", host: host)
        let path = try sourcePath(settings.invocation.path ?? [], settings)
        return try VersionsCommand(store: store, zone: HostTime.zone, elsewhere: settings.versionsElsewhere)
            .list(under: path, json: settings.invocation.json, output: LogSink.writeOut)
    }

    /// `restore PATH [--at TIME] [--to DIR] [--force]`.
    func restore(_ settings: Settings) throws -> ExitCode {
        let invocation = settings.invocation
        let host = try LinuxAgentHost(settings: settings)
        defer { host.remote?.session.close() }
        let store = try versionStore(settings, command: "restore", host: host)
        let path = try sourcePath(invocation.path ?? [], settings)
        guard !path.isRoot else {
            throw KeepSyncError(.configuration, "restore: name a path below the source root, not the root itself")
        }
        let root: [UInt8], target: RelativePath
        if let into = invocation.restoreInto {
            let directory = HostPaths.resolve(ConfigFileParser.expandingHome(into, home: home))
            let shown = ByteEscaping.escape(directory)
            guard HostPaths.stat(directory)?.kind == .directory else {
                throw KeepSyncError(.configuration, "--to \(shown): not a directory")
            }
            if SettingsResolver.isWithin(directory, settings.mirror) {
                throw KeepSyncError(.configuration, "--to \(shown): must not be inside the mirror")
            }
            if let elsewhere = settings.versionsElsewhere, SettingsResolver.isWithin(directory, elsewhere) {
                throw KeepSyncError(.configuration, "--to \(shown): must not be inside the versions directory")
            }
            (root, target) = (directory, RelativePath(bytes: path.name))
        } else {
            guard HostPaths.stat(settings.source)?.kind == .directory else {
                throw KeepSyncError(.configuration, "source \(HostPaths.display(settings.source)) does not exist or is not a directory")
            }
            (root, target) = (settings.source, path)
        }
        // No versions directory yet: nothing to read (no version is found).
        let restore = VersionRestore(mirror: store?.steps ?? AbsentTree(), target: try AtomicFileAccessor(rootPath: root),
                                     directoryMode: 0o777 & ~HostTime.umask())
        let at = invocation.at.map { $0.resolved(now: HostTime.now(), zone: HostTime.zone) }
        let destination = invocation.restoreInto == nil ? nil : ByteEscaping.escape(root + [0x2F] + target.bytes)
        return try VersionsCommand(store: store, zone: HostTime.zone)
            .restore(path, at: at, with: restore, as: target, force: invocation.force, destination: destination,
                     output: LogSink.writeOut)
    }
}
