import Foundation
import Glibc
import Testing
import KeepSyncTestSupport
import KeepSyncCore

/// `status` after a sync, and keepsync's own temporary files.
@Suite(.serialized, .offThePool)
struct StatusAndTemporaryFileTests {
    @Test func statusJsonAfterASyncDescribesTheStoppedMirror() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "a", FS.pattern(count: 1000, seed: 1))
        try FS.mkdir(sandbox.source / "d")
        try FS.writeFile(sandbox.source / "d/b", FS.pattern(count: 234, seed: 2))
        try FS.writeFile(sandbox.source / "d/empty", [])
        try FS.symlink(target: bytes("a"), at: sandbox.source / "link")
        try FS.mkfifo(sandbox.source / "fifo")
        try #require(try sandbox.sync().status == 0)

        let result = try sandbox.status("--json")
        #expect(result.status == 0, "\(result)")
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout))
        let json = try #require(object as? [String: Any], "not a JSON object: \(result.stdoutText)")
        for key in ["state", "pid", "source", "mirror", "files", "bytes", "pending", "lastFullSync", "errors"] {
            #expect(json[key] != nil, "missing key \(key) in \(result.stdoutText)")
        }
        #expect(json["state"] as? String == "stopped")
        #expect((json["pid"] as? NSNumber)?.intValue ?? 0 > 0)
        #expect(json["source"] as? String == String(decoding: sandbox.source, as: UTF8.self))
        #expect(json["mirror"] as? String == String(decoding: sandbox.mirror, as: UTF8.self))
        #expect((json["files"] as? NSNumber)?.intValue == 3)
        #expect((json["bytes"] as? NSNumber)?.intValue == 1234)
        #expect((json["pending"] as? NSNumber)?.intValue == 0)
        let last = try #require(json["lastFullSync"] as? String)
        #expect(last.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$"#, options: .regularExpression) != nil, "\(last)")
        #expect((json["errors"] as? [Any])?.isEmpty == true)
    }

    @Test func statusForHumansAfterASyncSaysStopped() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let result = try sandbox.status()
        #expect(result.status == 0, "\(result)")
        #expect(result.stdoutText.contains("stopped"), "\(result)")
        #expect(result.stdoutText.contains(ByteEscaping.escape(sandbox.mirror)), "\(result)")
    }

    @Test func statusWithTheStateDirectoryAloneDescribesItsPair() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let human = try sandbox.keepsync("status", "--state", sandbox.state)
        #expect(human.status == 0, "\(human)")
        #expect(human.stdoutText.contains("keepsync is stopped"), "\(human)")
        #expect(human.stdoutText.contains(ByteEscaping.escape(sandbox.source)) && human.stdoutText.contains(ByteEscaping.escape(sandbox.mirror)),
                "\(human)")
        let json = try sandbox.keepsync("status", "--state", sandbox.state, "--json")
        #expect(json.status == 0, "\(json)")
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any]
        #expect(object?["mirror"] as? String == String(decoding: sandbox.mirror, as: UTF8.self), "\(json)")
    }

    @Test func aBareStatusListsEveryPairUnderTheStateHomeAndExits1WhenThereIsNone() throws {
        let sandbox = try Sandbox()
        let none = try sandbox.keepsync("status")
        #expect(none.status == 1, "\(none)")
        #expect(none.stderrText.hasPrefix("keepsync: error: ") && none.stderrText.contains(".local/state/keepsync"),
                "names where it looked: \(none)")
        #expect(!none.stderrText.contains("missing --source"), "\(none)")

        try FS.writeFile(sandbox.source / "a", "a\n")
        let mirrors = [sandbox.root / "M1", sandbox.root / "M2"]
        for mirror in mirrors {
            let r = try sandbox.keepsync("sync", "--source", sandbox.source, "--mirror", mirror)
            try #require(r.status == 0, "\(r)")
        }
        let human = try sandbox.keepsync("status")
        #expect(human.status == 0, "\(human)")
        #expect(human.stdoutLines.filter { $0.hasPrefix("keepsync is stopped") }.count == 2, "one block per pair: \(human)")
        for mirror in mirrors { #expect(human.stdoutText.contains(ByteEscaping.escape(mirror)), "\(human)") }
        let json = try sandbox.keepsync("status", "--json")
        #expect(json.status == 0, "\(json)")
        let list = try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [[String: Any]]
        #expect(Set((list ?? []).compactMap { $0["mirror"] as? String }) == Set(mirrors.map { String(decoding: $0, as: UTF8.self) }),
                "a JSON array of both: \(json)")
    }

    static let leftover = ".keepsync-tmp-0123456789abcdef"

    @Test(arguments: [false, true])
    func aLeftoverTemporaryFileInTheMirrorIsRemovedByTheNextSync(noDelete: Bool) throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.writeFile(sandbox.mirror / Self.leftover, "half a copy")
        try FS.writeFile(sandbox.mirror / "dir/sub" / Self.leftover, "half a copy")
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)
        try FS.copyMtime(from: sandbox.source / "dir/sub", to: sandbox.mirror / "dir/sub")

        let result = noDelete ? try sandbox.sync("--no-delete") : try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        #expect(!FS.exists(sandbox.mirror / Self.leftover))
        #expect(!FS.exists(sandbox.mirror / "dir/sub" / Self.leftover))
        try sandbox.expectMirrorEqualsSource()
    }

    @Test func aSourceFileNamedLikeATemporaryFileIsMirroredLikeAnyOther() throws {
        let sandbox = try Sandbox()
        let name = ".keepsync-tmp-fedcba9876543210"
        try FS.writeFile(sandbox.source / name, "I am real data\n")
        try FS.mkdir(sandbox.source / "d")
        try FS.writeFile(sandbox.source / "d" / name, "me too\n")
        try FS.setPastTimes(under: sandbox.source)
        for round in 1...2 {
            let result = try sandbox.sync()
            #expect(result.status == 0, "round \(round): \(result)")
            try sandbox.expectMirrorEqualsSource()
        }
        let check = try sandbox.check()
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(check)")
    }

    @Test func aTemporaryNameUnderAnExcludedPathIsLeftAlone() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        let planted = bytes("build/") + bytes(Self.leftover)
        sandbox.plantedTemporaryFiles = [planted]
        try FS.mkdir(sandbox.mirror / "build")
        try FS.writeFile(sandbox.mirror / planted, "not ours to touch")
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)

        let result = try sandbox.sync("--exclude", "build/")
        #expect(result.status == 0, "\(result)")
        #expect(try FS.readFile(sandbox.mirror / planted) == bytes("not ours to touch"),
                "nothing under an excluded path is ever touched")
    }

    @Test func statusCountsTheRegularFilesTheMirrorHoldsEvenUnderNoDelete() throws {
        let sandbox = try Sandbox()
        try FS.writeFile(sandbox.source / "a", "a\n")
        try FS.writeFile(sandbox.source / "b", "bb\n")
        try #require(try sandbox.sync().status == 0)
        try FS.unlink(sandbox.source / "b")
        let kept = try sandbox.sync("--no-delete")
        try #require(kept.status == 0, "\(kept)")
        try #require(FS.exists(sandbox.mirror / "b"))

        let result = try sandbox.status("--json")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any], "\(result)")
        #expect((json["files"] as? NSNumber)?.intValue == 2, "the mirror holds a and b: \(result.stdoutText)")
        #expect((json["bytes"] as? NSNumber)?.intValue == 5, "\(result.stdoutText)")
    }

    @Test func statusListsAFailedPathEscapedAsInCheck() throws {
        let sandbox = try Sandbox()
        let name = bytes("caf") + [0xE9]
        try FS.writeFile(sandbox.source / name, "file\n")
        try FS.mkdirs(sandbox.mirror / name)
        try FS.writeFile(sandbox.mirror / name / "inner", "keep")

        let result = try sandbox.sync("--no-delete")
        #expect(result.status == 1, "\(result)")
        #expect(result.errorLines.contains { $0.contains("caf\\xe9") }, "\(result)")
        let status = try sandbox.status("--json")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout)) as? [String: Any], "\(status)")
        let errors = try #require(json["errors"] as? [[String: Any]], "\(status)")
        #expect(errors.map { $0["path"] as? String } == ["caf\\xe9"], "\(status.stdoutText)")
        #expect(errors.first?["message"] as? String != nil)

        // Once the path syncs, its entry goes.
        try ScratchDirectory.removeTree(sandbox.mirror / name)
        #expect(try sandbox.sync().status == 0)
        let cleared = try sandbox.status("--json")
        let after = try #require(try JSONSerialization.jsonObject(with: Data(cleared.stdout)) as? [String: Any])
        #expect((after["errors"] as? [Any])?.isEmpty == true, "\(cleared.stdoutText)")
    }
}
