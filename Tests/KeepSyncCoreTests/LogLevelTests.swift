import Testing
@testable import KeepSyncCore

@Suite("LogLevel")
struct LogLevelTests {
    @Test("levels order from least to most verbose")
    func ordering() {
        #expect(LogLevel.error < .warning)
        #expect(LogLevel.warning < .info)
        #expect(LogLevel.info < .debug)
        #expect(LogLevel.allCases.sorted() == [.error, .warning, .info, .debug])
    }

    @Test("names parse and print", arguments: [
        ("error", LogLevel.error), ("warning", .warning), ("info", .info), ("debug", .debug),
    ])
    func names(_ name: String, _ level: LogLevel) {
        #expect(LogLevel(name: name) == level)
        #expect(LogLevel(bytes: Array(name.utf8)) == level)
        #expect(level.name == name)
        #expect("\(level)" == name)
    }

    @Test("other words do not parse", arguments: ["", "warn", "Info", "DEBUG", "trace", " info"])
    func badNames(_ name: String) {
        #expect(LogLevel(name: name) == nil)
    }
}
