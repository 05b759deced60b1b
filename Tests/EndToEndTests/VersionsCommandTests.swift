import Foundation
import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// `keepsync versions` and `keepsync restore` as a user runs them (issue 40), over versions
/// made by `sync --keep-versions`, and status.json's `"versions"`.
@Suite("Versions and restore commands, end to end", .serialized, .offThePool)
struct VersionsCommandTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }
    static let keep: [any CommandArgument] = ["--keep-versions", "30d"]

    /// A sync keeping versions, expected to succeed.
    static func sync(_ sandbox: Sandbox, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let result = try sandbox.sync(keep)
        #expect(result.status == 0, "\(result)", sourceLocation: sourceLocation)
    }

    /// Waits until the wall clock is past the second it is in now: the next version gets a
    /// tag of its own.
    static func nextSecond() async {
        let now = time(nil)
        _ = await eventually(timeout: .seconds(5), every: .milliseconds(5)) { time(nil) > now }
    }

    /// `keepsync versions|restore` on the sandbox with `extra`, in the zone `tz`.
    static func run(_ sandbox: Sandbox, _ command: String, _ extra: [any CommandArgument], tz: String? = nil) throws -> ProcessResult {
        var environment = sandbox.environment
        if let tz { environment["TZ"] = tz }
        let result = try ChildProcess.run(sandbox.binary, arguments: ([command] + sandbox.paths + extra).map(\.argumentBytes),
                                          environment: environment)
        #expect(!result.timedOut)
        return result
    }

    /// The versions' tags in the mirror below `relative` of the versions directory, by name.
    static func tags(_ sandbox: Sandbox, _ relative: String = "") -> [String: Int64] {
        let dir = sandbox.mirror / (".keepsync-versions" + (relative.isEmpty ? "" : "/" + relative))
        var out: [String: Int64] = [:]
        for name in (try? FS.list(dir)) ?? [] {
            let isDirectory = FS.lstat(dir / name)?.kind == .directory
            if let parsed = VersionName(parsing: name, isDirectory: isDirectory) {
                out[String(decoding: name, as: UTF8.self)] = parsed.seconds
            }
        }
        return out
    }

    /// `docs/report.odt` replaced ("one" kept, "two!" now) and, a second later, `notes.txt`
    /// deleted; returns the report's version's name. (Retention keeps one version per file
    /// in 30 s of the clock: a second one needs `nextStretch`.)
    static func makeVersions(_ sandbox: Sandbox) async throws -> String {
        try FS.mkdirs(sandbox.source / "docs")
        try FS.writeFile(sandbox.source / "docs/report.odt", "one", mode: 0o640)
        try FS.setTimes(sandbox.source / "docs/report.odt", seconds: 1_700_000_000, nanoseconds: 123_456_789)
        try FS.writeFile(sandbox.source / "notes.txt", "notes")
        try FS.writeFile(sandbox.source / "keep.txt", "keep")
        try sync(sandbox)
        try FS.overwrite(sandbox.source / "docs/report.odt", b("two!"))
        try FS.setTimes(sandbox.source / "docs/report.odt", seconds: 1_700_000_100, nanoseconds: 5)
        try sync(sandbox)
        await nextSecond()
        try FS.unlink(sandbox.source / "notes.txt")
        try sync(sandbox)
        let reports = tags(sandbox, "docs")
        try #require(reports.count == 1, "\(reports)")
        return reports.first!.key
    }

    /// Waits until the wall clock enters the next 30 s stretch: a version made then is not
    /// thinned against one made before.
    static func nextStretch() async {
        let now = time(nil) / 30
        _ = await eventually(timeout: .seconds(40), every: .milliseconds(20)) { time(nil) / 30 > now }
    }

    static func json(_ result: ProcessResult) throws -> [[String: Any]] {
        try #require(JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]], "\(result)")
    }

    @Test("versions lists newest first in local time with its offset, size and path, or as JSON; PATH filters; none is exit 0")
    func listsVersions() async throws {
        let sandbox = try Sandbox()
        let report = try await Self.makeVersions(sandbox)
        let notes = try #require(Self.tags(sandbox).first { $0.key.hasPrefix("notes~") })
        let reportTag = try #require(Self.tags(sandbox, "docs")[report])
        #expect(notes.value > reportTag)

        // UTC+1 with no daylight saving: each line's time is its tag an hour on.
        let text = try Self.run(sandbox, "versions", [], tz: "<+01>-1")
        #expect(text.status == 0 && text.stderr.isEmpty, "\(text)")
        let zone = LocalZone { _ in 3600 }
        let expected = [(notes.value, "5 B", "notes.txt"), (reportTag, "3 B", "docs/report.odt")]
            .map { "\(VersionTime.local($0.0, zone: zone))  \(String(repeating: " ", count: 10 - $0.1.count))\($0.1)  \($0.2)" }
        #expect(text.stdoutLines == expected, "\(text.stdoutLines) against \(expected)")
        #expect(text.stdoutLines.allSatisfy { $0.contains(" +0100 ") })

        let items = try Self.json(try Self.run(sandbox, "versions", ["--json"]))
        #expect(items.count == 2)
        for item in items {
            let version = try #require(item["version"] as? String)
            let path = try #require(item["path"] as? String)
            let size = try #require(item["size"] as? Int)
            #expect(item["directory"] as? Bool == false)
            #expect(try FS.readFile(sandbox.mirror / version).count == size, "\(item)")
            let seconds = try #require(VersionName(parsing: Self.b(String(version.split(separator: "/").last!)))?.seconds)
            #expect(item["time"] as? String == VersionTime.iso(seconds))
            #expect(version.hasPrefix(".keepsync-versions/" + (path == "notes.txt" ? "notes~" : "docs/report~")), "\(item)")
        }
        #expect(items.compactMap { $0["time"] as? String } == items.compactMap { $0["time"] as? String }.sorted(by: >))
        let reports = items.filter { $0["path"] as? String == "docs/report.odt" }.compactMap { $0["version"] as? String }
        #expect(reports == [".keepsync-versions/docs/\(report)"])

        // PATH: a directory, a file, an absolute path inside the source, nothing kept.
        for path in ["docs", "docs/report.odt", "./docs/", String(decoding: sandbox.source / "docs", as: UTF8.self)] {
            let filtered = try Self.run(sandbox, "versions", [path])
            #expect(filtered.status == 0 && filtered.stdoutLines.count == 1
                    && filtered.stdoutLines.allSatisfy { $0.hasSuffix("  docs/report.odt") }, "\(path): \(filtered)")
        }
        let one = try Self.json(try Self.run(sandbox, "versions", ["notes.txt", "--json"]))
        #expect(one.count == 1 && one.first?["path"] as? String == "notes.txt")
        let none = try Self.run(sandbox, "versions", ["keep.txt"])
        #expect(none.status == 0 && none.stdout.isEmpty, "\(none)")
        let noneJSON = try Self.run(sandbox, "versions", ["keep.txt", "--json"])
        #expect(noneJSON.status == 0 && noneJSON.stdoutText == "[]\n", "\(noneJSON)")
        let outside = try Self.run(sandbox, "versions", ["/etc"])
        #expect(outside.status == 2 && outside.errorLines.first?.contains("/etc is not inside the source") == true, "\(outside)")
    }

    @Test("status.json counts the versions after sync (count, bytes, oldest) and status shows them; run counts them at start")
    func statusCountsVersions() async throws {
        let sandbox = try Sandbox()
        _ = try await Self.makeVersions(sandbox)
        let oldest = try #require((Self.tags(sandbox).values.filter { $0 > 0 } + Self.tags(sandbox, "docs").values).min())
        let status = try #require(RunCommandTests.status(sandbox)?["versions"] as? [String: Any], "\(RunCommandTests.statusText(sandbox))")
        #expect(status["count"] as? Int == 2 && status["bytes"] as? Int == 3 + 5, "\(status)")
        #expect(status["oldest"] as? String == VersionTime.iso(oldest), "\(status)")
        let human = try sandbox.status()
        #expect(human.stdoutLines.contains("  versions        2 (8 B), oldest \(VersionTime.iso(oldest))"), "\(human)")

        // Versions off: no "versions" in status.json.
        let off = try sandbox.sync()
        #expect(off.status == 0 && RunCommandTests.status(sandbox)?["versions"] == nil, "\(RunCommandTests.statusText(sandbox))")

        let agent = try await RunCommandTests.start(sandbox, Self.keep)
        defer { agent.killNow() }
        let counted = await eventually(timeout: .seconds(30)) {
            (RunCommandTests.status(sandbox)?["versions"] as? [String: Any])?["count"] as? Int == 2
        }
        #expect(counted, "\(RunCommandTests.statusText(sandbox))")
        try await RunCommandTests.stop(agent, sandbox)
        #expect((RunCommandTests.status(sandbox)?["versions"] as? [String: Any])?["count"] as? Int == 2,
                "the stopped agent's status keeps the count: \(RunCommandTests.statusText(sandbox))")
    }

    @Test("restore brings the newest version back into the source with its bytes, mode and mtime; what is there is kept without --force and replaced with it")
    func restoresNewest() async throws {
        let sandbox = try Sandbox()
        let newest = try await Self.makeVersions(sandbox)
        let version = sandbox.mirror / ".keepsync-versions/docs/\(newest)"
        let kept = try #require(FS.lstat(version))
        try FS.unlink(sandbox.source / "docs/report.odt")

        let restored = try Self.run(sandbox, "restore", ["docs/report.odt"], tz: "UTC")
        #expect(restored.status == 0, "\(restored)")
        let seconds = try #require(Self.tags(sandbox, "docs")[newest])
        #expect(restored.stdoutLines == ["restored docs/report.odt from the version of \(VersionTime.local(seconds, zone: .utc))"],
                "\(restored)")
        let file = sandbox.source / "docs/report.odt"
        #expect(try FS.readFile(file) == Self.b("one"))
        let info = try #require(FS.lstat(file))
        #expect(info.permissions == 0o640 && info.permissions == kept.permissions)
        #expect(info.mtimeSeconds == kept.mtimeSeconds && info.mtimeNanoseconds == kept.mtimeNanoseconds
                && info.mtimeSeconds == 1_700_000_000 && info.mtimeNanoseconds == 123_456_789, "\(info) against \(kept)")
        #expect(info.inode != kept.inode, "a copy, not the version itself")
        #expect(try FS.list(sandbox.source / "docs").count == 1, "no temp file left")

        // Something at the path: exit 1, one line naming it and --force; left as it is.
        try FS.overwrite(file, Self.b("mine"))
        let refused = try Self.run(sandbox, "restore", ["docs/report.odt"])
        #expect(refused.status == 1 && refused.stdout.isEmpty, "\(refused)")
        #expect(refused.errorLines == ["keepsync: error: restore: docs/report.odt exists; use --force to replace it"], "\(refused)")
        #expect(try FS.readFile(file) == Self.b("mine"))
        let forced = try Self.run(sandbox, "restore", ["docs/report.odt", "--force"])
        #expect(forced.status == 0, "\(forced)")
        #expect(try FS.readFile(file) == Self.b("one"))
        #expect(try FS.readFile(sandbox.mirror / "docs/report.odt") == Self.b("two!"), "the mirror is left to the agent")

        // The next sync mirrors it, and keeps what it replaced as a version itself (within
        // 30 s of the first, the one retention keeps).
        try Self.sync(sandbox)
        #expect(try FS.readFile(sandbox.mirror / "docs/report.odt") == Self.b("one"))
        let latest = try #require(Self.tags(sandbox, "docs").max { $0.value < $1.value }?.key)
        #expect(try FS.readFile(sandbox.mirror / ".keepsync-versions/docs/\(latest)") == Self.b("two!"))
    }

    @Test("restore --at takes the newest version at or before TIME (ISO 8601 UTC, with an offset, local, or 'N ago'); none then is exit 1")
    func restoresAtTime() async throws {
        let sandbox = try Sandbox()
        let older = try await Self.makeVersions(sandbox)
        let olderTag = try #require(Self.tags(sandbox, "docs")[older])
        // A second version of the report ("two!"), in the next 30 s of the clock.
        await Self.nextStretch()
        let file = sandbox.source / "docs/report.odt"
        try FS.overwrite(file, Self.b("three"))
        try Self.sync(sandbox)
        let newerTag = try #require(Self.tags(sandbox, "docs").values.max())
        try #require(Self.tags(sandbox, "docs").count == 2 && newerTag > olderTag, "\(Self.tags(sandbox, "docs"))")
        let plusTwo = LocalZone { _ in 7200 }
        let local = String(VersionTime.local(olderTag, zone: plusTwo).prefix(19))
        let forms: [(String, String?)] = [
            (VersionTime.iso(olderTag), nil), (VersionTime.iso(newerTag - 1), nil),
            (local.replacingOccurrences(of: " ", with: "T") + "+02:00", nil), (local, "<+02>-2"),
        ]
        for (at, tz) in forms {
            let result = try Self.run(sandbox, "restore", ["docs/report.odt", "--at", at, "--force"], tz: tz)
            #expect(result.status == 0, "--at \(at): \(result)")
            #expect(try FS.readFile(file) == Self.b("one"), "--at \(at)")
            #expect(FS.lstat(file)?.mtimeSeconds == 1_700_000_000 && FS.lstat(file)?.mtimeNanoseconds == 123_456_789)
        }
        let newest = try Self.run(sandbox, "restore", ["docs/report.odt", "--at", VersionTime.iso(newerTag), "--force"])
        #expect(try newest.status == 0 && FS.readFile(file) == Self.b("two!"), "\(newest)")
        let ago = try Self.run(sandbox, "restore", ["docs/report.odt", "--at", "0s ago", "--force"])
        #expect(ago.status == 2, "a zero duration is refused: \(ago)")
        let hourAgo = try Self.run(sandbox, "restore", ["docs/report.odt", "--at", "1h", "ago", "--force"])
        #expect(hourAgo.status == 1 && hourAgo.errorLines.first?.contains("no version of docs/report.odt at or before") == true,
                "\(hourAgo)")
        // A second ago is after the newer version once the clock is past its next second.
        _ = await eventually(timeout: .seconds(5), every: .milliseconds(5)) { Int64(time(nil)) > newerTag + 1 }
        let secondAgo = try Self.run(sandbox, "restore", ["docs/report.odt", "--at", "1s ago", "--force"])
        #expect(try secondAgo.status == 0 && FS.readFile(file) == Self.b("two!"), "\(secondAgo)")
        let tooEarly = try Self.run(sandbox, "restore", ["docs/report.odt", "--at", VersionTime.iso(olderTag - 1), "--force"], tz: "UTC")
        #expect(tooEarly.status == 1, "\(tooEarly)")
        #expect(tooEarly.errorLines == ["keepsync: error: restore: no version of docs/report.odt at or before \(VersionTime.local(olderTag - 1, zone: .utc))"],
                "\(tooEarly)")
        let bad = try Self.run(sandbox, "restore", ["docs/report.odt", "--at", "yesterday"])
        #expect(bad.status == 2 && bad.errorLines.first?.contains("--at: ") == true
                && bad.errorLines.first?.hasSuffix("got 'yesterday'") == true, "\(bad)")
    }

    @Test("restore --to DIR restores as DIR/NAME and leaves the source alone")
    func restoresInto() async throws {
        let sandbox = try Sandbox()
        let newest = try await Self.makeVersions(sandbox)
        let into = sandbox.root / "out"
        try FS.mkdir(into)
        let result = try Self.run(sandbox, "restore", ["docs/report.odt", "--to", into], tz: "UTC")
        #expect(result.status == 0, "\(result)")
        let seconds = try #require(Self.tags(sandbox, "docs")[newest])
        #expect(result.stdoutLines == ["restored docs/report.odt as \(String(decoding: into, as: UTF8.self))/report.odt from the version of \(VersionTime.local(seconds, zone: .utc))"])
        #expect(try FS.readFile(into / "report.odt") == Self.b("one"))
        #expect(FS.lstat(into / "report.odt")?.permissions == 0o640)
        #expect(try FS.readFile(sandbox.source / "docs/report.odt") == Self.b("two!"))
        let again = try Self.run(sandbox, "restore", ["docs/report.odt", "--to", into])
        #expect(again.status == 1 && again.errorLines.first?.contains("report.odt exists; use --force") == true, "\(again)")
        let missing = try Self.run(sandbox, "restore", ["docs/report.odt", "--to", sandbox.root / "nowhere"])
        #expect(missing.status == 2 && missing.errorLines.first?.contains("--to ") == true, "\(missing)")
        let inMirror = try Self.run(sandbox, "restore", ["docs/report.odt", "--to", sandbox.mirror])
        #expect(inMirror.status == 2 && inMirror.errorLines.first?.contains("must not be inside the mirror") == true, "\(inMirror)")
    }

    @Test("a deleted directory comes back whole (files, modes, mtimes, symlinks), or one file of it; a directory in the way is refused")
    func restoresDirectory() async throws {
        let sandbox = try Sandbox()
        try FS.mkdirs(sandbox.source / "old/deep")
        try FS.writeFile(sandbox.source / "old/deep/f.txt", "f", mode: 0o600)
        try FS.writeFile(sandbox.source / "old/top.txt", "top")
        try FS.symlink(target: Self.b("deep/f.txt"), at: sandbox.source / "old/link")
        try FS.chmod(sandbox.source / "old/deep", 0o750)
        try FS.setTimes(sandbox.source / "old/deep", seconds: 1_600_000_000, nanoseconds: 7)
        try FS.setTimes(sandbox.source / "old", seconds: 1_600_000_001, nanoseconds: 8)
        try FS.writeFile(sandbox.source / "keep.txt", "keep")
        try Self.sync(sandbox)
        let before = try TreeSnapshot.take(sandbox.source / "old")
        try ScratchDirectory.removeTree(sandbox.source / "old")
        try Self.sync(sandbox)

        let listed = try Self.run(sandbox, "versions", ["old"])
        #expect(listed.status == 0 && listed.stdoutLines.count == 1 && listed.stdoutLines.first?.hasSuffix("4 B  old/") == true, "\(listed)")
        let restored = try Self.run(sandbox, "restore", ["old"])
        #expect(restored.status == 0 && restored.stdoutLines.first?.hasPrefix("restored old/ from the version of ") == true, "\(restored)")
        let after = try TreeSnapshot.take(sandbox.source / "old")
        #expect(before.differences(to: after).isEmpty, "\(before.differences(to: after))")
        #expect(FS.lstat(sandbox.source / "old")?.mtimeSeconds == 1_600_000_001)
        #expect(try FS.list(sandbox.source).count == 2, "no temp directory left")

        // In the way: a directory that is not empty is refused even with --force.
        let refused = try Self.run(sandbox, "restore", ["old", "--force"])
        #expect(refused.status == 1 && refused.errorLines.first?.contains("old is a directory that is not empty") == true, "\(refused)")
        // One file of the kept directory, somewhere else.
        let into = sandbox.root / "out"
        try FS.mkdir(into)
        let one = try Self.run(sandbox, "restore", ["old/deep/f.txt", "--to", into])
        #expect(try one.status == 0 && FS.readFile(into / "f.txt") == Self.b("f") && FS.lstat(into / "f.txt")?.permissions == 0o600,
                "\(one)")
    }

    @Test("no version of PATH is exit 1 naming it")
    func noVersion() async throws {
        let sandbox = try Sandbox()
        _ = try await Self.makeVersions(sandbox)
        let missing = try Self.run(sandbox, "restore", ["docs/missing.txt"])
        #expect(missing.status == 1 && missing.errorLines == ["keepsync: error: restore: no version of docs/missing.txt"], "\(missing)")
        #expect(!FS.exists(sandbox.source / "docs/missing.txt"))
    }
}
