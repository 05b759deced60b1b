import Testing
@testable import KeepSyncCore

/// Paths as given (already absolute), files from a dictionary.
struct FakePaths: PathResolving {
    var files: [String: String] = [:]
    func resolve(_ path: [UInt8]) -> [UInt8] { path }
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
}
