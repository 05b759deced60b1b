/// Turns an invocation into `Settings`: the configuration file (given, or the XDG
/// default when it exists) merged with the flags, the paths resolved and checked apart,
/// the state directory named.
public struct SettingsResolver: Sendable {
    let environment: [String: String]
    let home: [UInt8]
    let paths: any PathResolving

    /// A resolver for a process with `environment` and home directory `home`.
    public init(environment: [String: String], home: [UInt8], paths: any PathResolving) {
        self.environment = environment
        self.home = home
        self.paths = paths
    }

    /// `$variable` when it is absolute, else `home/fallback` (the XDG rule).
    public func xdg(_ variable: String, fallback: String) -> [UInt8] {
        if let v = environment[variable], v.first == "/" { return Array(v.utf8) }
        return home + Array("/\(fallback)".utf8)
    }

    /// Where the configuration file is looked for when none is given.
    public var defaultConfigFile: [UInt8] {
        xdg("XDG_CONFIG_HOME", fallback: ".config") + Array("/keepsync/keepsync.conf".utf8)
    }

    /// The directory holding every pair's state directory.
    public var stateHome: [UInt8] { xdg("XDG_STATE_HOME", fallback: ".local/state") + Array("/keepsync".utf8) }

    /// The one mirror's settings (see `eachMirror`); with several, throws `.configuration`
    /// asking for one (`--mirror NAME`), naming them.
    public func settings(_ invocation: Invocation) throws -> Settings {
        let all = try eachMirror(invocation)
        guard all.count == 1 else {
            throw KeepSyncError(.configuration, "\(invocation.command.word) takes one mirror, not \(all.count) "
                                + "(\(all.map(\.mirrorLabel).joined(separator: ", "))): name one with --mirror NAME")
        }
        return all[0]
    }

    /// The configuration file (given, or the XDG default when it exists) parsed, and its
    /// path; the defaults and nil when there is none.
    func configurationFile(_ invocation: Invocation) throws -> (Configuration, [UInt8]?) {
        var configPath: [UInt8]?
        if let explicit = invocation.configFile {
            configPath = explicit
        } else if paths.exists(defaultConfigFile) {
            configPath = defaultConfigFile
        }
        guard let configPath else { return (Configuration(), nil) }
        let bytes: [UInt8]
        do { bytes = try paths.read(configPath) } catch let e as KeepSyncError {
            throw KeepSyncError(.configuration, "--config: \(e.message)")
        }
        return (try ConfigFileParser.parse(bytes, fileName: Self.display(configPath), home: home), configPath)
    }

    /// One mirror's settings from `config` (the file's keys for it with the flags over
    /// them): the paths resolved and checked apart, the state directory named.
    func resolve(_ config: Configuration, invocation: Invocation, configPath: [UInt8]?) throws -> Settings {
        func orKey(_ key: String) -> String { configPath.map { " (or '\(key) =' in \(Self.display($0)))" } ?? "" }
        guard let rawSource = config.source else {
            throw KeepSyncError(.configuration, "missing --source\(orKey("source"))")
        }
        guard let rawMirror = config.mirror else {
            throw KeepSyncError(.configuration, "missing --mirror\(orKey("mirror"))")
        }
        let source = paths.resolve(rawSource)
        // On another machine: nothing to resolve or compare here; named as rsync writes it.
        let remote = try RemoteTarget.parse(rawMirror)
        let mirror = remote?.normalized ?? paths.resolve(rawMirror)
        let s = Self.display(source), m = Self.display(mirror)
        if remote == nil {
            if source == mirror { throw KeepSyncError(.configuration, "source and mirror are the same directory: \(s)") }
            if Self.isWithin(mirror, source) { throw KeepSyncError(.configuration, "mirror \(m) is inside source \(s)") }
            if Self.isWithin(source, mirror) { throw KeepSyncError(.configuration, "source \(s) is inside mirror \(m)") }
        }
        let state: [UInt8]
        if let explicit = config.state {
            state = paths.resolve(explicit)
        } else {
            state = stateHome + [0x2F] + Array(StateDirectoryName.name(source: source, mirror: mirror).utf8)
        }
        if Self.isWithin(state, source) || (remote == nil && Self.isWithin(state, mirror)) {
            throw KeepSyncError(.configuration, "--state \(Self.display(state)) must not be inside the source or the mirror")
        }
        let versions = try versions(config, source: source, mirror: mirror, state: state, remote: remote)
        // The versions directory in the mirror is never watched, compared, copied over or
        // deleted, with versions on or off: an exclude of its own, on both sides. Off, a
        // `versions_dir` given is that directory; with one elsewhere, the default name
        // stays reserved (versions kept there before stay until removed by hand).
        let place = versions.map { VersionsPlace(directory: $0.directory, elsewhere: $0.elsewhere) }
            ?? (remote == nil ? try? versionsDirectory(config, source: source, mirror: mirror, state: state) : nil)
        let reserved = place.flatMap { $0.elsewhere == nil ? $0.directory : nil } ?? VersionSettings.defaultDirectory
        let excludes = try ExcludeMatcher(patterns: config.excludes + [ExcludeMatcher.literal(reserved)])
        var settings = Settings(configuration: config, invocation: invocation, source: source, mirror: mirror, state: state,
                                excludes: excludes, configFile: configPath)
        settings.remote = remote
        settings.versions = versions
        settings.versionsDirectory = reserved
        settings.versionsElsewhere = place?.elsewhere
        return settings
    }

