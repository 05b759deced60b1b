import Glibc
import KeepSyncCore
import KeepSyncTestSupport
import Testing

/// The commented example in etc/keepsync.conf says the same defaults as the code.
@Suite("Example configuration")
struct ExampleConfigurationTests {
    @Test("etc/keepsync.conf sets every tunable to its default")
    func exampleFileStatesTheDefaults() throws {
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
}
