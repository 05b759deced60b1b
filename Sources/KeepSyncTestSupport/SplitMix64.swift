/// Seeded random numbers for tests: SplitMix64 (Steele, Lea, Flood 2014). Small, fast,
/// and the same on every platform and Swift version, unlike `SystemRandomNumberGenerator`
/// or the standard library's unspecified `random(in:using:)` algorithms: a seed replays
/// the same run anywhere.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    /// The generator's state; the next number is a function of it alone.
    public var state: UInt64

    /// A generator starting at `seed`.
    @inlinable public init(seed: UInt64) { state = seed }

    /// A generator for an independent stream of the same seed (faults, crash debris).
    @inlinable public init(seed: UInt64, stream: UInt64) {
        state = SplitMix64.mix(seed ^ (stream &* 0xD1B5_4A32_D192_ED03))
    }

    /// The next number.
    @inlinable public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return SplitMix64.mix(state)
    }

    /// The SplitMix64 finalizer: a good 64-bit mix, also used to hash (seed, key) pairs.
    @inlinable public static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in `0 ..< bound` (bound > 0), by Lemire's multiply-shift (bias < 2^-32 here).
    @inlinable public mutating func below(_ bound: Int) -> Int {
        precondition(bound > 0)
        return Int(((next() >> 32) &* UInt64(bound)) >> 32)
    }

    /// Uniform in the closed range.
    @inlinable public mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + below(range.upperBound - range.lowerBound + 1)
    }

    /// True with probability `p`.
    @inlinable public mutating func chance(_ p: Double) -> Bool { unit() < p }

    /// Uniform in [0, 1).
    @inlinable public mutating func unit() -> Double { Double(next() >> 11) * 0x1p-53 }

    /// One element (the collection must not be empty).
    @inlinable public mutating func pick<C: RandomAccessCollection>(_ c: C) -> C.Element where C.Index == Int {
        c[c.startIndex + below(c.count)]
    }

    /// An index chosen in proportion to `weights`.
    @inlinable public mutating func weighted(_ weights: [Int]) -> Int {
        var r = below(weights.reduce(0, +))
        for (i, w) in weights.enumerated() {
            if r < w { return i }
            r -= w
        }
        return weights.count - 1
    }

    /// `count` random bytes, eight from each number, low byte first.
    @inlinable public mutating func bytes(_ count: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count + 8)
        while out.count < count {
            var word = next()
            for _ in 0..<8 { out.append(UInt8(truncatingIfNeeded: word)); word >>= 8 }
        }
        out.removeLast(out.count - count)
        return out
    }

    /// A uniform value in [0, 1) from a hash of `words`: the same inputs give the same
    /// answer whatever order the questions are asked in.
    @inlinable public static func hashUnit(_ words: [UInt64]) -> Double {
        var h: UInt64 = 0x243F_6A88_85A3_08D3
        for w in words { h = mix(h ^ w) }
        return Double(h >> 11) * 0x1p-53
    }

    /// FNV-1a of bytes, folded into a word for `hashUnit`.
    @inlinable public static func fold(_ bytes: [UInt8]) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        return h
    }
}
