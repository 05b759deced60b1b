/// A set of small non-negative integers, one bit each.
public struct BitSet: Sendable, Equatable {
    private var words: [UInt64] = []
    /// Members.
    public private(set) var count = 0

    /// An empty set.
    public init() {}

    /// Adds `i`.
    public mutating func insert(_ i: Int) {
        let w = i >> 6
        if w >= words.count { words += Array(repeating: 0, count: w - words.count + 1) }
        let bit: UInt64 = 1 << UInt64(i & 63)
        if words[w] & bit == 0 {
            words[w] |= bit
            count += 1
        }
    }

    /// True when `i` is a member.
    public func contains(_ i: Int) -> Bool {
        let w = i >> 6
        return w < words.count && words[w] & (1 << UInt64(i & 63)) != 0
    }
}
