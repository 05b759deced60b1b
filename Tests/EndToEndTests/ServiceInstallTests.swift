import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// `keepsync service install` without a user manager (no `--enable`): what it puts on
/// disk. SPEC "systemd": the running binary is copied to `~/.local/bin/keepsync` and the
/// unit points there, so that removing the build folder does not break the service; an
/// older copy is replaced, another program of that name refused; the manual page and the
/// completions go under `$XDG_DATA_HOME`; it says what a user must do (PATH, linger).
@Suite(.serialized, .offThePool)
struct ServiceInstallTests {
    static func install(_ sandbox: Sandbox) throws -> ProcessResult {
        var environment = sandbox.environment
        environment["USER"] = "keepsync-test-user"
        return try ChildProcess.run(sandbox.binary, arguments: (["service", "install"] + sandbox.paths
                                                                + ["--verify-interval", "600", "--exclude", "*.o", "--keep-versions", "30d"]).map(\.argumentBytes),
                                    environment: environment, timeout: .seconds(30))
    }

    @Test func installCopiesTheBinaryPointsTheUnitThereAndInstallsTheManualAndCompletions() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let result = try Self.install(sandbox)
        try #require(result.status == 0, "\(result)")
        let copy = sandbox.home / ".local/bin/keepsync"
        let info = try #require(FS.lstat(copy), "no copy at ~/.local/bin/keepsync\n\(result)")
        #expect(info.kind == .regular && info.permissions & 0o111 == 0o111, "not an executable file: \(info)")
        #expect(try FS.readFile(copy) == FS.readFile(sandbox.binary))
        let unit = String(decoding: try FS.readFile(sandbox.home / ".config/systemd/user/keepsync.service"), as: UTF8.self)
        #expect(unit.split(separator: "\n").contains { $0 == "ExecStart=\(ByteEscaping.escape(copy)) run" }, "\(unit)")
        // The options of run that it was given are in the configuration it wrote.
        let config = String(decoding: try FS.readFile(sandbox.home / ".config/keepsync/keepsync.conf"), as: UTF8.self)
        #expect(config.contains("verify_interval = 600\n") && config.contains("exclude = *.o\n"), "\(config)")
        #expect(config.contains("keep_versions = 30d\n") && !config.contains("versions_dir"), "\(config)")
        let manual = String(decoding: try FS.readFile(sandbox.home / ".local/share/man/man1/keepsync.1"), as: UTF8.self)
        #expect(manual.hasPrefix(".TH KEEPSYNC 1"), "\(manual.prefix(200))")
        let completion = String(decoding: try FS.readFile(sandbox.home / ".local/share/bash-completion/completions/keepsync"),
                                as: UTF8.self)
        #expect(completion.contains("complete -F _keepsync keepsync"))
        // The sandbox's PATH lacks ~/.local/bin, and no linger file names the user.
        #expect(result.stdoutText.contains("is not in PATH"), "\(result)")
        #expect(result.stdoutText.contains("loginctl enable-linger keepsync-test-user"), "\(result)")

        // The service runs the copy: it works with the build's binary gone (here: another
        // install from a binary elsewhere replaces an older copy).
        let moved = sandbox.root / "other-build/keepsync"
        try FS.mkdirs(sandbox.root / "other-build")
        try FS.writeFile(moved, try FS.readFile(sandbox.binary) + [0x0A], mode: 0o755)
        try FS.writeFile(copy, try FS.readFile(sandbox.binary) + [0x0A, 0x0A], mode: 0o755)
        let again = try ChildProcess.run(moved, arguments: (["service", "install"] + sandbox.paths).map(\.argumentBytes),
                                         environment: sandbox.environment, timeout: .seconds(30))
        #expect(again.status == 0, "an older keepsync at ~/.local/bin was not replaced: \(again)")
        #expect(try FS.readFile(copy) == FS.readFile(moved))
        let version = try ChildProcess.run(copy, arguments: [Array("--version".utf8)], environment: sandbox.environment,
                                           timeout: .seconds(10))
        #expect(version.status == 0 && version.stdoutText.hasPrefix("keepsync "), "\(version)")
    }

    @Test func installRefusesToReplaceAnotherProgramCalledKeepsync() throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let copy = sandbox.home / ".local/bin/keepsync"
        try FS.mkdirs(sandbox.home / ".local/bin")
        let script = Array("#!/bin/sh\necho mine\n".utf8)
        try FS.writeFile(copy, script, mode: 0o755)
        let result = try Self.install(sandbox)
        #expect(result.status == 2, "\(result)")
        #expect(result.errorLines.contains { $0.contains(ByteEscaping.escape(copy)) && $0.contains("another program") }, "\(result)")
        #expect(try FS.readFile(copy) == script, "the other program was overwritten")
        #expect(FS.lstat(sandbox.home / ".config/systemd/user/keepsync.service") == nil, "a unit was written anyway")
    }
}
