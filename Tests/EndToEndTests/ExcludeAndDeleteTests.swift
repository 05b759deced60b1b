import Glibc
import Testing
import KeepSyncTestSupport
import KeepSyncCore

/// `--exclude` and the propagation of deletions.
@Suite(.serialized, .offThePool)
struct ExcludeAndDeleteTests {
    static let excludes: [any CommandArgument] = ["--exclude", "*.log", "--exclude", "build/"]

    static func buildSourceWithExcludedPaths(_ sandbox: Sandbox) throws {
        try FS.writeFile(sandbox.source / "keep.txt", "keep\n")
        try FS.writeFile(sandbox.source / "app.log", "log\n")
        try FS.mkdirs(sandbox.source / "src/build")
        try FS.writeFile(sandbox.source / "src/main.c", "int main;\n")
        try FS.writeFile(sandbox.source / "src/trace.log", "trace\n")
        try FS.writeFile(sandbox.source / "src/build/main.o", "obj")
        try FS.mkdirs(sandbox.source / "build/cache")
        try FS.writeFile(sandbox.source / "build/out.bin", "bin")
        try FS.writeFile(sandbox.source / "build/cache/blob", "blob")
        try FS.mkdir(sandbox.source / "other")
        // `build/` matches directories only: a regular file named `build` is mirrored.
        try FS.writeFile(sandbox.source / "other/build", "a file, not a directory\n")
        try FS.setPastTimes(under: sandbox.source)
    }

    static let excludedPaths = ["app.log", "src/trace.log", "src/build", "build"].map(bytes)

    @Test func excludedPathsAreNotCopied() throws {
        let sandbox = try Sandbox()
        try Self.buildSourceWithExcludedPaths(sandbox)
        let result = try sandbox.sync(Self.excludes)
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource(ignoring: Self.excludedPaths)
        for path in Self.excludedPaths {
            #expect(!FS.exists(sandbox.mirror / path), "\(ByteEscaping.escape(path)) is excluded but was copied")
        }
        #expect(FS.lstat(sandbox.mirror / "other/build")?.kind == .regular)
        let check = try sandbox.check(Self.excludes)
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(check)")
    }

    @Test func mirrorContentUnderAnExcludedPathIsLeftAlone() throws {
        let sandbox = try Sandbox()
        try Self.buildSourceWithExcludedPaths(sandbox)
        try #require(try sandbox.sync(Self.excludes).status == 0)
        // Content that only the mirror has, under excluded paths.
        try FS.mkdirs(sandbox.mirror / "build/old")
        try FS.writeFile(sandbox.mirror / "build/old/artifact", "old artifact")
        try FS.writeFile(sandbox.mirror / "debug.log", "mirror-only log")
        try FS.mkdir(sandbox.mirror / "src/build")
        try FS.writeFile(sandbox.mirror / "src/build/stale.o", "stale")
        try FS.copyMtime(from: sandbox.source, to: sandbox.mirror)
        try FS.copyMtime(from: sandbox.source / "src", to: sandbox.mirror / "src")
        // And a change in the source under an excluded path.
        try FS.writeFile(sandbox.source / "build/out.bin", "new bin")
        let before = try sandbox.mirrorSnapshot()

        let result = try sandbox.sync(Self.excludes)
        #expect(result.status == 0, "\(result)")
        let after = try sandbox.mirrorSnapshot()
        #expect(before.differences(to: after).isEmpty, "excluded mirror content changed")
        #expect(try FS.readFile(sandbox.mirror / "build/old/artifact") == bytes("old artifact"))
        #expect(try FS.readFile(sandbox.mirror / "debug.log") == bytes("mirror-only log"))
        #expect(try FS.readFile(sandbox.mirror / "src/build/stale.o") == bytes("stale"))
        #expect(!FS.exists(sandbox.mirror / "build/out.bin"))
        let check = try sandbox.check(Self.excludes)
        #expect(check.status == 0 && check.stdoutText == "0 differences\n", "\(check)")
    }

    @Test func deletionsInTheSourcePropagateToTheMirror() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.writeFile(sandbox.source / "stays.txt", "stays\n")
        try ScratchDirectory.removeTree(sandbox.source / "dir/sub")
        try FS.unlink(sandbox.source / "top.txt")

        let result = try sandbox.sync()
        #expect(result.status == 0, "\(result)")
        try sandbox.expectMirrorEqualsSource()
        #expect(!FS.exists(sandbox.mirror / "dir/sub"))
        #expect(!FS.exists(sandbox.mirror / "top.txt"))
    }

    @Test func noDeleteKeepsWhatTheSourceDeleted() throws {
        let sandbox = try Sandbox()
        try sandbox.syncSmallSource()
        try FS.writeFile(sandbox.source / "new.txt", "new\n")
        try ScratchDirectory.removeTree(sandbox.source / "dir/sub")
        try FS.unlink(sandbox.source / "top.txt")

        let result = try sandbox.sync("--no-delete")
        #expect(result.status == 0, "\(result)")
        #expect(try FS.readFile(sandbox.mirror / "top.txt") == bytes("top\n"))
        #expect(try FS.readFile(sandbox.mirror / "dir/sub/x") == bytes("x"))
        #expect(try FS.readFile(sandbox.mirror / "new.txt") == bytes("new\n"))
        let relaxed = try sandbox.check("--no-delete")
        #expect(relaxed.status == 0 && relaxed.stdoutText == "0 differences\n", "\(relaxed)")
        let strict = try sandbox.check()
        #expect(strict.status == 1, "\(strict)")
        #expect(strict.stdoutText == "- dir/sub\n- dir/sub/x\n- top.txt\n3 differences\n", "\(strict)")
    }
}
