import Testing
@testable import KeepSyncCore

/// Paths as given (already absolute), files from a dictionary, file systems by mount
/// point (the longest that holds a path; device 1 for the rest).
struct FakePaths: PathResolving {
    var files: [String: String] = [:]
    var mounts: [String: UInt64] = [:]
    func resolve(_ path: [UInt8]) -> [UInt8] { path }
    func fileSystem(_ path: [UInt8]) -> UInt64? {
        mounts.filter { SettingsResolver.isWithin(path, Array($0.key.utf8)) }.max { $0.key.count < $1.key.count }?.value ?? 1
    }
    func exists(_ path: [UInt8]) -> Bool { files[String(decoding: path, as: UTF8.self)] != nil }
    func read(_ path: [UInt8]) throws -> [UInt8] {
        guard let text = files[String(decoding: path, as: UTF8.self)] else {
            throw KeepSyncError(.notFound, "no such file")
        }
        return Array(text.utf8)
    }
}

@Suite("SettingsResolver")
struct SettingsResolverTests {
    func resolver(_ files: [String: String] = [:], environment: [String: String] = [:]) -> SettingsResolver {
        SettingsResolver(environment: environment, home: Array("/home/u".utf8), paths: FakePaths(files: files))
    }

    func invocation(source: String? = "/data", mirror: String? = "/backup", state: String? = nil) -> Invocation {
        Invocation(command: .sync, source: source.map { Array($0.utf8) }, mirror: mirror.map { Array($0.utf8) },
                   state: state.map { Array($0.utf8) })
    }

    func message(_ body: () throws -> Settings) -> String? {
        do { _ = try body(); return nil } catch { return (error as? KeepSyncError).map { "\($0.code): \($0.message)" } }
    }

    @Test func theStateDirectoryDefaultsUnderTheXDGStateHome() throws {
        let s = try resolver(environment: ["XDG_STATE_HOME": "/xs"]).settings(invocation())
        let name = StateDirectoryName.name(source: Array("/data".utf8), mirror: Array("/backup".utf8))
        #expect(s.state == Array("/xs/keepsync/\(name)".utf8))
        #expect(s.configFile == nil)
        let relative = try resolver(environment: ["XDG_STATE_HOME": "relative"]).settings(invocation())
        #expect(relative.stateName.hasPrefix("/home/u/.local/state/keepsync/"))
    }

    @Test func theDefaultConfigurationFileIsReadWhenItExists() throws {
        let s = try resolver(["/home/u/.config/keepsync/keepsync.conf": "source = /data\nmirror = /backup\n"])
            .settings(invocation(source: nil, mirror: nil))
        #expect(s.sourceName == "/data" && s.mirrorName == "/backup")
        #expect(s.configFile == Array("/home/u/.config/keepsync/keepsync.conf".utf8))
    }

