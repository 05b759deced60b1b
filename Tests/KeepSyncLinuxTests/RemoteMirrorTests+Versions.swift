import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Synchronization
import Testing

/// `RemoteMirror` with versions (issue 40): what rsync's backup stages is moved to its
/// version's name by the barrier, before another run of the same path, and, after an
/// agent died between the two, by the next pass.
extension RemoteMirrorTests {
    @Test("staged versions: moved by the barrier, before a second run of the path, and by the next pass after a crash; listed, measured and thinned over the connection")
    func stagedVersionsAreMovedBeforeTheyCanBeLost() async throws {
        try await offThePool {
            let f = try Fixture("stagedVersions")
            let clock = Mutex<Int64>(1_765_000_000)
            let keeping = RemoteMirror.VersionKeeping(directory: VersionSettings.defaultDirectory, now: { clock.withLock { $0 } })
            func mirror() -> RemoteMirror {
                RemoteMirror(session: f.session, target: f.mirror.target, sourceRoot: f.source, rsyncIOTimeout: 20, versions: keeping)
            }
            let m = mirror()
            func install(_ content: String) throws {
                try LiveFS.writeFile(f.src(Self.b("a.txt")), Self.b(content))
                let result = m.install([RelativePath("a.txt")], from: f.sourceFS, io: .serial, logger: .silent)
                guard case .success(_?) = result[0].result else { throw KeepSyncError(.io, "install: \(result[0].result)") }
            }
            func kept() -> [String: String] {
                let dir = f.rem(Self.b(".keepsync-versions"))
                var out: [String: String] = [:]
                for name in (try? LiveFS.list(dir)) ?? [] where name != Self.b(".keepsync-incoming") {
                    out[String(decoding: name, as: UTF8.self)] = (try? LiveFS.readFile(dir + [0x2F] + name)).map { String(decoding: $0, as: UTF8.self) }
                }
                return out
            }
            try install("v0")
            try install("v1")
            // v0 staged by the second run, not yet named: the barrier names it.
            #expect(kept().isEmpty && m.versionsStaged == 0, "\(kept())")
            try m.barrier()
            #expect(kept() == ["a~20251206-054640Z.txt": "v0"], "\(kept())")
            // A run of a path still staged moves the staged file first (its backup would replace it).
            try install("v2")
            try install("v3")
            #expect(kept() == ["a~20251206-054640Z.txt": "v0", "a~20251206-054640Z-2.txt": "v1"], "\(kept())")
            // Killed before the barrier: a new agent's first pass moves what is staged.
            clock.withLock { $0 += 60 }
            let restarted = mirror()
            try restarted.beginPass()
            restarted.endPass()
            #expect(kept()["a~20251206-054740Z.txt"] == "v2", "\(kept())")
            #expect(restarted.versionsStaged == 1 && m.versionsStaged == 2)
            #expect(try LiveFS.readFile(f.rem(Self.b("a.txt"))) == Self.b("v3"))

            // Listed and thinned through the mirror's own calls, like a local mirror's.
            let (store, now) = try #require(VersionStore.of(restarted))
            #expect(now() == 1_765_000_060)
            let listed = try store.list().map { String(decoding: $0.path.name, as: UTF8.self) }.sorted()
            #expect(listed == ["a~20251206-054640Z-2.txt", "a~20251206-054640Z.txt", "a~20251206-054740Z.txt"], "\(listed)")
            let space = try #require(restarted.space(), "df on the remote")
            #expect(space.total > 0 && space.free <= space.total)
            // A day on, kept a day: all three go (the removals inside the versions directory remove).
            let commands = f.session.commandsRun
            let thinned = try store.thin(now: 1_765_000_060 + 86_400 * 2, keep: 86_400)
            #expect(thinned.removed.count == 3 && thinned.failed.isEmpty, "\(thinned)")
            // A stat and a listing of each of its two directories (itself and the staging
            // one), then one round trip removes all three (not one each).
            #expect(f.session.commandsRun - commands == 4, "\(f.session.commandsRun - commands) remote commands to thin 3 versions")
            #expect(kept().isEmpty && (try? LiveFS.list(f.rem(Self.b(".keepsync-versions/.keepsync-incoming")))) != nil)
        }
    }
}
