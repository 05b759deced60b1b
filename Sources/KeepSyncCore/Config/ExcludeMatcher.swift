/// gitignore-style exclude globs over relative paths, compiled once and matched on bytes.
///
/// A pattern without `/` (other than a trailing one) matches a name at any depth; one with
/// `/` is anchored at the root (a leading `/` anchors and is dropped). `*` and `?` never
/// cross `/`; `[abc]`, `[a-z]`, `[!x]` (or `[^x]`) and `[[:alpha:]]` are byte classes; `\`
/// escapes the next byte; a `**` component matches zero or more directories, and a trailing
/// `/**` everything below (not the directory itself); a trailing `/` matches directories
/// only. `**` inside a component acts as `*`. Negation (`!pat`) is not supported.
public struct ExcludeMatcher: Sendable, Equatable {
    /// The patterns as given.
    public let patterns: [[UInt8]]
    private let compiled: [Pattern]

    /// A pattern that matches `path` alone, anchored at the root: its glob bytes (`*`,
    /// `?`, `[`, `\`) escaped.
    public static func literal(_ path: RelativePath) -> [UInt8] {
        var out: [UInt8] = [0x2F]
        for b in path.bytes {
            if b == 0x2A || b == 0x3F || b == 0x5B || b == 0x5C { out.append(0x5C) }
            out.append(b)
        }
        return out
    }

    /// A matcher that excludes nothing.
    public static let none = ExcludeMatcher(patterns: [], compiled: [])

    /// Compiles `patterns`; throws `.configuration` naming the first bad one.
    public init(patterns: [[UInt8]]) throws {
        var compiled: [Pattern] = []
        compiled.reserveCapacity(patterns.count)
        for pattern in patterns {
            do {
                compiled.append(try Pattern(pattern))
            } catch let reason as PatternError {
                let text = ByteEscaping.escapeControls(pattern)
                throw KeepSyncError(.configuration, "bad exclude pattern '\(text)': \(reason.text)")
            }
        }
        self.init(patterns: patterns, compiled: compiled)
    }

    private init(patterns: [[UInt8]], compiled: [Pattern]) {
        self.patterns = patterns
        self.compiled = compiled
    }

    /// True when no pattern is set.
    public var isEmpty: Bool { compiled.isEmpty }

    /// True when `path` itself matches a pattern. The root never matches.
    public func matches(_ path: RelativePath, isDirectory: Bool) -> Bool {
        let bytes = path.bytes
        if bytes.isEmpty { return false }
        for pattern in compiled where pattern.matches(bytes, end: bytes.count, isDirectory: isDirectory) {
            return true
        }
        return false
    }

    /// True when `path` or one of its ancestors (directories) matches a pattern.
    public func excludes(_ path: RelativePath, isDirectory: Bool) -> Bool {
        let bytes = path.bytes
        if bytes.isEmpty || compiled.isEmpty { return false }
        for pattern in compiled where pattern.matchesSelfOrAncestor(bytes, isDirectory: isDirectory) {
            return true
        }
        return false
    }

    /// Equal when the patterns are equal.
    public static func == (lhs: ExcludeMatcher, rhs: ExcludeMatcher) -> Bool {
        lhs.patterns == rhs.patterns
    }
}
