import Foundation
import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// SPEC "Several mirrors": `--mirror` twice, or `[mirror NAME]` sections, for `sync`,
/// `check`, `status`, `versions` and `service install`, with the built binary.
@Suite(.serialized, .offThePool)
struct SeveralMirrorsTests {
    /// The sandbox's second mirror, `M2`.
    static func second(_ sandbox: Sandbox) -> [UInt8] { sandbox.root / "M2" }

    static func text(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }

    /// Where the mirror differs from the source (nothing, once synced).
    static func differences(_ sandbox: Sandbox, _ mirror: [UInt8]) throws -> [String] {
        try sandbox.sourceSnapshot().differences(to: try TreeSnapshot.take(mirror))
    }

    /// A configuration file with sections `usb` (the sandbox's mirror) and `disk` (`M2`,
    /// with `delete = false`).
    static func sections(_ sandbox: Sandbox) throws -> [UInt8] {
        let config = sandbox.root / "k.conf"
        try FS.writeFile(config, """
            source = \(text(sandbox.source))

            [mirror usb]
            path = \(text(sandbox.mirror))

            [mirror disk]
            path = \(text(second(sandbox)))
            delete = false

            """)
        return config
    }

    @Test func syncWithTwoMirrorFlagsFillsBothAndASecondSyncCopiesNothing() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let other = Self.second(sandbox)
        let arguments: [any CommandArgument] = ["sync", "--source", sandbox.source, "--mirror", sandbox.mirror, "--mirror", other]
        let first = try sandbox.keepsync(arguments)
        #expect(first.status == 0, "\(first)")
        try sandbox.expectMirrorEqualsSource()
        #expect(try Self.differences(sandbox, other).isEmpty)
        // Each pair has its own default state directory.
        #expect(try FS.list(sandbox.home / ".local/state/keepsync").count == 2)