    @Test func badPairsAreConfigurationErrors() {
        #expect(message { try resolver().settings(invocation(source: nil)) } == "configuration: missing --source")
        #expect(message { try resolver().settings(invocation(mirror: "/data")) }
                == "configuration: source and mirror are the same directory: /data")
        #expect(message { try resolver().settings(invocation(mirror: "/data/m")) }
                == "configuration: mirror /data/m is inside source /data")
        #expect(message { try resolver().settings(invocation(source: "/backup/s")) }
                == "configuration: source /backup/s is inside mirror /backup")
        #expect(message { try resolver().settings(invocation(state: "/data/.state")) }
                == "configuration: --state /data/.state must not be inside the source or the mirror")
        #expect(message { try resolver().settings(Invocation(command: .sync, configFile: Array("/nope".utf8))) }
                == "configuration: --config: no such file")
    }

    @Test func isWithinComparesWholeComponents() {
        #expect(SettingsResolver.isWithin(Array("/a/b".utf8), Array("/a".utf8)))
        #expect(!SettingsResolver.isWithin(Array("/ab".utf8), Array("/a".utf8)))
        #expect(SettingsResolver.isWithin(Array("/a".utf8), Array("/".utf8)))
    }

    @Test("a remote mirror is named as rsync writes it, not resolved, and names the state directory")
    func aRemoteMirror() throws {
        let s = try resolver(environment: ["XDG_STATE_HOME": "/xs"]).settings(invocation(mirror: "me@box:/srv/m/"))
        #expect(s.remote == RemoteTarget(user: "me", host: "box", directory: Array("/srv/m".utf8)))
        #expect(s.mirrorName == "me@box:/srv/m")
        let name = StateDirectoryName.name(source: Array("/data".utf8), mirror: Array("me@box:/srv/m".utf8))
        #expect(s.state == Array("/xs/keepsync/\(name)".utf8))
        #expect(s.sshCommand == [Array("ssh".utf8)] && s.rsyncPath == Array("rsync".utf8))
        let file = try resolver(["/c": "source = /data\nmirror = box:/m\nssh_command = ssh -p 2222\nrsync_path = /opt/rsync\n"])
            .settings(Invocation(command: .sync, configFile: Array("/c".utf8)))
        #expect(file.sshCommand == ["ssh", "-p", "2222"].map { Array($0.utf8) })
        #expect(file.rsyncPath == Array("/opt/rsync".utf8))
        #expect(message { try resolver().settings(invocation(mirror: "box::module")) }?.hasPrefix("configuration: --mirror box::module") == true)
    }

    // MARK: - Versions (SPEC "Versions")

    func keeping(_ keep: String?, dir: String? = nil, mirror: String = "/backup", state: String? = nil) -> Invocation {
        var inv = invocation(mirror: mirror, state: state)
        if let keep { inv.keepVersionsSeconds = try? ConfigFileParser.duration(Array(keep.utf8)).get() }
        inv.versionsDirectory = dir.map { Array($0.utf8) }
        return inv
    }

    @Test("versions are off by default and with keep_versions 0, whatever versions_dir says")
    func versionsOff() throws {
        #expect(try resolver().settings(invocation()).versions == nil)
        #expect(try resolver().settings(keeping("0")).versions == nil)
        #expect(try resolver().settings(keeping("0", dir: "/elsewhere")).versions == nil)
        #expect(try resolver().settings(keeping("0", mirror: "box:/m")).versions == nil)
    }

    @Test("the versions directory defaults to .keepsync-versions in the mirror")
    func versionsDefaultDirectory() throws {
        let s = try resolver().settings(keeping("30d"))
        #expect(s.versions == VersionSettings(keepSeconds: 2_592_000, directory: RelativePath(".keepsync-versions")))
        #expect(try resolver().settings(keeping("12h")).versions?.keepSeconds == 43_200)
    }

    @Test("--versions-dir directly inside the mirror is kept relative to the mirror root; it is excluded, and with versions off the default is", arguments: [
        ("/backup/.old", ".old"), ("/backup/v/", "v"), ("/backup//./y", "y"),
    ])
    func versionsDirectoryInside(_ dir: String, _ relative: String) throws {
        let settings = try resolver().settings(keeping("1w", dir: dir))
        #expect(settings.versions == VersionSettings(keepSeconds: 604_800, directory: RelativePath(relative)))
        #expect(settings.versionsDirectory == RelativePath(relative))
        #expect(settings.excludes.matches(RelativePath(relative), isDirectory: true))
        #expect(!settings.excludes.matches(RelativePath("docs/\(relative)"), isDirectory: true), "anchored at the root")
        let off = try resolver().settings(keeping("0"))
        #expect(off.versions == nil && off.excludes.matches(RelativePath(".keepsync-versions"), isDirectory: true))
    }

    @Test("--versions-dir deeper in the mirror is refused: a directory removed above it would take the versions along")
    func versionsDirectoryDeeper() {
        #expect(message { try resolver().settings(keeping("1w", dir: "/backup/a/b/versions")) }
                == "configuration: --versions-dir /backup/a/b/versions: must be directly inside the mirror (/backup/NAME) or outside it")
    }

    @Test("config keys keep_versions and versions_dir resolve the same way, and flags win")
    func versionsFromTheFile() throws {
        let files = ["/c": "source = /data\nmirror = /backup\nkeep_versions = 2w\nversions_dir = ~/../../backup/.v\n"]
        let file = Invocation(command: .sync, configFile: Array("/c".utf8))
        // FakePaths keeps `..`, so `~/../../backup/.v` (/home/u/../../backup/.v) is not trusted to be inside.
        #expect(message { try resolver(files).settings(file) }
                == "configuration: --versions-dir /home/u/../../backup/.v: '..' is not taken; name the directory itself")
        let good = ["/c": "source = /data\nmirror = /backup\nkeep_versions = 2w\nversions_dir = /backup/.v\n"]
        #expect(try resolver(good).settings(file).versions == VersionSettings(keepSeconds: 1_209_600, directory: RelativePath(".v")))
        var flags = file
        flags.keepVersionsSeconds = 0
        #expect(try resolver(good).settings(flags).versions == nil)
        flags.keepVersionsSeconds = 60
        flags.versionsDirectory = Array("/backup/w".utf8)
        #expect(try resolver(good).settings(flags).versions == VersionSettings(keepSeconds: 60, directory: RelativePath("w")))
    }

    @Test("--versions-dir elsewhere on the mirror's file system is kept by its absolute path, versions on or off; the default name in the mirror stays reserved")
    func versionsDirectoryElsewhere() throws {
        for dir in ["/srv/versions", "/srv/versions/", "/srv//./versions", "/backupv", "/home/u/v"] {
            let on = try resolver().settings(keeping("30d", dir: dir))
            let path = dir.hasPrefix("/srv") ? "/srv/versions" : dir
            #expect(on.versions == VersionSettings(keepSeconds: 2_592_000, elsewhere: Array(path.utf8)), "\(dir)")
            #expect(on.versions?.directory == .root && on.versionsElsewhere == Array(path.utf8), "\(dir)")
            #expect(on.versionsDirectory == RelativePath(".keepsync-versions")
                    && on.excludes.matches(RelativePath(".keepsync-versions"), isDirectory: true), "\(dir)")
            let off = try resolver().settings(keeping("0", dir: dir))
            #expect(off.versions == nil && off.versionsElsewhere == Array(path.utf8), "\(dir)")
        }
        // Not there yet, below a directory on the mirror's file system: taken (made at start).
        let mounts: [String: UInt64] = ["/media/usb": 7]
        let usb = SettingsResolver(environment: [:], home: Array("/home/u".utf8), paths: FakePaths(mounts: mounts))
        var inv = keeping("30d", dir: "/media/usb/versions/new", mirror: "/media/usb/mirror")
        #expect(try usb.settings(inv).versionsElsewhere == Array("/media/usb/versions/new".utf8))
        inv.versionsDirectory = Array("/srv/versions".utf8)
        #expect(message { try usb.settings(inv) }
                == "configuration: --versions-dir /srv/versions: is on another file system than the mirror (/media/usb/mirror); "
                + "versions are hard links and renames, which stay on one file system")
        // Versions off: nothing refused, nothing read elsewhere.
        inv.keepVersionsSeconds = 0
        let off = try usb.settings(inv)
        #expect(off.versions == nil && off.versionsElsewhere == nil)
    }

    @Test("a versions directory that is the mirror, holds it, is in or holds the source or the state directory, or names '..' is refused")
    func versionsDirectoryRefused() {
        let refused = [
            ("/backup", "must be a directory inside the mirror, not the mirror itself"),
            ("/backup/", "must be a directory inside the mirror, not the mirror itself"),
            ("/", "must not be inside the source or hold it (/data)"),
            ("/data/v", "must not be inside the source or hold it (/data)"),
            ("/backup/../etc", "'..' is not taken; name the directory itself"),
        ]
        for (dir, why) in refused {
            #expect(message { try resolver().settings(keeping("30d", dir: dir)) } == "configuration: --versions-dir \(dir): \(why)")
        }
        #expect(message { try resolver().settings(keeping("30d", dir: "/srv", mirror: "/srv/m")) }
                == "configuration: --versions-dir /srv: must not hold the mirror (/srv/m)")
        #expect(message { try resolver().settings(keeping("30d", dir: "/st/v", state: "/st")) }
                == "configuration: --versions-dir /st/v: must not be inside the state directory or hold it (/st)")
        #expect(message { try resolver().settings(keeping("30d", dir: "/st", state: "/st/state")) }
                == "configuration: --versions-dir /st: must not be inside the state directory or hold it (/st/state)")
        // A state directory holding the mirror: versions may not go into it through the mirror.
        #expect(message { try resolver().settings(keeping("30d", dir: "/st/m/v", mirror: "/st/m", state: "/st")) }
                == "configuration: --versions-dir /st/m/v: must not be inside the state directory or hold it (/st)")
    }

    @Test("a remote mirror keeps versions in its default directory; --versions-dir is refused for it")
    func versionsRemote() throws {
        let settings = try resolver().settings(keeping("30d", mirror: "box:/srv/m"))
        #expect(settings.versions == VersionSettings(keepSeconds: 30 * 86_400))
        #expect(settings.versionsDirectory == VersionSettings.defaultDirectory)
        #expect(message { try resolver().settings(keeping("1s", dir: "/srv/m/v", mirror: "me@box:/srv/m")) }
                == "configuration: --versions-dir /srv/m/v: a remote mirror keeps its versions in .keepsync-versions inside the mirror directory")
    }
}
