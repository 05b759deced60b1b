import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The readers that fill the cache ahead of a walk (the watcher's) and, with lookups,
/// while the records load (`LinuxAgentHost.readAhead`).
@Suite("DirectoryWarmer")
struct DirectoryWarmerTests {
    /// ROOT with `directories` directories (two levels: d0/e0 …) of `files` files each, a
    /// symlink to / and an excluded directory `skip` of 5 files: what it made (directories
    /// under ROOT, entries below them excluding `skip`'s).
    static func tree(_ rootBytes: [UInt8], directories: Int, files: Int) throws -> (directories: Int, entries: Int) {
        struct Failed: Error { let call: String; let code: Int32 }
        let root = String(decoding: rootBytes, as: UTF8.self)
        func make(_ path: String) throws { guard mkdir(path, 0o755) == 0 else { throw Failed(call: "mkdir \(path)", code: errno) } }
        func write(_ path: String) throws {
            let fd = creat(path, 0o644)
            guard fd >= 0 else { throw Failed(call: "creat \(path)", code: errno) }
            close(fd)
        }
        var made = 0, entries = 0
        for d in 0..<directories {
            let top = root + "/d\(d / 4)"
            if d % 4 == 0 {
                try make(top)
                made += 1
                entries += 1
            }
            let dir = top + "/e\(d % 4)"
            try make(dir)
            made += 1
            entries += 1
            for f in 0..<files { try write(dir + "/f\(f)") }
            entries += files
        }
        guard symlink("/", root + "/link") == 0 else { throw Failed(call: "symlink", code: errno) }
        entries += 1
        try make(root + "/skip")
        for f in 0..<5 { try write(root + "/skip/f\(f)") }
        entries += 1
        return (made, entries)
    }

    @Test("with lookups, every directory is read once and every entry stat'ed once; an excluded directory and a link's target are not read")
    func readsAndLooksUpEverything() async throws {
        let root = try ScratchDirectory.make(prefix: "keepsync-warmer")
        defer { try? ScratchDirectory.removeTree(root) }
        let made = try Self.tree(root, directories: 40, files: 25)
        let warmer = DirectoryWarmer(root: root, excludes: try ExcludeMatcher(patterns: [Array("skip/".utf8)]), width: 3, lookUp: true)
        // The root and the directories made; `skip` and `link` are not entered.
        let done = await eventually(timeout: .seconds(30)) {
            warmer.directoriesRead == made.directories + 1 && warmer.entriesLookedUp == made.entries
        }
        // `stop` waits for the readers: a directory read twice would show in the counts.
        warmer.stop()
        #expect(done, "read \(warmer.directoriesRead) of \(made.directories + 1) directories, looked up \(warmer.entriesLookedUp) of \(made.entries) entries")
        #expect(warmer.directoriesRead == made.directories + 1 && warmer.entriesLookedUp == made.entries)
    }

    @Test("without lookups (the watcher's warmer) no entry is stat'ed")
    func listsOnlyByDefault() async throws {
        let root = try ScratchDirectory.make(prefix: "keepsync-warmer")
        defer { try? ScratchDirectory.removeTree(root) }
        let made = try Self.tree(root, directories: 8, files: 10)
        let warmer = DirectoryWarmer(root: root, excludes: try ExcludeMatcher(patterns: []), width: 2)
        // `skip` is not excluded here.
        let done = await eventually(timeout: .seconds(30)) { warmer.directoriesRead == made.directories + 2 }
        warmer.stop()
        #expect(done, "read \(warmer.directoriesRead) of \(made.directories + 2) directories")
        #expect(warmer.entriesLookedUp == 0)
    }
}
