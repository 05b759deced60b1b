/// keepsync's temp file names: `.keepsync-tmp-` followed by 16 lower-case hex digits.
public enum TemporaryName {
    /// The prefix.
    public static let prefix: [UInt8] = Array(".keepsync-tmp-".utf8)

    /// A fresh temp name (16 random hex digits).
    public static func random() -> [UInt8] {
        let hex = Array("0123456789abcdef".utf8)
        var value = UInt64.random(in: 0...UInt64.max)
        var digits: [UInt8] = []
        for _ in 0..<16 {
            digits.append(hex[Int(value & 0xF)])
            value >>= 4
        }
        return prefix + digits
    }

    /// True when `name` is exactly a keepsync temp name.
    public static func matches(_ name: [UInt8]) -> Bool {
        guard name.count == prefix.count + 16, name.starts(with: prefix) else { return false }
        return name[prefix.count...].allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}
