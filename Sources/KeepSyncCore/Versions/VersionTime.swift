/// The machine's local time zone, as far as keepsync needs it: the offset from UTC at a
/// moment (Linux: `localtime_r`'s `tm_gmtoff`).
public struct LocalZone: Sendable {
    /// Seconds east of UTC at a moment (seconds since the epoch).
    public let offset: @Sendable (Int64) -> Int

    /// A zone given by its offsets.
    public init(offset: @escaping @Sendable (Int64) -> Int) { self.offset = offset }

    /// UTC.
    public static let utc = LocalZone { _ in 0 }

    /// The moment a local wall-clock reading (as if it were UTC) names; a reading that a
    /// clock change skips or repeats gets one of the moments next to it.
    public func moment(localAsUTC local: Int64) -> Int64 {
        let guess = local - Int64(offset(local))
        let second = local - Int64(offset(guess))
        return Int64(offset(second)) == local - second ? second : max(guess, second)
    }
}

/// `--at TIME` (`restore`): an instant, given as ISO 8601 (`2026-12-07T01:30:00Z`, with an
/// offset, or local without one; `T` or a space; seconds optional) or as a duration
/// before now (`2h ago`, `30m ago`, `3d ago`; units s, m, h, d, w).
public enum VersionTime: Sendable, Equatable {
    /// Seconds since the epoch.
    case instant(Int64)
    /// A local wall-clock reading, in seconds as if it were UTC.
    case local(Int64)
    /// This many seconds before now.
    case ago(Int64)

    /// What `--at` expects, after `--at: `.
    public static let expectation = "expected a time like 2026-12-07T01:30:00Z, '2026-12-07 01:30' (local) or '2h ago'"

    /// Parses a `--at` value; nil when it is none of the forms.
    public init?(parsing value: [UInt8]) {
        let text = String(decoding: value, as: UTF8.self)
        if text.hasSuffix(" ago") {
            let amount = Array(text.dropLast(4).utf8).filter { $0 != 0x20 }
            guard case .success(let seconds) = ConfigFileParser.duration(amount), seconds > 0 else { return nil }
            self = .ago(Int64(seconds))
            return
        }
        guard let parsed = Self.iso(value) else { return nil }
        self = parsed
    }

    /// The instant, seconds since the epoch, given the time now and the local zone.
    public func resolved(now: Int64, zone: LocalZone) -> Int64 {
        switch self {
        case .instant(let s): return s
        case .local(let s): return zone.moment(localAsUTC: s)
        case .ago(let s): return now - s
        }
    }

    /// `YYYY-MM-DD[T ]HH:MM[:SS[.fraction]][Z|±HH[:]MM|±HH]`.
    static func iso(_ b: [UInt8]) -> VersionTime? {
        var i = 0
        func digits(_ count: Int) -> Int? {
            guard i + count <= b.count else { return nil }
            var v = 0
            for byte in b[i..<(i + count)] {
                guard (0x30...0x39).contains(byte) else { return nil }
                v = v * 10 + Int(byte - 0x30)
            }
            i += count
            return v
        }
        func take(_ byte: UInt8) -> Bool {
            guard i < b.count, b[i] == byte else { return false }
            i += 1
            return true
        }
        guard let year = digits(4), take(0x2D), let month = digits(2), take(0x2D), let day = digits(2),
              take(0x54) || take(0x20) || take(0x74), let hour = digits(2), take(0x3A), let minute = digits(2) else { return nil }
        var second = 0
        if take(0x3A) {
            guard let s = digits(2) else { return nil }
            second = s
            // A fraction: versions are tagged to the second, so it is dropped (at or before).
            if take(0x2E) || take(0x2C) {
                let start = i
                while i < b.count, (0x30...0x39).contains(b[i]) { i += 1 }
                guard i > start else { return nil }
            }
        }
        guard (1...12).contains(month), (1...Self.daysIn(month, year)).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        let wall = Int64(VersionName.days(year: year, month: month, day: day)) * 86_400
            + Int64(hour * 3600 + minute * 60 + second)
        if i == b.count { return .local(wall) }
        if take(0x5A) || take(0x7A) { return i == b.count ? .instant(wall) : nil }
        let sign: Int64
        if take(0x2B) { sign = 1 } else if take(0x2D) { sign = -1 } else { return nil }
        guard let oh = digits(2) else { return nil }
        var om = 0
        if i < b.count {
            _ = take(0x3A)
            guard let m = digits(2) else { return nil }
            om = m
        }
        guard i == b.count, oh <= 18, om < 60 else { return nil }
        return .instant(wall - sign * Int64(oh * 3600 + om * 60))
    }

    static func daysIn(_ month: Int, _ year: Int) -> Int {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // MARK: Printing

    /// `2026-12-07T01:30:00Z`.
    public static func iso(_ seconds: Int64) -> String {
        let (y, mo, d, h, mi, s) = VersionName.civil(seconds)
        return "\(four(y))-\(two(mo))-\(two(d))T\(two(h)):\(two(mi)):\(two(s))Z"
    }

    /// `2026-12-07 02:30:00 +0100`: local time with its offset.
    public static func local(_ seconds: Int64, zone: LocalZone) -> String {
        let offset = zone.offset(seconds)
        let (y, mo, d, h, mi, s) = VersionName.civil(seconds + Int64(offset))
        let magnitude = abs(offset) / 60
        return "\(four(y))-\(two(mo))-\(two(d)) \(two(h)):\(two(mi)):\(two(s)) \(offset < 0 ? "-" : "+")\(two(magnitude / 60))\(two(magnitude % 60))"
    }

    static func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
    static func four(_ v: Int) -> String { String(repeating: "0", count: max(0, 4 - String(v).count)) + String(v) }
}
