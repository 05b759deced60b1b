/// The default state directory's name: a hex hash of the resolved source and mirror.
public enum StateDirectoryName {
    /// 16 hex digits of FNV-1a 64 over `source`, a NUL byte and `mirror`.
    public static func name(source: [UInt8], mirror: [UInt8]) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in source + [0] + mirror {
            h ^= UInt64(b)
            h = h &* 0x0000_0100_0000_01B3
        }
        let hex = String(h, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
