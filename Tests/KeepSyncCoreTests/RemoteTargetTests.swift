import Testing
@testable import KeepSyncCore

/// `--mirror [USER@]HOST:DIR` in rsync's syntax, and the ssh command's words (issue 18).
@Suite("RemoteTarget")
struct RemoteTargetTests {
    static func parse(_ s: String) throws -> RemoteTarget? { try RemoteTarget.parse(Array(s.utf8)) }

    @Test("a colon before the first slash makes a mirror remote", arguments: [
        ("backup:/srv/mirror", nil, "backup", "/srv/mirror"),
        ("me@backup.lan:/srv/mirror/", "me", "backup.lan", "/srv/mirror"),
        ("host:rel/dir", nil, "host", "rel/dir"),
        ("host:", nil, "host", ""),
        ("host:/", nil, "host", "/"),
        ("u@[fe80::1]:/m", "u", "fe80::1", "/m"),
    ] as [(String, String?, String, String)])
    func remote(spec: String, user: String?, host: String, directory: String) throws {
        let t = try #require(try Self.parse(spec))
        #expect(t.user == user && t.host == host && t.directory == Array(directory.utf8))
    }

    @Test("paths with a slash before any colon stay local", arguments: ["/mnt/usb", "./a:b", "/x/host:dir", "rel/dir"])
    func local(spec: String) throws {
        #expect(try Self.parse(spec) == nil)
    }

    @Test("rsync daemons and hosts or users ssh would read as options are refused, naming the flag")
    func refused() {
        for spec in ["host::module", "rsync://host/m", "-oProxyCommand=x:/m", "-l@host:/m", ":/dir"] {
            #expect(throws: KeepSyncError.self) { try Self.parse(spec) }
            do { _ = try Self.parse(spec) } catch let e as KeepSyncError {
                #expect(e.code == .configuration && e.message.hasPrefix("--mirror "), "\(spec): \(e.message)")
            } catch {}
        }
    }

    @Test("the normalized form brackets an IPv6 host and names the state directory")
    func normalized() throws {
        #expect(try Self.parse("u@[fe80::1]:/m/")?.normalized == Array("u@[fe80::1]:/m".utf8))
        #expect(try Self.parse("h:/m")?.destination == "h")
        #expect(try Self.parse("u@h:/m")?.destination == "u@h")
    }

    @Test("an ssh command splits into words as rsync's -e does (do_cmd)")
    func words() throws {
        func split(_ s: String) -> [String]? {
            (try? RemoteTarget.words(Array(s.utf8)).get())?.map { String(decoding: $0, as: UTF8.self) }
        }
        #expect(split("ssh -p 2222 -i ~/.ssh/backup") == ["ssh", "-p", "2222", "-i", "~/.ssh/backup"])
        #expect(split("ssh -o 'ProxyJump a b' \"-i\" k\\ ey") == ["ssh", "-o", "ProxyJump a b", "-i", "k\\", "ey"],
                "a backslash is an ordinary byte")
        #expect(split("ssh -o \"ProxyCommand=nc \"\"x\"\"\"") == ["ssh", "-o", "ProxyCommand=nc \"x\""],
                "a doubled quote inside quotes is one")
        #expect(split("  ") == nil)
        #expect(split("ssh 'open") == nil)
    }

    @Test("a host or user with shell or ssh metacharacters is refused", arguments: [
        "h$(id):/m", "u;x@h:/m", "h%h:/m", "'h':/m", "a[b]c:/m",
    ])
    func metacharacters(spec: String) {
        #expect(throws: KeepSyncError.self) { try Self.parse(spec) }
    }
}
