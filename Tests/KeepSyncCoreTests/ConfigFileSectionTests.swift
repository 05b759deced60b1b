import Testing
@testable import KeepSyncCore

/// `[mirror NAME]` sections (SPEC "Configuration file", "Several mirrors").
@Suite("ConfigFileParser sections")
struct ConfigFileSectionTests {
    static func parse(_ text: String) throws -> Configuration {
        try ConfigFileParser.parse(Array(text.utf8), fileName: "k.conf", home: Array("/home/ann".utf8))
    }

    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    static let twoMirrors = """
        source = ~/Documents
        exclude = *.tmp
        delete = false
        keep_versions = 1d

        [mirror usb]
        # the disk
        path = /media/usb/Documents
        state = ~/st/usb
        delete = true
        max_delete_percent = 10
        verify_interval = 60
        keep_versions = 30d
        versions_dir = /media/usb/.v

        [ mirror  nas.home-2_x ]
        path = backup@nas:/srv/Documents
        ssh_command = ssh -p 2222
        rsync_path = /opt/bin/rsync
        """

    @Test("sections are read in file order with their own keys; keys before the first apply to every mirror")
    func sectionsAreRead() throws {
        let config = try Self.parse(Self.twoMirrors)
        #expect(config.mirror == nil && config.source == Self.b("/home/ann/Documents"))
        #expect(config.excludes == [Self.b("*.tmp")] && !config.deleteEnabled && config.keepVersionsSeconds == 86_400)
        var usb = MirrorSection(name: "usb", line: 6, path: Self.b("/media/usb/Documents"))
        usb.state = Self.b("/home/ann/st/usb")
        usb.deleteEnabled = true
        usb.maxDeletePercent = 10
        usb.verifyIntervalSeconds = 60
        usb.keepVersionsSeconds = 2_592_000
        usb.versionsDirectory = Self.b("/media/usb/.v")
        var nas = MirrorSection(name: "nas.home-2_x", line: 16, path: Self.b("backup@nas:/srv/Documents"))
        nas.sshCommand = Self.b("ssh -p 2222")
        nas.rsyncPath = Self.b("/opt/bin/rsync")
        #expect(config.sections == [usb, nas])
    }

    @Test("a section's keys win over the ones before the first section, which win over the defaults")
    func sectionKeysWin() throws {
        let config = try Self.parse(Self.twoMirrors)
        var top = config
        top.sections = []
        let usb = config.sections[0].applied(to: top), nas = config.sections[1].applied(to: top)
        #expect(usb.mirror == Self.b("/media/usb/Documents") && usb.sections.isEmpty)
        #expect(usb.deleteEnabled && usb.maxDeletePercent == 10 && usb.verifyIntervalSeconds == 60)
        #expect(usb.keepVersionsSeconds == 2_592_000 && usb.state == Self.b("/home/ann/st/usb"))
        // nas sets none of these: the top-level value, else the default.
        #expect(!nas.deleteEnabled && nas.keepVersionsSeconds == 86_400)
        #expect(nas.maxDeletePercent == Configuration.defaultMaxDeletePercent && nas.state == nil && nas.versionsDirectory == nil)
        #expect(nas.sshCommand == Self.b("ssh -p 2222") && usb.sshCommand == nil)
        #expect(nas.excludes == [Self.b("*.tmp")] && nas.source == config.source)
    }

