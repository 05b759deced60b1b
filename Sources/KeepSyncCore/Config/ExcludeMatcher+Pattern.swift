// The compiled form of the patterns, for the matcher.
private let slash: UInt8 = 0x2F
private let backslash: UInt8 = 0x5C
private let asterisk: UInt8 = 0x2A

extension ExcludeMatcher {
    /// Why a pattern does not compile.
    struct PatternError: Error {
        let text: String
        init(_ text: String) { self.text = text }
    }

    /// 256 bits: the bytes a class accepts.
    struct ByteSet: Sendable, Equatable {
        var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0

        func contains(_ b: UInt8) -> Bool {
            let bit = UInt64(1) << UInt64(b & 63)
            switch b >> 6 {
            case 0: return w0 & bit != 0
            case 1: return w1 & bit != 0
            case 2: return w2 & bit != 0
            default: return w3 & bit != 0
            }
        }

        mutating func insert(_ b: UInt8) {
            let bit = UInt64(1) << UInt64(b & 63)
            switch b >> 6 {
            case 0: w0 |= bit
            case 1: w1 |= bit
            case 2: w2 |= bit
            default: w3 |= bit
            }
        }

        mutating func insert(_ lo: UInt8, through hi: UInt8) {
            var b = lo
            while true {
                insert(b)
                if b == hi { break }
                b += 1
            }
        }

        mutating func insert(where predicate: (UInt8) -> Bool) {
            for b in UInt8(0)...UInt8(0x7F) where predicate(b) { insert(b) }
        }

        mutating func invert() { w0 = ~w0; w1 = ~w1; w2 = ~w2; w3 = ~w3 }
    }

    /// One step of a glob inside a component.
    enum Token: Sendable, Equatable {
        case byte(UInt8)
        case anyByte
        case star
        case set(ByteSet)
    }

    /// One `/`-separated component of a pattern.
    enum Segment: Sendable, Equatable {
        /// Exactly these bytes.
        case literal([UInt8])
        /// `*` followed by these bytes (`*` alone is an empty suffix).
        case suffix([UInt8])
        /// A general glob.
        case glob([Token])
        /// `**`: zero or more components.
        case doubleStar

        func matches(_ bytes: [UInt8], _ start: Int, _ end: Int) -> Bool {
            switch self {
            case .literal(let lit):
                guard end - start == lit.count else { return false }
                var i = start, j = 0
                while j < lit.count {
                    if bytes[i] != lit[j] { return false }
                    i += 1; j += 1
                }
                return true
            case .suffix(let lit):
                guard end - start >= lit.count else { return false }
                var i = end - lit.count, j = 0
                while j < lit.count {
                    if bytes[i] != lit[j] { return false }
                    i += 1; j += 1
                }
                return true
            case .glob(let tokens):
                return Segment.glob(tokens, bytes, start, end)
            case .doubleStar:
                return true
            }
        }

        /// Greedy wildcard match with one backtrack point (correct for `*` globs).
        private static func glob(_ tokens: [Token], _ bytes: [UInt8], _ start: Int, _ end: Int) -> Bool {
            var p = 0, i = start
            var starP = -1, starI = start
            while i < end {
                if p < tokens.count {
                    switch tokens[p] {
                    case .star:
                        starP = p; starI = i; p += 1
                        continue
                    case .byte(let b) where b == bytes[i]:
                        p += 1; i += 1
                        continue
                    case .anyByte:
                        p += 1; i += 1
                        continue
                    case .set(let set) where set.contains(bytes[i]):
                        p += 1; i += 1
                        continue
                    default:
                        break
                    }
                }
                guard starP >= 0 else { return false }
                p = starP + 1
                starI += 1
                i = starI
            }
            while p < tokens.count, tokens[p] == .star { p += 1 }
            return p == tokens.count
        }
    }

    /// A compiled pattern.
    struct Pattern: Sendable {
        let segments: [Segment]
        let anchored: Bool
        let directoryOnly: Bool
        let hasDoubleStar: Bool
        /// Fewest path components that can match.
        let minComponents: Int

