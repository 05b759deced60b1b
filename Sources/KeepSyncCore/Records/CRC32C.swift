/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of the record journal.
public enum CRC32C {
    /// The 256-entry lookup table, built once.
    private static let table: [UInt32] = (0..<256).map { (n: UInt32) -> UInt32 in
        var c = n
        for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
        return c
    }

    /// The CRC-32C of `bytes`. `seed` is the checksum of the bytes before them, so
    /// `checksum(b, seed: checksum(a))` equals `checksum(a + b)`; 0 starts afresh.
    public static func checksum(_ bytes: some Collection<UInt8>, seed: UInt32 = 0) -> UInt32 {
        let table = Self.table
        var crc = ~seed
        for byte in bytes {
            crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8)
        }
        return ~crc
    }
}
