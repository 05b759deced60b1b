import Glibc
import KeepSyncTestSupport
import Testing
import KeepSyncCore

/// How paths, the configuration file and the default state directory are found.
@Suite(.serialized, .offThePool)
struct PathsAndConfigurationTests {
    @Test func rootPathsThatAreNotUtf8Work() throws {
        let sandbox = try Sandbox()
        let source = sandbox.root / (bytes("src-") + [0xFF, 0xE9])
        let mirror = sandbox.root / (bytes("mir-") + [0xE9, 0x0A])
        try FS.mkdir(source)
        try FS.writeFile(source / "file", "data\n")
        let result = try sandbox.keepsync("sync", "--source", source, "--mirror", mirror, "--state", sandbox.state)
        #expect(result.status == 0, "\(result)")
        #expect(try FS.readFile(mirror / "file") == bytes("data\n"))
        let check = try sandbox.keepsync("check", "--source", source, "--mirror", mirror, "--state", sandbox.state)
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(check)")
        #expect(FS.exists(sandbox.root / (bytes("src-") + [0xFF, 0xE9])), "names must not be mangled")
    }

    @Test func aMissingMirrorAndStateAreCreatedWithParents() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        let mirror = sandbox.root / "deep/er/mirror"
        let state = sandbox.root / "st/ate"
        let result = try sandbox.keepsync("sync", "--source", sandbox.source, "--mirror", mirror, "--state", state)
        #expect(result.status == 0, "\(result)")
        #expect(try FS.readFile(mirror / "file") == bytes("data\n"))
        #expect(FS.lstat(state)?.permissions == 0o700, "the state directory is created 0700")
    }

    @Test func theDefaultStateDirectoryIsUnderXdgStateHomeAndStatusFindsIt() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        let result = try sandbox.keepsync("sync", "--source", sandbox.source, "--mirror", sandbox.mirror)
        #expect(result.status == 0, "\(result)")
        let base = sandbox.home / ".local/state/keepsync"
        let entries = try FS.list(base)
        #expect(entries.count == 1, "one state directory under XDG_STATE_HOME/keepsync: \(entries.map { ByteEscaping.escape($0) })")
        if let name = entries.first {
            #expect(name.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) || (0x41...0x46).contains($0) },
                    "named by a hex hash: \(ByteEscaping.escape(name))")
            #expect(FS.lstat(base / name)?.permissions == 0o700)
            #expect(FS.exists(base / name / "status.json"))
        }
        let status = try sandbox.keepsync("status", "--json", "--source", sandbox.source, "--mirror", sandbox.mirror)
        #expect(status.status == 0, "\(status)")
        #expect(status.stdoutText.contains("\"stopped\""), "\(status)")
    }

    @Test func aConfigFileSuppliesPathsExcludesAndDeleteAndFlagsOverrideIt() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.writeFile(sandbox.source / "noise.log", "log\n")
        try FS.unlink(sandbox.source / "top.txt")
        try FS.mkdirs(sandbox.home / "relative")
        let other = sandbox.home / "relative/other-mirror"
        let config = sandbox.root / "k.conf"
        try FS.writeFile(config, """
            # paths with ~ are under HOME
            source = \(String(decoding: sandbox.source, as: UTF8.self))
            mirror   =   ~/relative/other-mirror
            state = \(String(decoding: sandbox.state, as: UTF8.self))
            exclude = *.log
            delete = false

            """)
        // The flag wins over `mirror =`; `exclude` and `delete = false` still apply.
        let result = try sandbox.keepsync("sync", "--config", config, "--mirror", sandbox.mirror)
        #expect(result.status == 0, "\(result)")
        #expect(!FS.exists(other), "--mirror must override the configuration file")
        #expect(FS.exists(sandbox.mirror / "top.txt"), "delete = false must keep top.txt")
        #expect(!FS.exists(sandbox.mirror / "noise.log"), "exclude = *.log must apply")

        // Without the flag, `~/relative/other-mirror` is used.
        let fromConfig = try sandbox.keepsync("sync", "--config", config, "--state", sandbox.root / "T2")
        #expect(fromConfig.status == 0, "\(fromConfig)")
        #expect(try FS.readFile(other / "dir/file.txt") == bytes("hello world\n"))
        #expect(!FS.exists(other / "noise.log"))
    }
}
