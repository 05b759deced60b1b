import KeepSyncCore
import Testing

/// Names in the versions directory (SPEC "Versions", issue 40 item 6): the tag before the
/// extension, bytes kept as bytes, the 255-byte limit, and each name read back.
@Suite("Version names")
struct VersionNameTests {
    static func b(_ s: String) -> [UInt8] { Array(s.utf8) }
    /// 2026-12-07 01:30:00 UTC.
    static let t: Int64 = 1_796_607_000

    static func name(_ original: [UInt8], sequence: Int = 1, directory: Bool = false, at seconds: Int64 = t) -> [UInt8] {
        VersionName(original: original, seconds: seconds, sequence: sequence, isDirectory: directory).bytes
    }

    @Test("the tag goes before the extension; after a name without one, a dot-file's name, a directory's")
    func placement() {
        let cases: [(String, String, Bool)] = [
            ("report.odt", "report~20261207-013000Z.odt", false),
            ("archive.tar.gz", "archive.tar~20261207-013000Z.gz", false),
            ("Makefile", "Makefile~20261207-013000Z", false),
            (".bashrc", ".bashrc~20261207-013000Z", false),
            (".config.json", ".config~20261207-013000Z.json", false),
            ("trailing.", "trailing.~20261207-013000Z", false),
            ("photos.2020", "photos.2020~20261207-013000Z", true),
            ("a." + String(repeating: "x", count: 17), "a." + String(repeating: "x", count: 17) + "~20261207-013000Z", false),
        ]
        for (original, expected, directory) in cases {
            #expect(Self.name(Self.b(original), directory: directory) == Self.b(expected), "\(original)")
        }
        #expect(Self.name(Self.b("report.odt"), sequence: 2) == Self.b("report~20261207-013000Z-2.odt"))
        #expect(Self.name([0xFF, 0x2E, 0x61]) == [0xFF] + Self.b("~20261207-013000Z.a"), "bytes stay bytes")
    }

    @Test("civil time: a leap day, the last second before the epoch, the epoch")
    func civilTime() {
        #expect(Self.name(Self.b("x"), at: 1_709_251_199) == Self.b("x~20240229-235959Z"))
        #expect(Self.name(Self.b("x"), at: -2) == Self.b("x~19691231-235958Z"))
        #expect(Self.name(Self.b("x"), at: 0) == Self.b("x~19700101-000000Z"))
    }

    @Test("a name whose tagged form would pass 255 bytes loses the end of its stem, never inside a UTF-8 character, and keeps tag and extension")
    func longNames() {
        let long = Self.name(Self.b(String(repeating: "s", count: 250) + ".txt"))
        #expect(long.count == 255 && long.suffix(21) == Self.b("~20261207-013000Z.txt")[...], "\(long.count)")
        // 2-byte characters: 119 of them (238 bytes) fit beside the tag and extension, not 119.5.
        let accented = Self.name(Array(String(repeating: "é", count: 130).utf8) + Self.b(".txt"), sequence: 12)
        #expect(accented.count <= 255)
        #expect(String(validating: accented, as: UTF8.self) != nil, "valid UTF-8: \(accented.count) bytes")
        #expect(accented.suffix(24) == Self.b("~20261207-013000Z-12.txt")[...])
    }

    @Test("every name reads back: original, time and sequence; a name without a tag, or with an impossible date, is none")
    func parsing() {
        for (original, sequence, directory) in [("report.odt", 1, false), ("report.odt", 3, false), ("Makefile", 1, false),
                                                (".bashrc", 2, false), ("photos.2020", 1, true), ("a~b.c", 1, false)] {
            let made = VersionName(original: Self.b(original), seconds: Self.t, sequence: sequence, isDirectory: directory)
            let read = VersionName(parsing: made.bytes, isDirectory: directory)
            #expect(read == made, "\(original): \(String(decoding: made.bytes, as: UTF8.self))")
        }
        #expect(VersionName(parsing: Self.b("report.odt")) == nil)
        #expect(VersionName(parsing: Self.b("x~20261307-000000Z")) == nil, "month 13")
        #expect(VersionName(parsing: Self.b("x~20261207-013000Z.a.b")) == nil, "the tag is before the last extension only")
    }
}
