/// The name a replaced or deleted entry gets in the versions directory: its own name
/// with `~` + the UTC time it was replaced (`YYYYMMDD-HHMMSS` + `Z`) inserted before the
/// extension (`report~20261207-013000Z.odt`), after the whole name for a directory, a
/// name without an extension or one that starts with its only dot (`.bashrc~…Z`); `-2`,
/// `-3` … after the `Z` when one second holds more. Names are bytes; one whose tagged
/// form would pass 255 bytes keeps its tag and extension and loses the end of its stem
/// (never inside a UTF-8 character).
public struct VersionName: Sendable, Hashable {
    /// The entry's own name (the last component of its path).
    public var original: [UInt8]
    /// When it was replaced, seconds since the epoch (UTC).
    public var seconds: Int64
    /// 1 for the first version in that second, 2 for `-2`, …
    public var sequence: Int
    /// A directory's name takes its tag at the end.
    public var isDirectory: Bool

    /// A version of `original` replaced at `seconds`.
    public init(original: [UInt8], seconds: Int64, sequence: Int = 1, isDirectory: Bool = false) {
        precondition(sequence >= 1)
        self.original = original
        self.seconds = seconds
        self.sequence = sequence
        self.isDirectory = isDirectory
    }

    /// The longest name most file systems take.
    public static let maximumBytes = 255
    /// The longest extension kept apart (`.jpeg`, `.torrent`); a longer "extension" is
    /// part of the stem.
    static let maximumExtension = 16

    /// `~20261207-013000Z`, and `-N` for a later one in the same second.
    public var tag: [UInt8] {
        let (year, month, day, hour, minute, second) = Self.civil(seconds)
        func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
        var text = "~\(String(repeating: "0", count: max(0, 4 - String(year).count)))\(year)\(two(month))\(two(day))"
        text += "-\(two(hour))\(two(minute))\(two(second))Z"
        if sequence > 1 { text += "-\(sequence)" }
        return Array(text.utf8)
    }

    /// The versioned name (at most `maximumBytes` when the tag and extension fit).
    public var bytes: [UInt8] {
        var (stem, ext) = isDirectory ? (original, []) : Self.split(original)
        let tag = tag
        let room = Self.maximumBytes - tag.count - ext.count
        if stem.count > room { stem = Self.truncated(stem, to: max(1, room)) }
        return stem + tag + ext
    }

    /// The names of every sequence as a pattern, for a remote shell that picks the first
    /// free one: `head + tail` for the first, `head + "-N" + tail` for the Nth (the stem
    /// cut to leave room for `-9999`, so a long name's first version may be a few bytes
    /// shorter than `bytes`; both read back the same).
    public var pattern: (head: [UInt8], tail: [UInt8]) {
        var (stem, ext) = isDirectory ? (original, []) : Self.split(original)
        let tag = VersionName(original: original, seconds: seconds, isDirectory: isDirectory).tag
        let room = Self.maximumBytes - tag.count - ext.count - 5
        if stem.count > room { stem = Self.truncated(stem, to: max(1, room)) }
        return (stem + tag, ext)
    }

    /// Stem and extension (with its dot): the last dot that is neither the first byte nor
    /// followed by nothing, when what follows is at most `maximumExtension` bytes.
    static func split(_ name: [UInt8]) -> (stem: [UInt8], ext: [UInt8]) {
        guard let dot = name.lastIndex(of: 0x2E), dot > 0, dot < name.count - 1,
              name.count - dot - 1 <= maximumExtension else { return (name, []) }
        return (Array(name[..<dot]), Array(name[dot...]))
    }

    /// The first `count` bytes of `stem`, fewer so as not to cut a UTF-8 character.
    static func truncated(_ stem: [UInt8], to count: Int) -> [UInt8] {
        var end = min(count, stem.count)
        // Back over continuation bytes (10xxxxxx) to the start of the character they belong to.
        while end > 0, end < stem.count, stem[end] & 0xC0 == 0x80 { end -= 1 }
        return Array(stem[..<(end > 0 ? end : min(count, stem.count))])
    }

    /// A name of the versions directory read back: the original name (less any stem cut
    /// short), the time and sequence; nil when it carries no tag.
    public init?(parsing name: [UInt8], isDirectory: Bool = false) {
        // The tag is the last `~` followed by 8 digits, `-`, 6 digits and `Z`.
        var at = name.count - 1
        while at >= 0 {
            if name[at] == 0x7E, let (seconds, length) = Self.parseTag(name, at + 1) {
                var end = at + 1 + length
                var sequence = 1
                if end < name.count, name[end] == 0x2D {
                    var digits = end + 1
                    while digits < name.count, (0x30...0x39).contains(name[digits]) { digits += 1 }
                    if digits > end + 1, let n = Int(String(decoding: name[(end + 1)..<digits], as: UTF8.self)), n >= 2 {
                        sequence = n
                        end = digits
                    }
                }
                let rest = Array(name[end...])
                let plain = rest.isEmpty || (!isDirectory && rest.first == 0x2E && rest.count >= 2
                                              && rest.count - 1 <= Self.maximumExtension && !rest.dropFirst().contains(0x2E))
                if plain {
                    self.init(original: Array(name[..<at]) + rest, seconds: seconds, sequence: sequence, isDirectory: isDirectory)
                    return
                }
            }
            at -= 1
        }
        return nil
    }

    /// `YYYYMMDD-HHMMSSZ` at `start`: the seconds it names and its length.
    static func parseTag(_ name: [UInt8], _ start: Int) -> (Int64, Int)? {
        let length = 16
        guard start + length <= name.count, name[start + 8] == 0x2D, name[start + 15] == 0x5A else { return nil }
        func number(_ from: Int, _ count: Int) -> Int? {
            var v = 0
            for b in name[(start + from)..<(start + from + count)] {
                guard (0x30...0x39).contains(b) else { return nil }
                v = v * 10 + Int(b - 0x30)
            }
            return v
        }
        guard let year = number(0, 4), let month = number(4, 2), let day = number(6, 2), let hour = number(9, 2),
              let minute = number(11, 2), let second = number(13, 2), (1...12).contains(month), (1...31).contains(day),
              hour < 24, minute < 60, second < 61 else { return nil }
        let days = Self.days(year: year, month: month, day: day)
        return (Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second), length)
    }

    // MARK: Civil time (proleptic Gregorian, UTC)

    /// Days since 1970-01-01 of a date.
    static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The UTC date and time of `seconds` since the epoch.
    static func civil(_ seconds: Int64) -> (Int, Int, Int, Int, Int, Int) {
        var days = Int(seconds / 86_400)
        var rest = Int(seconds % 86_400)
        if rest < 0 {
            rest += 86_400
            days -= 1
        }
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day, rest / 3600, rest % 3600 / 60, rest % 60)
    }
}
