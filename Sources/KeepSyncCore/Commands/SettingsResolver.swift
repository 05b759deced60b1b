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

    /// Loads the configuration file and flags, resolves and checks the paths; throws
    /// `.configuration` naming what is wrong.
    public func settings(_ invocation: Invocation) throws -> Settings {
        var file = Configuration()
        var configPath: [UInt8]?
        if let explicit = invocation.configFile {
            configPath = explicit
        } else if paths.exists(defaultConfigFile) {
            configPath = defaultConfigFile
        }
        if let configPath {
            let bytes: [UInt8]
            do { bytes = try paths.read(configPath) } catch let e as KeepSyncError {
                throw KeepSyncError(.configuration, "--config: \(e.message)")
            }
            file = try ConfigFileParser.parse(bytes, fileName: Self.display(configPath), home: home)
        }
        let config = CommandLineParser.merge(file: file, invocation: invocation, home: home)
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
        let excludes = try ExcludeMatcher(patterns: config.excludes)
        var settings = Settings(configuration: config, invocation: invocation, source: source, mirror: mirror, state: state,
                                excludes: excludes, configFile: configPath)
        settings.remote = remote
        return settings
    }

    /// True when `inner` is `outer` or below it (absolute paths).
    public static func isWithin(_ inner: [UInt8], _ outer: [UInt8]) -> Bool {
        if outer == [0x2F] { return true }
        return inner == outer || (inner.starts(with: outer) && inner.count > outer.count && inner[outer.count] == 0x2F)
    }

    static func display(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }
}
