import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// The commented example in etc/keepsync.conf says the same defaults as the code.
@Suite("Example configuration")
struct ExampleConfigurationTests {
    /// The bytes of etc/keepsync.conf.
    static func exampleText() throws -> [UInt8] {
        var path = Array(#filePath.utf8)
        for _ in 0..<3 { path = Array(path[..<(path.lastIndex(of: 0x2F) ?? 0)]) }
        path += Array("/etc/keepsync.conf".utf8)
        let fd = (path.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { open($0.baseAddress!, O_RDONLY | O_CLOEXEC) }
        try #require(fd >= 0, "open \(String(decoding: path, as: UTF8.self)): errno \(errno)")
        defer { close(fd) }
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            try #require(n >= 0, "read: errno \(errno)")
            if n == 0 { break }
            text += chunk[..<n]
        }
        return text
    }

    @Test("etc/keepsync.conf sets every tunable to its default")
    func exampleFileStatesTheDefaults() throws {
        let text = try Self.exampleText()
        let parsed = try ConfigFileParser.parse(text, fileName: "keepsync.conf", home: Array("/home/ann".utf8))
        let defaults = Configuration()
        #expect(parsed.settleMilliseconds == defaults.settleMilliseconds)
        #expect(parsed.maxDelayMilliseconds == defaults.maxDelayMilliseconds)
        #expect(parsed.deleteEnabled == defaults.deleteEnabled)
        #expect(parsed.maxDeletePercent == defaults.maxDeletePercent)
        #expect(parsed.logLevel == defaults.logLevel)
        #expect(parsed.verifyIntervalSeconds == defaults.verifyIntervalSeconds)
        #expect(parsed.keepVersionsSeconds == defaults.keepVersionsSeconds)
        // A commented line shows versions_dir at its default, under the example's mirror.
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n")
        let mirror = String(decoding: try #require(parsed.mirror), as: UTF8.self)
        #expect(parsed.versionsDirectory == nil)
        #expect(lines.contains { $0 == "# versions_dir = \(mirror)/\(VersionSettings.defaultDirectoryName)" }, "no commented versions_dir")
    }

    @Test("etc/keepsync.conf shows two mirror sections, a USB disk and a host over ssh, that parse once uncommented")
    func exampleFileShowsSections() throws {
        let text = String(decoding: try Self.exampleText(), as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let first = try #require(lines.firstIndex { $0.hasPrefix("# [mirror ") }, "no commented [mirror NAME] section")
        // Without `mirror =`, the commented sections in force.
        let kept = lines[..<first].filter { !$0.hasPrefix("mirror =") }
        let sections = lines[first...].map { $0.hasPrefix("# ") ? String($0.dropFirst(2)) : $0 == "#" ? "" : $0 }
        let parsed = try ConfigFileParser.parse(Array((kept + sections).joined(separator: "\n").utf8), fileName: "keepsync.conf",
                                                home: Array("/home/ann".utf8))
        #expect(parsed.mirror == nil)
        #expect(parsed.sections.map(\.name) == ["usb", "nas"])
        let usb = try #require(parsed.sections.first), nas = try #require(parsed.sections.last)
        #expect(try RemoteTarget.parse(usb.path) == nil, "the USB disk is a local directory")
        #expect(try RemoteTarget.parse(nas.path)?.host == "nas", "the second is a host over ssh")
        #expect(nas.sshCommand != nil && usb.keepVersionsSeconds != nil)
    }
}
