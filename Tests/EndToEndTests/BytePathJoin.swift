/// Path joining on byte strings: `root / "dir" / name`.
extension Array where Element == UInt8 {
    /// Joins two byte paths with `/`.
    static func / (lhs: [UInt8], rhs: [UInt8]) -> [UInt8] { lhs.isEmpty ? rhs : lhs + [0x2F] + rhs }
    /// Joins a byte path and a UTF-8 relative path with `/`.
    static func / (lhs: [UInt8], rhs: String) -> [UInt8] { lhs / Array(rhs.utf8) }
}
