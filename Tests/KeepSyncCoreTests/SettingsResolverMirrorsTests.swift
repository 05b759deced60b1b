import Testing
@testable import KeepSyncCore

/// `SettingsResolver.eachMirror` and `settings` with several mirrors (SPEC "Several mirrors").
@Suite("SettingsResolver several mirrors")
struct SettingsResolverMirrorsTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    func resolver(_ file: String? = nil) -> SettingsResolver {
        SettingsResolver(environment: ["XDG_STATE_HOME": "/xs"], home: Self.b("/home/u"),
                         paths: FakePaths(files: file.map { ["/c": $0] } ?? [:]))
    }

    func invocation(_ mirrors: [String], config: Bool = false, source: String? = "/data") -> Invocation {
        var inv = Invocation(command: .sync, configFile: config ? Self.b("/c") : nil, source: source.map(Self.b))
        inv.mirrors = mirrors.map(Self.b)
        return inv
    }

    func message(_ body: () throws -> Any) -> String? {
        do { _ = try body(); return nil } catch { return (error as? KeepSyncError).map { "\($0.code): \($0.message)" } }
    }

    func defaultState(_ mirror: String) -> [UInt8] {
        Self.b("/xs/keepsync/" + StateDirectoryName.name(source: Self.b("/data"), mirror: Self.b(mirror)))
    }

    static let file = """
        source = /data
        delete = false
        max_delete_percent = 20
        keep_versions = 1d

        [mirror usb]
        path = /media/usb
        delete = true
        verify_interval = 60
        keep_versions = 30d

        [mirror nas]
        path = me@nas:/srv/m/
        ssh_command = ssh -p 2222
        rsync_path = /opt/rsync
        state = /st/nas
        """

    @Test("--mirror twice gives one settings per mirror, in flag order, each as a single-mirror run of that pair")
    func twoFlags() throws {
        let all = try resolver().eachMirror(invocation(["/b1", "box:/b2/"]))
        #expect(all.map(\.mirrorName) == ["/b1", "box:/b2"])
        #expect(all.map(\.mirrorLabel) == ["/b1", "box:/b2"])
        #expect(all.map(\.state) == [defaultState("/b1"), defaultState("box:/b2")])
        for (settings, mirror) in zip(all, ["/b1", "box:/b2/"]) {
            let single = try resolver().settings(invocation([mirror]))
            #expect(settings.state == single.state && settings.mirror == single.mirror && settings.remote == single.remote)
            #expect(settings.configuration == single.configuration)
        }
    }

    @Test("sections come in file order, labelled by NAME, each with its keys over the top-level ones and the default state of its pair")
    func sections() throws {
        let all = try resolver(Self.file).eachMirror(invocation([], config: true, source: nil))
        #expect(all.map(\.mirrorLabel) == ["usb", "nas"])
        #expect(all.map(\.mirrorName) == ["/media/usb", "me@nas:/srv/m"])
        let usb = all[0], nas = all[1]
        #expect(usb.state == defaultState("/media/usb"), "the same state directory as `--mirror /media/usb`")
        #expect(nas.state == Self.b("/st/nas"))
        #expect(usb.configuration.deleteEnabled && !nas.configuration.deleteEnabled)
        #expect(usb.configuration.maxDeletePercent == 20 && nas.configuration.maxDeletePercent == 20)
        #expect(usb.configuration.verifyIntervalSeconds == 60
                && nas.configuration.verifyIntervalSeconds == Configuration.defaultVerifyIntervalSeconds)
        #expect(usb.versions?.keepSeconds == 2_592_000 && nas.versions?.keepSeconds == 86_400)
        #expect(nas.sshCommand == ["ssh", "-p", "2222"].map(Self.b) && nas.rsyncPath == Self.b("/opt/rsync"))
        #expect(usb.sshCommand == [Self.b("ssh")] && usb.configuration.sections.isEmpty)
        // Records carry over: the same pair run alone resolves the same state directory.
        #expect(try resolver().settings(invocation(["/media/usb"])).state == usb.state)
    }

    @Test("a flag wins over a section key, which wins over a top-level key, which wins over the default")
    func precedence() throws {
        var inv = invocation([], config: true, source: nil)
        inv.noDelete = true
        inv.maxDeletePercent = 70
        inv.keepVersionsSeconds = 0
        inv.sshCommand = Self.b("ssh -4")
        let all = try resolver(Self.file).eachMirror(inv)
        #expect(all.allSatisfy { !$0.configuration.deleteEnabled && $0.configuration.maxDeletePercent == 70 && $0.versions == nil })
        #expect(all.allSatisfy { $0.sshCommand == ["ssh", "-4"].map(Self.b) })
        #expect(all[1].rsyncPath == Self.b("/opt/rsync"), "a section key no flag overrides stays")
    }

    @Test("--mirror naming a section, by NAME or by path, selects it with its keys; another replaces the file's mirrors")
    func selection() throws {
        let byName = try resolver(Self.file).eachMirror(invocation(["nas"], config: true, source: nil))
        #expect(byName.map(\.mirrorLabel) == ["nas"] && byName[0].state == Self.b("/st/nas"))
        #expect(byName[0].rsyncPath == Self.b("/opt/rsync"))
        let byPath = try resolver(Self.file).eachMirror(invocation(["/media/usb"], config: true, source: nil))
        #expect(byPath.map(\.mirrorLabel) == ["usb"] && byPath[0].configuration.verifyIntervalSeconds == 60)
        let remote = try resolver(Self.file).eachMirror(invocation(["me@nas:/srv/m"], config: true, source: nil))
        #expect(remote.map(\.mirrorLabel) == ["nas"])
        let other = try resolver(Self.file).eachMirror(invocation(["/elsewhere"], config: true, source: nil))
        #expect(other.map(\.mirrorLabel) == ["/elsewhere"])
        #expect(other[0].configuration.verifyIntervalSeconds == Configuration.defaultVerifyIntervalSeconds)
        #expect(!other[0].configuration.deleteEnabled && other[0].state == defaultState("/elsewhere"), "top-level keys apply")
        let both = try resolver(Self.file).eachMirror(invocation(["nas", "/elsewhere"], config: true, source: nil))
        #expect(both.map(\.mirrorLabel) == ["nas", "/elsewhere"])
    }

    @Test("settings returns the one mirror; with several it asks for --mirror NAME, naming them")
    func settingsTakesOne() throws {
        #expect(try resolver(Self.file).settings(invocation(["usb"], config: true, source: nil)).mirrorLabel == "usb")
        let top = try resolver("source = /data\nmirror = /m\n").settings(invocation([], config: true, source: nil))
        #expect(top.mirrorLabel == "/m")
        var versions = invocation([], config: true, source: nil)
        versions.command = .versions
        #expect(message { try resolver(Self.file).settings(versions) }
                == "configuration: versions takes one mirror, not 2 (usb, nas): name one with --mirror NAME")
        #expect(message { try resolver().settings(invocation(["/a", "/b"])) }
                == "configuration: sync takes one mirror, not 2 (/a, /b): name one with --mirror NAME")
    }

    @Test("--state with several mirrors is refused; with one section selected it is that mirror's")
    func stateFlag() throws {
        var inv = invocation([], config: true, source: nil)
        inv.state = Self.b("/st/x")
        #expect(message { try resolver(Self.file).eachMirror(inv) }
                == "configuration: --state /st/x takes one mirror, not 2 (usb, nas): name one with --mirror NAME")
        inv.mirrors = [Self.b("nas")]
        #expect(try resolver(Self.file).eachMirror(inv).map(\.state) == [Self.b("/st/x")])
    }

    @Test("two mirrors that are the same directory, one inside another, or share a state or versions directory are refused, naming both")
    func mirrorsApart() {
        #expect(message { try resolver().eachMirror(invocation(["/m", "/m"])) }
                == "configuration: mirror /m and mirror /m are the same directory")
        #expect(message { try resolver().eachMirror(invocation(["box:/m", "box:/m/"])) }
                == "configuration: mirror box:/m and mirror box:/m are the same directory")
        #expect(message { try resolver().eachMirror(invocation(["/m/x", "/m"])) }
                == "configuration: mirror /m/x is inside mirror /m")
        #expect(message { try resolver().eachMirror(invocation(["/m", "/m/x"])) }
                == "configuration: mirror /m/x is inside mirror /m")
        // Remote directories are not compared for nesting (another machine's paths).
        #expect((try? resolver().eachMirror(invocation(["box:/m", "box:/m/x"])))?.count == 2)
        let sameState = "source = /data\n[mirror a]\npath = /a\nstate = /st\n\n[mirror b]\npath = /b\nstate = /st\n"
        #expect(message { try resolver(sameState).eachMirror(invocation([], config: true, source: nil)) }
                == "configuration: mirror a (/a, /c:2) and mirror b (/b, /c:6) share the state directory /st")
        let samePath = "source = /data\n[mirror a]\npath = /a\n[mirror b]\npath = /a\n"
        #expect(message { try resolver(samePath).eachMirror(invocation([], config: true, source: nil)) }
                == "configuration: mirror a (/a, /c:2) and mirror b (/a, /c:4) are the same directory")
        let stateInside = "source = /data\n[mirror a]\npath = /a\nstate = /b/st\n[mirror b]\npath = /b\n"
        #expect(message { try resolver(stateInside).eachMirror(invocation([], config: true, source: nil)) }
                == "configuration: the state directory /b/st of mirror a (/a, /c:2) is inside mirror b (/b, /c:5)")
        let versions = "source = /data\nkeep_versions = 1d\nversions_dir = /v\n[mirror a]\npath = /a\n[mirror b]\npath = /b\n"
        #expect(message { try resolver(versions).eachMirror(invocation([], config: true, source: nil)) }
                == "configuration: mirror a (/a, /c:4) and mirror b (/b, /c:6) share the versions directory /v")
    }

    @Test("an error in one section's mirror names the file, the section's line and NAME")
    func sectionErrorsNameTheSection() {
        let file = "source = /data\n[mirror ok]\npath = /ok\n[mirror bad]\npath = /data/inner\n"
        #expect(message { try resolver(file).eachMirror(invocation([], config: true, source: nil)) }
                == "configuration: /c:4: [mirror bad]: mirror /data/inner is inside source /data")
    }
}
