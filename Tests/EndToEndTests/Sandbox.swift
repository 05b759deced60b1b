import Glibc
import Testing
import KeepSyncTestSupport
import KeepSyncCore

/// One test's private world: a fresh temp directory holding the source `S`, the
/// mirror `M`, the state `T` and a home with XDG directories, removed at the end.
final class Sandbox {
    let root: [UInt8]
    let source: [UInt8]
    let mirror: [UInt8]
    let state: [UInt8]
    let home: [UInt8]
    let binary: [UInt8]
    /// Mirror paths named like temp files that a test planted on purpose and expects to stay.
    var plantedTemporaryFiles: [[UInt8]] = []

    /// A sandbox in a fresh directory below `base`.
    init(in base: String = "/tmp") throws {
        binary = try #require(KeepsyncBinary.path,
                              "keepsync binary not found (looked at \(KeepsyncBinary.searchedDescription)); build it with `swift build`")
        root = FS.realpath(try ScratchDirectory.make(prefix: "keepsync-e2e", in: base))
        source = root / "S"
        mirror = root / "M"
        state = root / "T"
        home = root / "home"
        try FS.mkdir(source)
        try FS.mkdirs(home / ".config")
        try FS.mkdirs(home / ".local/state")
    }

    deinit {
        try? ScratchDirectory.removeTree(root)
    }

    /// The child's whole environment: nothing outside the sandbox is reachable through it.
    var environment: [String: String] {
        let h = String(decoding: home, as: UTF8.self)
        return ["PATH": "/usr/bin:/bin", "HOME": h, "XDG_CONFIG_HOME": h + "/.config",
                "XDG_STATE_HOME": h + "/.local/state", "LANG": "C"]
    }

    /// Runs `keepsync` with exactly these arguments.
    func keepsync(_ arguments: [any CommandArgument]) throws -> ProcessResult {
        let result = try ChildProcess.run(binary, arguments: arguments.map(\.argumentBytes), environment: environment)
        #expect(!result.timedOut, "keepsync timed out: \(result)")
        return result
    }

    func keepsync(_ arguments: any CommandArgument...) throws -> ProcessResult {
        try keepsync(arguments)
    }

    /// `--source S --mirror M --state T`.
    var paths: [any CommandArgument] { ["--source", source, "--mirror", mirror, "--state", state] }

    /// `keepsync sync` on this sandbox's paths; afterwards no stray temp file may be in the mirror.
    @discardableResult
    func sync(_ extra: any CommandArgument...) throws -> ProcessResult { try sync(extra) }

    @discardableResult
    func sync(_ extra: [any CommandArgument]) throws -> ProcessResult {
        let result = try keepsync(["sync"] + paths + extra)
        let strays = try strayTemporaryFiles()
        #expect(strays.isEmpty, "temporary files left in the mirror: \(strays.map { ByteEscaping.escape($0) })")
        return result
    }

    func check(_ extra: any CommandArgument...) throws -> ProcessResult { try check(extra) }

    func check(_ extra: [any CommandArgument]) throws -> ProcessResult {
        try keepsync(["check"] + paths + extra)
    }

    func status(_ extra: any CommandArgument...) throws -> ProcessResult {
        try keepsync(["status"] + paths + extra)
    }

    /// Mirror entries named `.keepsync-tmp-*` that are not source files of the same path.
    func strayTemporaryFiles() throws -> [[UInt8]] {
        guard FS.exists(mirror) else { return [] }
        let prefix = Array(".keepsync-tmp-".utf8)
        var strays: [[UInt8]] = []
        func walk(_ relative: [UInt8]) throws {
            let dir = relative.isEmpty ? mirror : mirror / relative
            for name in try FS.list(dir) {
                let path = relative / name
                if name.starts(with: prefix), !FS.exists(source / path), !plantedTemporaryFiles.contains(path) {
                    strays.append(path)
                }
                if FS.lstat(dir / name)?.kind == .directory { try walk(path) }
            }
        }
        try walk([])
        return strays
    }

    func sourceSnapshot() throws -> TreeSnapshot { try TreeSnapshot.take(source) }
    func mirrorSnapshot() throws -> TreeSnapshot { try TreeSnapshot.take(mirror) }

    /// Expects the mirror to equal the source (minus `ignoring` source paths).
    func expectMirrorEqualsSource(ignoring: [[UInt8]] = [], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let expected = try sourceSnapshot().removing(ignoring)
        let diff = expected.differences(to: try mirrorSnapshot())
        #expect(diff.isEmpty, "mirror differs from source:\n\(diff.joined(separator: "\n"))", sourceLocation: sourceLocation)
    }
}

/// Byte-string helpers for names that are not UTF-8.
func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// 2001-02-03 04:05:06 UTC.
let pastSeconds = 981_173_106

extension FS {
    /// Gives every regular file and directory under `root` (and `root`) a distinct past
    /// mtime with nanoseconds, children before their directories.
    static func setPastTimes(under root: [UInt8]) throws {
        let snapshot = try TreeSnapshot.take(root)
        var n = 0
        for path in snapshot.paths.reversed() where [.regular, .directory].contains(snapshot.entries[path]?.kind) {
            n += 1
            try setTimes(path.isEmpty ? root : root / path, seconds: pastSeconds + n, nanoseconds: 123_456_789 - n)
        }
    }
}

extension Sandbox {
    /// `top.txt`, `dir/file.txt`, `dir/sub/x`, all with past mtimes.
    func buildSmallSource() throws {
        try FS.writeFile(source / "top.txt", "top\n")
        try FS.mkdirs(source / "dir/sub")
        try FS.writeFile(source / "dir/file.txt", "hello world\n")
        try FS.writeFile(source / "dir/sub/x", "x")
        try FS.setPastTimes(under: source)
    }

    /// Builds the small source and syncs it, requiring success and an equal mirror.
    func syncSmallSource() throws {
        try buildSmallSource()
        let result = try sync()
        try #require(result.status == 0, "\(result)")
        try expectMirrorEqualsSource()
    }
}
