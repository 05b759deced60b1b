import Foundation
import Testing
@testable import KeepSyncCore

@Suite("ServiceUnit")
struct ServiceUnitTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("the repository's unit files are the rendered units", arguments: [false, true])
    func repositoryFilesMatch(template: Bool) throws {
        let name = template ? "keepsync@.service" : "keepsync.service"
        let url = Self.repository.appendingPathComponent("systemd").appendingPathComponent(name)
        let rendered = ServiceUnit.render(template: template)
        if ProcessInfo.processInfo.environment["KEEPSYNC_WRITE_UNITS"] == "1" {
            try rendered.write(to: url, atomically: true, encoding: .utf8)
        }
        let onDisk = try String(contentsOf: url, encoding: .utf8)
        #expect(onDisk == rendered, "regenerate with KEEPSYNC_WRITE_UNITS=1 swift test --filter ServiceUnit")
    }

    @Test("a unit is Type=notify with a reload by SIGHUP, a watchdog and a restart on failure", arguments: [false, true])
    func essentials(template: Bool) {
        let text = ServiceUnit.render(executable: "/opt/bin/keepsync", template: template)
        let lines = Set(text.split(separator: "\n").map(String.init))
        #expect(lines.contains("Type=notify"))
        #expect(lines.contains("ExecReload=kill -HUP $MAINPID"))
        #expect(lines.contains("Restart=on-failure"))
        #expect(lines.contains { $0.hasPrefix("WatchdogSec=") })
        #expect(lines.contains { $0.hasPrefix("TimeoutStopSec=") })
        #expect(lines.contains("WantedBy=default.target"))
        if template {
            #expect(lines.contains("ExecStart=/opt/bin/keepsync run --config %E/keepsync/%i.conf"))
        } else {
            #expect(lines.contains("ExecStart=/opt/bin/keepsync run"))
        }
    }
}
