import Glibc
import KeepSyncTestSupport
import Testing
import KeepSyncCore

/// Exit codes 0, 1 and 2, and where the messages go.
@Suite(.serialized, .offThePool)
struct ExitCodeTests {
    @Test func helpGoesToStdoutAndExitsZero() throws {
        let sandbox = try Sandbox()
        for flag in ["--help", "-h"] {
            let result = try sandbox.keepsync(flag)
            #expect(result.status == 0, "\(flag): \(result)")
            #expect(result.stdoutText.contains("USAGE"), "\(flag): \(result)")
            #expect(result.stdoutText.contains("sync"), "\(flag): \(result)")
            #expect(result.stderr.isEmpty, "\(flag): \(result)")
        }
    }

    @Test func versionGoesToStdoutAndExitsZero() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.keepsync("--version")
        #expect(result.status == 0, "\(result)")
        #expect(result.stdoutText.hasPrefix("keepsync "), "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
    }

    @Test func noArgumentsPrintsUsageOnStderrAndExitsTwo() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.keepsync([])
        #expect(result.status == 2, "\(result)")
        #expect(result.stderrText.contains("USAGE"), "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
    }

    @Test func aSyncThatOnlySkipsAFifoExitsZero() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "plain", "plain\n")
        try FS.mkfifo(sandbox.source / "fifo")
        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        #expect(result.stderrLines.filter { $0.contains("fifo") }.count == 1, "\(result)")
        #expect(!FS.exists(sandbox.mirror / "fifo"))
        #expect(try FS.readFile(sandbox.mirror / "plain") == bytes("plain\n"))
    }

    @Test func anUnknownFlagIsNamedAndExitsTwo() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.keepsync(["sync"] + sandbox.paths + ["--frobnicate"])
        #expect(result.status == 2, "\(result)")
        #expect(result.errorLines.contains { $0.contains("--frobnicate") }, "\(result)")
        #expect(!FS.exists(sandbox.mirror), "a usage error must not create the mirror")
    }

    @Test func aNonNumericSettleIsNamedAndExitsTwo() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.keepsync(["sync"] + sandbox.paths + ["--settle", "abc"])
        #expect(result.status == 2, "\(result)")
        #expect(result.errorLines.contains { $0.contains("--settle") }, "\(result)")
    }

    @Test(arguments: [["--settle", "-5"], ["--max-delay", "soon"], ["--max-delete", "101"], ["--log-level", "loud"],
                      ["--settle"]])
    func aBadOptionValueIsNamedAndExitsTwo(_ option: [String]) throws {
        let sandbox = try Sandbox()
        let result = try sandbox.keepsync(["sync"] + sandbox.paths + option)
        #expect(result.status == 2, "\(option): \(result)")
        #expect(result.errorLines.contains { $0.contains(option[0]) }, "\(option): \(result)")
        #expect(!FS.exists(sandbox.mirror))
    }

    @Test func anUnknownCommandExitsTwo() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.keepsync(["frobnicate"] + sandbox.paths)
        #expect(result.status == 2, "\(result)")
        #expect(result.errorLines.contains { $0.contains("frobnicate") }, "\(result)")
    }

    @Test func aMissingMirrorIsNamedAndExitsTwo() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.keepsync("sync", "--source", sandbox.source, "--state", sandbox.state)
        #expect(result.status == 2, "\(result)")
        #expect(result.errorLines.contains { $0.contains("--mirror") }, "\(result)")
    }

    enum Overlap: String, CaseIterable, Sendable {
        case sameDirectory, sameDirectoryThroughALink, sameDirectoryThroughDotDot, mirrorInsideSource, sourceInsideMirror
    }

    @Test(arguments: Overlap.allCases)
    func overlappingSourceAndMirrorAreRefusedWithExitTwo(_ overlap: Overlap) throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        var source = sandbox.source
        let mirror: [UInt8]
        switch overlap {
        case .sameDirectory:
            mirror = sandbox.source
        case .sameDirectoryThroughALink:
            try FS.symlink(target: sandbox.source, at: sandbox.root / "alias")
            mirror = sandbox.root / "alias"
        case .sameDirectoryThroughDotDot:
            mirror = sandbox.source / "../S"
        case .mirrorInsideSource:
            mirror = sandbox.source / "inner/mirror"
        case .sourceInsideMirror:
            try FS.mkdirs(sandbox.mirror / "src")
            try FS.writeFile(sandbox.mirror / "src/file", "data\n")
            source = sandbox.mirror / "src"
            mirror = sandbox.mirror
        }
        let before = try TreeSnapshot.take(sandbox.root)
        let result = try sandbox.keepsync("sync", "--source", source, "--mirror", mirror, "--state", sandbox.state)
        #expect(result.status == 2, "\(overlap): \(result)")
        #expect(!result.errorLines.isEmpty, "\(overlap): \(result)")
        let after = try TreeSnapshot.take(sandbox.root).removing([bytes("T")])
        #expect(before.differences(to: after).isEmpty, "\(overlap): the refused sync changed files")
    }

    @Test func anUnknownConfigKeyNamesTheFileAndLineAndExitsTwo() throws {
        let sandbox = try Sandbox()
        let config = sandbox.root / "my.conf"
        let text = "# keepsync\nsource = \(String(decoding: sandbox.source, as: UTF8.self))\n"
            + "mirror = \(String(decoding: sandbox.mirror, as: UTF8.self))\n\nbogus_key = 1\n"
        try FS.writeFile(config, text)
        let result = try sandbox.keepsync("sync", "--config", config, "--state", sandbox.state)
        #expect(result.status == 2, "\(result)")
        let named = result.errorLines.filter { $0.contains(ByteEscaping.escape(config)) }
        #expect(named.contains { $0.contains(":5") || $0.contains("line 5") }, "expected \(ByteEscaping.escape(config)) line 5: \(result)")
        #expect(!FS.exists(sandbox.mirror))
    }

    @Test func theDefaultConfigFileUnderXdgConfigHomeIsReadAndCheckedToo() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        let directory = sandbox.home / ".config/keepsync"
        try FS.mkdirs(directory)
        let source = String(decoding: sandbox.source, as: UTF8.self)
        let mirror = String(decoding: sandbox.mirror, as: UTF8.self)
        try FS.writeFile(directory / "keepsync.conf", "source = \(source)\nmirror = \(mirror)\n")
        let good = try sandbox.keepsync("sync", "--state", sandbox.state)
        #expect(good.status == 0, "\(good)")
        #expect(try FS.readFile(sandbox.mirror / "file") == bytes("data\n"))

        try FS.writeFile(directory / "keepsync.conf", "source = \(source)\nmirror = \(mirror)\nsettle_ms = soon\n")
        let bad = try sandbox.keepsync("sync", "--state", sandbox.state)
        #expect(bad.status == 2, "\(bad)")
        #expect(bad.errorLines.contains { $0.contains("keepsync.conf") && ($0.contains(":3") || $0.contains("line 3")) },
                "\(bad)")
    }

    @Test func aSourceMissingOnAFirstRunExitsTwo() throws {
        let sandbox = try Sandbox()
        let missing = sandbox.root / "nope"
        let result = try sandbox.keepsync("sync", "--source", missing, "--mirror", sandbox.mirror, "--state", sandbox.state)
        #expect(result.status == 2, "\(result)")
        #expect(result.errorLines.contains { $0.contains(ByteEscaping.escape(missing)) }, "\(result)")
    }

    @Test func statusWithNoStatusFileExitsOne() throws {
        let sandbox = try Sandbox()
        let result = try sandbox.status()
        #expect(result.status == 1, "\(result)")
        #expect(!result.errorLines.isEmpty, "\(result)")
        let json = try sandbox.status("--json")
        #expect(json.status == 1, "\(json)")
    }

    @Test func aSyncWithAFailedItemExitsOneAndNamesIt() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "x", "a file\n")
        try FS.writeFile(sandbox.source / "fine", "fine\n")
        try FS.mkdirs(sandbox.mirror / "x")
        try FS.writeFile(sandbox.mirror / "x/inner", "keep me\n")

        let result = try sandbox.sync("--no-delete")
        #expect(result.status == 1, "\(result)")
        #expect(result.errorLines.contains { $0.contains("keepsync: error: x") || $0.contains(" x:") || $0.contains("'x'") },
                "stderr must name x: \(result)")
        #expect(try FS.readFile(sandbox.mirror / "x/inner") == bytes("keep me\n"), "--no-delete must keep x/inner")
        #expect(try FS.readFile(sandbox.mirror / "fine") == bytes("fine\n"), "the other items must still be synced")
        let status = try sandbox.status("--json")
        #expect(status.status == 0, "\(status)")
        #expect(status.stdoutText.contains("\"path\": \"x\"") || status.stdoutText.contains("\"path\":\"x\""),
                "status must list the failed path: \(status)")
    }

    @Test func checkWithDifferencesExitsOneAndWithoutExitsZero() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        let before = try sandbox.check()
        #expect(before.status == 1, "\(before)")
        #expect(before.stdoutText.hasSuffix("differences\n") || before.stdoutText.hasSuffix("difference\n"), "\(before)")
        try #require(try sandbox.sync().status == 0)
        let after = try sandbox.check()
        #expect(after.status == 0 && after.stdoutText == "0 differences\n", "\(after)")
    }
}