        init(_ raw: [UInt8]) throws {
            if raw.isEmpty { throw PatternError("empty") }
            if raw.contains(0) { throw PatternError("contains a NUL byte") }
            if raw[0] == 0x21 { throw PatternError("negation with '!' is not supported; write '\\!' for a literal '!'") }
            var body = raw[...]
            var directoryOnly = false
            if body.last == slash {
                body = body.dropLast()
                directoryOnly = true
            }
            // `\` cannot escape `/`: `a\/` is rejected rather than guessed at.
            if directoryOnly, Pattern.endsInEscape(body) { throw PatternError("dangling '\\'") }
            let anchored = body.contains(slash)
            if body.first == slash { body = body.dropFirst() }
            if body.isEmpty { throw PatternError("matches nothing") }
            let parts = body.split(separator: slash, omittingEmptySubsequences: false)
            var segments: [Segment] = []
            for part in parts {
                if part.isEmpty { throw PatternError("empty component") }
                if part.elementsEqual([0x2E]) || part.elementsEqual([0x2E, 0x2E]) {
                    throw PatternError("'.' and '..' components are not allowed")
                }
                if Pattern.endsInEscape(part) { throw PatternError("dangling '\\'") }
                if anchored, part.elementsEqual([asterisk, asterisk]) {
                    if segments.last != .doubleStar { segments.append(.doubleStar) }
                } else {
                    segments.append(try Pattern.compile(part))
                }
            }
            // A trailing `/**` matches everything below, not the directory itself: one or more.
            if anchored, segments.last == .doubleStar {
                segments.removeLast()
                segments.append(.suffix([]))
                segments.append(.doubleStar)
            }
            self.segments = segments
            self.anchored = anchored
            self.directoryOnly = directoryOnly
            self.hasDoubleStar = segments.contains(.doubleStar)
            self.minComponents = segments.reduce(0) { $1 == .doubleStar ? $0 : $0 + 1 }
        }

        /// True when the bytes end in an unescaped `\`.
        private static func endsInEscape(_ part: ArraySlice<UInt8>) -> Bool {
            var count = 0
            var i = part.endIndex
            while i > part.startIndex, part[i - 1] == backslash { count += 1; i -= 1 }
            return count % 2 == 1
        }

        /// Compiles one component into the cheapest segment that matches it.
        private static func compile(_ part: ArraySlice<UInt8>) throws -> Segment {
            var tokens: [Token] = []
            var i = part.startIndex
            while i < part.endIndex {
                let b = part[i]
                switch b {
                case backslash:
                    tokens.append(.byte(part[i + 1]))
                    i += 2
                case asterisk:
                    if tokens.last != .star { tokens.append(.star) }
                    i += 1
                case 0x3F:
                    tokens.append(.anyByte)
                    i += 1
                case 0x5B:
                    let (set, next) = try compileClass(part, from: i + 1)
                    tokens.append(.set(set))
                    i = next
                default:
                    tokens.append(.byte(b))
                    i += 1
                }
            }
            var literal: [UInt8] = []
            for token in tokens {
                guard case .byte(let b) = token else { break }
                literal.append(b)
            }
            if literal.count == tokens.count { return .literal(literal) }
            if tokens.first == .star, literal.isEmpty {
                var rest: [UInt8] = []
                for token in tokens.dropFirst() {
                    guard case .byte(let b) = token else { return .glob(tokens) }
                    rest.append(b)
                }
                return .suffix(rest)
            }
            return .glob(tokens)
        }

        /// Parses a class after its `[`; returns the set and the index after the `]`.
        private static func compileClass(_ part: ArraySlice<UInt8>, from start: Int) throws -> (ByteSet, Int) {
            var set = ByteSet()
            var i = start
            var negated = false
            if i < part.endIndex, part[i] == 0x21 || part[i] == 0x5E { negated = true; i += 1 }
            var first = true
            while true {
                guard i < part.endIndex else { throw PatternError("unterminated '['") }
                var b = part[i]
                if b == 0x5D, !first { i += 1; break }
                first = false
                if b == 0x5B, i + 1 < part.endIndex, part[i + 1] == 0x3A {
                    // [:name:]
                    var j = i + 2
                    while j + 1 < part.endIndex, !(part[j] == 0x3A && part[j + 1] == 0x5D) { j += 1 }
                    guard j + 1 < part.endIndex else { throw PatternError("unterminated '[:'") }
                    let name = String(decoding: part[(i + 2)..<j], as: UTF8.self)
                    guard let predicate = posixClass(name) else { throw PatternError("unknown class '[:\(name):]'") }
                    set.insert(where: predicate)
                    i = j + 2
                    continue
                }
                if b == backslash {
                    guard i + 1 < part.endIndex else { throw PatternError("unterminated '['") }
                    i += 1
                    b = part[i]
                }
                i += 1
                // A range `b-c`, unless `-` is last before `]`.
                if i + 1 < part.endIndex, part[i] == 0x2D, part[i + 1] != 0x5D {
                    var hi = part[i + 1]
                    i += 2
                    if hi == backslash {
                        guard i < part.endIndex else { throw PatternError("unterminated '['") }
                        hi = part[i]
                        i += 1
                    }
                    guard b <= hi else { throw PatternError("reversed range in '['") }
                    set.insert(b, through: hi)
                } else {
                    set.insert(b)
                }
            }
            if negated { set.invert() }
            return (set, i)
        }