    @Test("one key set in two sections, or before and in a section, is no duplicate; a key twice in a section is")
    func duplicatesPerSection() throws {
        let config = try Self.parse("delete = true\n[mirror a]\npath = /a\ndelete = false\n[mirror b]\npath = /b\ndelete = false\n")
        #expect(config.sections.map(\.deleteEnabled) == [false, false])
        #expect(throws: KeepSyncError(.configuration, "k.conf:4: duplicate key 'delete' in [mirror a] (first set on line 3)")) {
            try Self.parse("[mirror a]\npath = /a\ndelete = false\ndelete = true\n")
        }
    }

    static let errors: [(String, String)] = [
        // Keys that apply to every mirror, or are not keys at all, inside a section.
        ("[mirror a]\npath = /a\nsource = /s", "k.conf:3: 'source' applies to every mirror: set it before the first section, not in [mirror a]"),
        ("[mirror a]\npath = /a\nexclude = *.o", "k.conf:3: 'exclude' applies to every mirror: set it before the first section, not in [mirror a]"),
        ("[mirror a]\nsettle_ms = 5\npath = /a", "k.conf:2: 'settle_ms' applies to every mirror: set it before the first section, not in [mirror a]"),
        ("[mirror a]\npath = /a\nmax_delay_ms = 5", "k.conf:3: 'max_delay_ms' applies to every mirror: set it before the first section, not in [mirror a]"),
        ("[mirror a]\npath = /a\nlog_level = info", "k.conf:3: 'log_level' applies to every mirror: set it before the first section, not in [mirror a]"),
        ("[mirror a]\nmirror = /a", "k.conf:2: 'mirror =' in [mirror a]: its directory is 'path ='"),
        ("[mirror a]\npath = /a\ncolour = red", "k.conf:3: unknown key 'colour'"),
        // Bad values in a section name their line.
        ("[mirror a]\npath = /a\n\ndelete = maybe", "k.conf:4: delete: expected 'true' or 'false', got 'maybe'"),
        ("[mirror a]\npath =", "k.conf:2: path: expected a path"),
        ("path = /a", "k.conf:1: 'path =' belongs in a [mirror NAME] section"),
        // Top-level `mirror =` and sections do not mix: the line of `mirror =`.
        ("source = /s\nmirror = /m\n\n[mirror a]\npath = /a",
         "k.conf:2: 'mirror =' and [mirror NAME] sections (line 4) do not mix: move this mirror into a section of its own"),
        // A top-level `state =` shared by two sections: its line.
        ("state = /st\n[mirror a]\npath = /a\n[mirror b]\npath = /b",
         "k.conf:1: 'state =' before the sections would be shared by every mirror: set 'state =' in each [mirror NAME] section instead"),
        ("[mirror a]\npath = /a\n[mirror a]\npath = /b", "k.conf:3: duplicate section [mirror a] (first on line 1)"),
        // A section without `path =`: its header's line, followed by another or at the end.
        ("[mirror a]\nstate = /st\n[mirror b]\npath = /b", "k.conf:1: [mirror a] has no 'path =' (the mirror's directory)"),
        ("[mirror a]\npath = /a\n\n[mirror b]\n# nothing", "k.conf:4: [mirror b] has no 'path =' (the mirror's directory)"),
    ]

    @Test("an error in or about a section names the file and line", arguments: errors)
    func errorsNameFileAndLine(_ text: String, _ message: String) {
        #expect(throws: KeepSyncError(.configuration, message)) { try Self.parse(text) }
    }

    @Test("a header other than '[mirror NAME]' with NAME of letters, digits, '-', '_' or '.' is refused", arguments: [
        "[mirror]", "[mirror ]", "[mirrors a]", "[mirrora]", "[mirror a b]", "[mirror a", "[mirror a] # usb", "[mirror a/b]",
        "[Mirror a]", "[mirror é]", "[]", "[source]",
    ])
    func badHeaders(_ header: String) {
        let message = "k.conf:2: expected '[mirror NAME]' (NAME: letters, digits, '-', '_' or '.'), got '\(header)'"
        #expect(throws: KeepSyncError(.configuration, message)) { try Self.parse("source = /s\n\(header)\npath = /a\n") }
    }

    @Test("one section with a top-level state is taken: the state is that mirror's alone")
    func oneSectionTakesTheTopLevelState() throws {
        let config = try Self.parse("state = /st\n[mirror a]\npath = /a\n")
        #expect(config.sections.map(\.path) == [Self.b("/a")])
        #expect(config.sections[0].applied(to: config).state == Self.b("/st"))
    }
}