    /// A versions directory as resolved: below the mirror root, or elsewhere (absolute;
    /// `directory` is then `.root`).
    struct VersionsPlace {
        var directory: RelativePath
        var elsewhere: [UInt8]?
    }

    /// The versions to keep: nil when `keep_versions` is 0; refused for a `versions_dir`
    /// given with a remote mirror (it keeps them in the default directory) and for one
    /// that `versionsDirectory` refuses. The directory is checked only
    /// when versions are on.
    func versions(_ config: Configuration, source: [UInt8], mirror: [UInt8], state: [UInt8],
                  remote: RemoteTarget?) throws -> VersionSettings? {
        guard config.keepVersionsSeconds > 0 else { return nil }
        if remote != nil {
            if let dir = config.versionsDirectory {
                throw KeepSyncError(.configuration, "--versions-dir \(Self.display(dir)): a remote mirror keeps its versions in "
                                    + "\(VersionSettings.defaultDirectoryName) inside the mirror directory")
            }
            return VersionSettings(keepSeconds: Int64(config.keepVersionsSeconds))
        }
        let place = try versionsDirectory(config, source: source, mirror: mirror, state: state)
        let keep = Int64(config.keepVersionsSeconds)
        return place.elsewhere.map { VersionSettings(keepSeconds: keep, elsewhere: $0) }
            ?? VersionSettings(keepSeconds: keep, directory: place.directory)
    }

    /// `versions_dir` (the default when not given) for a local mirror: directly inside it
    /// (relative to its root), or elsewhere on its file system (absolute). Refused: the
    /// mirror itself, deeper inside it, a directory holding it, one in or holding the
    /// source or the state directory, one on another file system than the mirror (device
    /// numbers of each, or of its nearest existing ancestor: a directory not there yet is
    /// made at start, 0700).
    func versionsDirectory(_ config: Configuration, source: [UInt8], mirror: [UInt8], state: [UInt8]) throws -> VersionsPlace {
        guard let raw = config.versionsDirectory else { return VersionsPlace(directory: VersionSettings.defaultDirectory) }
        let resolved = paths.resolve(raw)
        let d = Self.display(resolved)
        func refuse(_ why: String) -> KeepSyncError { KeepSyncError(.configuration, "--versions-dir \(d): \(why)") }
        // Resolved paths hold no `.` or `..`; a resolver that left some is not trusted.
        let components = resolved.split(separator: 0x2F).filter { !$0.elementsEqual([0x2E]) }
        if components.contains(where: { $0.elementsEqual([0x2E, 0x2E]) }) { throw refuse("'..' is not taken; name the directory itself") }
        let directory = components.isEmpty ? [0x2F] : components.reduce(into: [UInt8]()) { $0 += [0x2F] + $1 }
        let m = Self.display(mirror)
        if directory == mirror {
            throw refuse("must be a directory inside the mirror, not the mirror itself")
        }
        if Self.isWithin(directory, source) || Self.isWithin(source, directory) {
            throw refuse("must not be inside the source or hold it (\(Self.display(source)))")
        }
        if Self.isWithin(directory, state) || Self.isWithin(state, directory) {
            throw refuse("must not be inside the state directory or hold it (\(Self.display(state)))")
        }
        if Self.isWithin(directory, mirror) {
            // Deeper, a source directory removed above it would take the versions with it.
            if components.count > mirror.split(separator: 0x2F).count + 1 {
                throw refuse("must be directly inside the mirror (\(m)/NAME) or outside it")
            }
            return VersionsPlace(directory: RelativePath(bytes: Array(components.last!)))
        }
        if Self.isWithin(mirror, directory) { throw refuse("must not hold the mirror (\(m))") }
        if let here = paths.fileSystem(directory), let there = paths.fileSystem(mirror), here != there {
            throw refuse("is on another file system than the mirror (\(m)); versions are hard links and renames, "
                         + "which stay on one file system")
        }
        return VersionsPlace(directory: .root, elsewhere: directory)
    }

    /// True when `inner` is `outer` or below it (absolute paths).
    public static func isWithin(_ inner: [UInt8], _ outer: [UInt8]) -> Bool {
        if outer == [0x2F] { return true }
        return inner == outer || (inner.starts(with: outer) && inner.count > outer.count && inner[outer.count] == 0x2F)
    }

    static func display(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }
}