        private static func posixClass(_ name: String) -> ((UInt8) -> Bool)? {
            func isUpper(_ b: UInt8) -> Bool { b >= 0x41 && b <= 0x5A }
            func isLower(_ b: UInt8) -> Bool { b >= 0x61 && b <= 0x7A }
            func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
            func isGraph(_ b: UInt8) -> Bool { b > 0x20 && b < 0x7F }
            switch name {
            case "alpha": return { isUpper($0) || isLower($0) }
            case "alnum": return { isUpper($0) || isLower($0) || isDigit($0) }
            case "digit": return isDigit
            case "lower": return isLower
            case "upper": return isUpper
            case "xdigit": return { isDigit($0) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }
            case "space": return { $0 == 0x20 || ($0 >= 0x09 && $0 <= 0x0D) }
            case "blank": return { $0 == 0x20 || $0 == 0x09 }
            case "punct": return { isGraph($0) && !isUpper($0) && !isLower($0) && !isDigit($0) }
            case "graph": return isGraph
            case "print": return { $0 >= 0x20 && $0 < 0x7F }
            case "cntrl": return { $0 < 0x20 || $0 == 0x7F }
            default: return nil
            }
        }

        /// Does the path `bytes[0..<end]` (non-empty) match?
        func matches(_ bytes: [UInt8], end: Int, isDirectory: Bool) -> Bool {
            if directoryOnly && !isDirectory { return false }
            if !anchored {
                var start = end
                while start > 0, bytes[start - 1] != slash { start -= 1 }
                return segments[0].matches(bytes, start, end)
            }
            return matchAnchored(bytes, end: end)
        }

        /// Does the path or one of its ancestors match?
        func matchesSelfOrAncestor(_ bytes: [UInt8], isDirectory: Bool) -> Bool {
            let count = bytes.count
            if !anchored {
                let segment = segments[0]
                var start = 0
                while start < count {
                    var end = start
                    while end < count, bytes[end] != slash { end += 1 }
                    let isDir = end < count || isDirectory
                    if (isDir || !directoryOnly), segment.matches(bytes, start, end) { return true }
                    start = end + 1
                }
                return false
            }
            if !hasDoubleStar { return matchFixedPrefix(bytes, isDirectory: isDirectory) }
            var components = 0
            var end = 0
            while end <= count {
                if end == count || bytes[end] == slash {
                    components += 1
                    let isDir = end < count || isDirectory
                    if components >= minComponents, isDir || !directoryOnly, matchAnchored(bytes, end: end) {
                        return true
                    }
                }
                end += 1
            }
            return false
        }

        /// Anchored, no `**`: the first `segments.count` components must match.
        private func matchFixedPrefix(_ bytes: [UInt8], isDirectory: Bool) -> Bool {
            let count = bytes.count
            var start = 0
            for segment in segments {
                if start > count { return false }
                var end = start
                while end < count, bytes[end] != slash { end += 1 }
                if !segment.matches(bytes, start, end) { return false }
                start = end + 1
            }
            // All matched; `start > count` means the whole path matched.
            return start <= count || isDirectory || !directoryOnly
        }

        /// Anchored match of the components of `bytes[0..<end]`; `**` via greedy backtracking.
        private func matchAnchored(_ bytes: [UInt8], end: Int) -> Bool {
            var p = 0
            var pos = 0
            var starP = -1, starPos = 0
            while pos <= end {
                var compEnd = pos
                while compEnd < end, bytes[compEnd] != slash { compEnd += 1 }
                if p < segments.count {
                    let segment = segments[p]
                    if case .doubleStar = segment {
                        starP = p; starPos = pos; p += 1
                        continue
                    }
                    if segment.matches(bytes, pos, compEnd) {
                        p += 1
                        pos = compEnd + 1
                        continue
                    }
                }
                guard starP >= 0 else { return false }
                // Let the last `**` absorb one more component.
                var next = starPos
                while next < end, bytes[next] != slash { next += 1 }
                starPos = next + 1
                p = starP + 1
                pos = starPos
            }
            while p < segments.count, case .doubleStar = segments[p] { p += 1 }
            return p == segments.count
        }
    }
}