        let before = (try sandbox.mirrorSnapshot(), try TreeSnapshot.take(other))
        let again = try sandbox.keepsync(arguments)
        #expect(again.status == 0, "\(again)")
        for mirror in [sandbox.mirror, other] {
            #expect(again.stderrLines.contains("keepsync: mirror \(Self.text(mirror)): sync done: 0 files copied (0 B)"), "\(again)")
        }
        #expect(before.0.identityChanges(to: try sandbox.mirrorSnapshot()).isEmpty)
        #expect(before.1.identityChanges(to: try TreeSnapshot.take(other)).isEmpty)
    }

    @Test func aConfigurationWithTwoSectionsSyncsBothWithTheirOwnKeysAndKeepsTheRecordsOfEachPair() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let config = try Self.sections(sandbox)
        let first = try sandbox.keepsync("sync", "--config", config)
        #expect(first.status == 0, "\(first)")
        try sandbox.expectMirrorEqualsSource()
        #expect(try Self.differences(sandbox, Self.second(sandbox)).isEmpty)

        // `delete = false` in [mirror disk] alone.
        try FS.unlink(sandbox.source / "top.txt")
        let deleted = try sandbox.keepsync("sync", "--config", config)
        #expect(deleted.status == 0, "\(deleted)")
        #expect(!FS.exists(sandbox.mirror / "top.txt") && FS.exists(Self.second(sandbox) / "top.txt"))

        // The same state directory as a single-mirror run of the pair: nothing to copy.
        let alone = try sandbox.keepsync("sync", "--source", sandbox.source, "--mirror", sandbox.mirror)
        #expect(alone.status == 0 && alone.stderrLines.contains("keepsync: sync done: 0 files copied (0 B)"), "\(alone)")
        // `--mirror NAME` acts on that section alone: one mirror, output as ever.
        let one = try sandbox.keepsync("check", "--config", config, "--mirror", "usb")
        #expect(one.status == 0 && one.stdoutText == "0 differences\n", "\(one)")
    }

    @Test func aSyncWhoseFirstMirrorIsRefusedStillSyncsTheOtherAndExitsThree() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let other = Self.second(sandbox)
        let arguments: [any CommandArgument] = ["sync", "--source", sandbox.source, "--mirror", sandbox.mirror, "--mirror", other]
        try #require(try sandbox.keepsync(arguments).status == 0)
        // The first mirror's root replaced by another, empty directory (another inode).
        let replacement = sandbox.root / "M-new"
        try FS.mkdir(replacement)
        try ScratchDirectory.removeTree(sandbox.mirror)
        try FS.rename(replacement, sandbox.mirror)
        try FS.writeFile(sandbox.source / "new.txt", "new\n")

        let result = try sandbox.keepsync(arguments)
        #expect(result.status == 3, "\(result)")
        let prefix = "keepsync: error: mirror \(Self.text(sandbox.mirror)): "
        #expect(result.errorLines.contains { $0.hasPrefix(prefix) && $0.contains("mirror unavailable") }, "\(result)")
        #expect(try FS.list(sandbox.mirror).isEmpty, "the replaced mirror was written")
        #expect(try FS.readFile(other / "new.txt") == bytes("new\n"), "the other mirror was not synced")
        #expect(try Self.differences(sandbox, other).isEmpty)
    }

    @Test func checkOfTwoMirrorsNamesEachAndExitsOneWhenOneDiffers() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let other = Self.second(sandbox)
        try #require(try sandbox.keepsync("sync", "--source", sandbox.source, "--mirror", sandbox.mirror, "--mirror", other).status == 0)
        try FS.writeFile(other / "dir/extra", "extra\n")
        try FS.copyMtime(from: sandbox.source / "dir", to: other / "dir")

        let result = try sandbox.keepsync("check", "--source", sandbox.source, "--mirror", sandbox.mirror, "--mirror", other)
        #expect(result.status == 1, "\(result)")
        #expect(result.stdoutLines == ["mirror \(Self.text(sandbox.mirror)):", "0 differences",
                                       "mirror \(Self.text(other)):", "- dir/extra", "1 difference"], "\(result)")
        let first = try sandbox.keepsync("check", "--source", sandbox.source, "--mirror", sandbox.mirror)
        #expect(first.status == 0 && first.stdoutText == "0 differences\n", "one mirror: output as before: \(first)")
    }

    @Test func statusShowsOneBlockPerMirrorAndSaysWhichHasNoStatusYet() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let config = try Self.sections(sandbox)
        let none = try sandbox.keepsync("status", "--config", config)
        #expect(none.status == 1, "no mirror has a status file: \(none)")

        try #require(try sandbox.keepsync("sync", "--config", config, "--mirror", "usb").status == 0)
        let human = try sandbox.keepsync("status", "--config", config)
        #expect(human.status == 0, "\(human)")
        let blocks = human.stdoutText.components(separatedBy: "\n\n")
        #expect(blocks.count == 2, "\(human)")
        #expect(blocks.first?.hasPrefix("mirror usb:\nkeepsync is stopped") == true, "\(human)")
        #expect(blocks.last?.hasPrefix("mirror disk:\n  no status file at ") == true, "\(human)")

        try #require(try sandbox.keepsync("sync", "--config", config).status == 0)
        let json = try sandbox.keepsync("status", "--config", config, "--json")
        #expect(json.status == 0, "\(json)")
        let array = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [[String: Any]], "\(json)")
        #expect(array.map { $0["mirror"] as? String } == [Self.text(sandbox.mirror), Self.text(Self.second(sandbox))])
        #expect(array.allSatisfy { $0["state"] as? String == "stopped" }, "\(json)")
    }

    @Test func versionsWithTwoMirrorsAsksForOneAndMirrorNameSelectsIt() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let config = try Self.sections(sandbox)
        try #require(try sandbox.keepsync("sync", "--config", config).status == 0)
        let both = try sandbox.keepsync("versions", "--config", config)
        #expect(both.status == 2, "\(both)")
        #expect(both.errorLines == ["keepsync: error: versions takes one mirror, not 2 (usb, disk): name one with --mirror NAME"],
                "\(both)")
        let one = try sandbox.keepsync("versions", "--config", config, "--mirror", "disk")
        #expect(one.status == 0, "\(one)")
    }

    @Test func serviceInstallWithTwoMirrorsWritesOneSectionEachAndWithOneWritesTheMirrorKey() throws {
        let sandbox = try Sandbox()
        let usb = sandbox.root / "usb/Documents", disk = sandbox.root / "disk/Documents"
        var environment = sandbox.environment
        environment["USER"] = "keepsync-test-user"
        func install(_ arguments: [any CommandArgument]) throws -> ProcessResult {
            try ChildProcess.run(sandbox.binary, arguments: (["service", "install", "--source", sandbox.source] + arguments).map(\.argumentBytes),
                                 environment: environment, timeout: .seconds(30))
        }
        let written = sandbox.home / ".config/keepsync/keepsync.conf"
        let result = try install(["--mirror", usb, "--mirror", disk, "--mirror", "backup@nas:/srv/docs.old", "--no-delete"])
        #expect(result.status == 0, "\(result)")
        let config = String(decoding: try FS.readFile(written), as: UTF8.self)
        #expect(config == """
            # Written by keepsync service install.
            source = \(Self.text(sandbox.source))
            delete = false

            [mirror Documents]
            path = \(Self.text(usb))

            [mirror Documents-2]
            path = \(Self.text(disk))

            [mirror docs_old]
            path = backup@nas:/srv/docs.old

            """)
        // The file it wrote reads back as three mirrors.
        let versions = try sandbox.keepsync("versions", "--config", written)
        #expect(versions.errorLines == ["keepsync: error: versions takes one mirror, not 3 (Documents, Documents-2, docs_old): "
                                        + "name one with --mirror NAME"], "\(versions)")

        let single = try install(["--mirror", usb])
        #expect(single.status == 0, "\(single)")
        #expect(String(decoding: try FS.readFile(written), as: UTF8.self)
                == "# Written by keepsync service install.\nsource = \(Self.text(sandbox.source))\nmirror = \(Self.text(usb))\n")
    }
}
