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

    /// Takes `i` out.
    public mutating func remove(_ i: Int) {
        let w = i >> 6
        let bit: UInt64 = 1 << UInt64(i & 63)
        guard w < words.count, words[w] & bit != 0 else { return }
        words[w] &= ~bit
        count -= 1
    }

    /// Adds every member of `other`.
    public mutating func formUnion(_ other: BitSet) {
        if other.words.count > words.count { words += Array(repeating: 0, count: other.words.count - words.count) }
        count = 0
        for w in words.indices {
            if w < other.words.count { words[w] |= other.words[w] }
            count += words[w].nonzeroBitCount
        }
    }

    /// True when `i` is a member.
    public func contains(_ i: Int) -> Bool {
        let w = i >> 6
        return w < words.count && words[w] & (1 << UInt64(i & 63)) != 0
    }
}
