import Glibc
import Testing
import KeepSyncTestSupport

/// Exit code 3: refusals that protect the mirror.
@Suite(.serialized, .offThePool)
struct SafetyTests {
    @Test func aSyncWhileAnotherProcessHoldsTheStateLockExitsThreeNamingItsPid() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "file", "data\n")
        try FS.mkdir(sandbox.state, mode: 0o700)
        let fd = FS.withCPath(sandbox.state / "lock") { open($0, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) }
        try #require(fd >= 0)
        let pid = "\(getpid())"
        let text = Array("\(pid)\n".utf8)
        try #require(text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == text.count)
        try #require(flock(fd, LOCK_EX) == 0)

        let refused = try sandbox.sync()
        close(fd)
        #expect(refused.status == 3, "\(refused)")
        #expect(refused.errorLines.contains { $0.contains(pid) }, "the message must name pid \(pid): \(refused)")
        #expect(!FS.exists(sandbox.mirror / "file"), "nothing may be copied without the lock")

        let after = try sandbox.sync()
        #expect(after.status == 0, "\(after)")
        try sandbox.expectMirrorEqualsSource()
    }

    @Test func aVanishedSourceRootExitsThreeAndLeavesTheMirrorUntouched() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let before = try sandbox.mirrorSnapshot()
        try ScratchDirectory.removeTree(sandbox.source)

        let result = try sandbox.sync()
        #expect(result.status == 3, "\(result)")
        #expect(!result.errorLines.isEmpty, "\(result)")
        let after = try sandbox.mirrorSnapshot()
        #expect(before.differences(to: after).isEmpty)
        let touched = before.identityChanges(to: after)
        #expect(touched.isEmpty, "the mirror was touched: \(touched)")
        let status = try sandbox.status("--json")
        #expect(status.stdoutText.contains("\"path\": \".\"") || status.stdoutText.contains("\"path\":\".\""),
                "a vanished root is reported with path '.': \(status)")
    }

    @Test func aReplacedSourceRootExitsThreeUntilAccepted() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let before = try sandbox.mirrorSnapshot()
        // A different, empty directory (made before the old one goes, so its inode differs).
        let replacement = sandbox.root / "S2"
        try FS.mkdir(replacement)
        try ScratchDirectory.removeTree(sandbox.source)
        try FS.rename(replacement, sandbox.source)

        let refused = try sandbox.sync()
        #expect(refused.status == 3, "\(refused)")
        #expect(refused.errorLines.contains { $0.contains("--accept-new-source") || $0.contains("different") }, "\(refused)")
        let after = try sandbox.mirrorSnapshot()
        #expect(before.differences(to: after).isEmpty)
        let touched = before.identityChanges(to: after)
        #expect(touched.isEmpty, "the mirror was touched: \(touched)")

        let accepted = try sandbox.sync("--accept-new-source")
        #expect(accepted.status == 0, "\(accepted)")
        try sandbox.expectMirrorEqualsSource()
        let again = try sandbox.sync()
        #expect(again.status == 0, "the accepted source must be the recorded one now: \(again)")
    }

    /// Issue 16: a mirror root that is missing or is another directory while records exist
    /// (a disk not plugged in) gets nothing written; `--accept-new-mirror` adopts a new one.
    @Test func aMissingOrReplacedMirrorRootExitsThreeNamingItUntilAccepted() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        // Another, empty directory in its place (made before the old one goes: another inode).
        let replacement = sandbox.root / "M2"
        try FS.mkdir(replacement)
        try ScratchDirectory.removeTree(sandbox.mirror)
        try FS.rename(replacement, sandbox.mirror)
        let replaced = try sandbox.sync()
        #expect(replaced.status == 3, "\(replaced)")
        #expect(replaced.errorLines.contains { $0.contains("--accept-new-mirror") }, "\(replaced)")
        #expect(try FS.list(sandbox.mirror).isEmpty, "the replaced mirror was written")

        try ScratchDirectory.removeTree(sandbox.mirror)
        let missing = try sandbox.sync()
        #expect(missing.status == 3, "\(missing)")
        let name = String(decoding: sandbox.mirror, as: UTF8.self)
        #expect(missing.errorLines.contains { $0.contains("mirror unavailable") && $0.contains(name) }, "\(missing)")
        #expect(!FS.exists(sandbox.mirror), "the missing mirror was made again")

        let accepted = try sandbox.sync("--accept-new-mirror")
        #expect(accepted.status == 0, "\(accepted)")
        try sandbox.expectMirrorEqualsSource()
        let again = try sandbox.sync()
        #expect(again.status == 0, "the accepted mirror must be the recorded one now: \(again)")
    }

    @Test func anEmptiedSourceRootExitsThreeUntilMassDeleteIsAllowed() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let before = try sandbox.mirrorSnapshot()
        try ScratchDirectory.removeTree(sandbox.source / "dir")
        try FS.unlink(sandbox.source / "top.txt")

        let refused = try sandbox.sync()
        #expect(refused.status == 3, "\(refused)")
        #expect(before.differences(to: try sandbox.mirrorSnapshot()).isEmpty, "the mirror lost entries")

        let allowed = try sandbox.sync("--allow-mass-delete")
        #expect(allowed.status == 0, "\(allowed)")
        try sandbox.expectMirrorEqualsSource()
    }

    static func makeTwentyFiles(_ sandbox: Sandbox) throws {
        for i in 0..<20 { try FS.writeFile(sandbox.source / "f\(i < 10 ? "0" : "")\(i)", "file \(i)\n") }
        try FS.setPastTimes(under: sandbox.source)
        try #require(try sandbox.sync().status == 0)
    }

    @Test func removingFifteenOfTwentyFilesIsHeldButOtherChangesAreApplied() throws {
        let sandbox = try Sandbox()
        try Self.makeTwentyFiles(sandbox)
        let removed = (0..<15).map { "f\($0 < 10 ? "0" : "")\($0)" }
        for name in removed { try FS.unlink(sandbox.source / name) }
        try FS.writeFile(sandbox.source / "fresh.txt", "fresh\n")
        try FS.writeFile(sandbox.source / "f19", "changed 19\n")

        let held = try sandbox.sync()
        #expect(held.status == 3, "\(held)")
        // Scripts and journals see a failure: an error line with its reason, at priority 3.
        let errorLines = held.stderrText.split(separator: "\n").filter { $0.hasPrefix("keepsync: error: ") }
        #expect(errorLines.count == 1 && errorLines[0].contains("held 15 deletions")
                && errorLines[0].contains("--allow-mass-delete"), "\(held)")
        #expect(!held.stderrText.contains("keepsync: warning: "), "the refusal is not a warning: \(held)")
        for i in 0..<20 {
            #expect(FS.exists(sandbox.mirror / "f\(i < 10 ? "0" : "")\(i)"), "f\(i) was deleted despite the brake")
        }
        #expect(try FS.readFile(sandbox.mirror / "fresh.txt") == bytes("fresh\n"), "the new file must be applied")
        #expect(try FS.readFile(sandbox.mirror / "f19") == bytes("changed 19\n"), "the change must be applied")
        let status = try sandbox.status("--json")
        #expect(status.stdoutText.contains("\"heldDeletes\": 15") || status.stdoutText.contains("\"heldDeletes\":15"),
                "\(status)")
        let check = try sandbox.check()
        #expect(check.status == 1, "\(check)")
        #expect(check.stdoutLines.filter { $0.hasPrefix("- ") }.count == 15, "\(check)")
        #expect(check.stdoutText.hasSuffix("\n15 differences\n"), "\(check)")

        let allowed = try sandbox.sync("--allow-mass-delete")
        #expect(allowed.status == 0, "\(allowed)")
        try sandbox.expectMirrorEqualsSource()
    }

    @Test func maxDeleteOfOneHundredTurnsTheBrakeOff() throws {
        let sandbox = try Sandbox()
        try Self.makeTwentyFiles(sandbox)
        for i in 0..<15 { try FS.unlink(sandbox.source / "f\(i < 10 ? "0" : "")\(i)") }
        let result = try sandbox.sync("--max-delete", "100")
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
    }

    @Test func aFirstRunIntoAMirrorWithThirtyUnrelatedFilesIsHeld() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "one", "1\n")
        try FS.writeFile(sandbox.source / "two", "2\n")
        try FS.mkdir(sandbox.mirror)
        for i in 0..<30 { try FS.writeFile(sandbox.mirror / "unrelated-\(i)", "u\(i)") }

        let result = try sandbox.sync()
        #expect(result.status == 3, "\(result)")
        #expect(result.stderrText.contains("keepsync: error: held 30 deletions"), "\(result)")
        for i in 0..<30 {
            #expect(try FS.readFile(sandbox.mirror / "unrelated-\(i)") == bytes("u\(i)"), "unrelated-\(i) was touched")
        }
        #expect(try FS.readFile(sandbox.mirror / "one") == bytes("1\n"))
        #expect(try FS.readFile(sandbox.mirror / "two") == bytes("2\n"))
    }

    @Test func typeChangesCountAsDeletionsForTheBrake() throws {
        let sandbox = try Sandbox()
        for i in 10..<22 { try FS.writeFile(sandbox.source / "f\(i)", "\(i)\n") }
        try #require(try sandbox.sync().status == 0)
        for i in 10..<22 {
            try FS.unlink(sandbox.source / "f\(i)")
            try FS.mkdir(sandbox.source / "f\(i)")
        }
        let held = try sandbox.sync()
        #expect(held.status == 3, "\(held)")
        for i in 10..<22 {
            #expect(try FS.readFile(sandbox.mirror / "f\(i)") == bytes("\(i)\n"), "f\(i) was replaced despite the brake")
        }
        let allowed = try sandbox.sync("--allow-mass-delete")
        #expect(allowed.status == 0, "\(allowed)")
        try sandbox.expectMirrorEqualsSource()
    }
}
