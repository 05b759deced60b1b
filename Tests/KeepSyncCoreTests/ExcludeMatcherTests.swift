import Testing
@testable import KeepSyncCore
import KeepSyncTestSupport

@Suite("ExcludeMatcher")
struct ExcludeMatcherTests {
    /// One row: a pattern, a path, whether the path is a directory, the expected answer.
    struct Case: Sendable, CustomTestStringConvertible {
        let pattern: [UInt8]
        let path: [UInt8]
        let isDirectory: Bool
        let expected: Bool

        init(_ pattern: String, _ path: String, dir: Bool = false, _ expected: Bool) {
            self.init(Array(pattern.utf8), Array(path.utf8), dir: dir, expected)
        }

        init(_ pattern: [UInt8], _ path: [UInt8], dir: Bool = false, _ expected: Bool) {
            self.pattern = pattern
            self.path = path
            self.isDirectory = dir
            self.expected = expected
        }

        var testDescription: String {
            "'\(ByteEscaping.escape(pattern))' \(expected ? "matches" : "does not match") "
                + "\(isDirectory ? "dir" : "file") '\(ByteEscaping.escape(path))'"
        }
    }

    static let matchCases: [Case] = [
        // A name without `/` matches at any depth.
        Case("*.o", "a.o", true),
        Case("*.o", "src/a.o", true),
        Case("*.o", "src/deep/x.o", true),
        Case("*.o", "a.oo", false),
        Case("*.o", "a.o/b", false),
        Case("*.o", "ao", false),
        Case("core", "core", true),
        Case("core", "x/y/core", true),
        Case("core", "x/core.c", false),
        Case("core", "corex", false),
        Case("core", "core/x", false),
        Case("*", ".hidden", true),
        Case("**", "x/y", true),
        Case("a**b", "axyb", true),
        Case("a**b", "ax/yb", false),
        // A trailing `/` matches directories only; it does not anchor.
        Case("node_modules/", "node_modules", dir: true, true),
        Case("node_modules/", "a/b/node_modules", dir: true, true),
        Case("node_modules/", "node_modules", false),
        Case("node_modules/", "a/node_modules", false),
        // A `/` inside anchors at the root.
        Case("build/cache", "build/cache", true),
        Case("build/cache", "build/cache", dir: true, true),
        Case("build/cache", "x/build/cache", false),
        Case("build/cache", "build/cache/y", false),
        Case("build/cache", "build", dir: true, false),
        Case("/TODO", "TODO", true),
        Case("/TODO", "a/TODO", false),
        Case("/build/", "build", dir: true, true),
        Case("/build/", "build", false),
        Case("/build/", "src/build", dir: true, false),
        Case("out/bin/", "out/bin", dir: true, true),
        Case("out/bin/", "out/bin", false),
        // `*` and `?` never cross `/`.
        Case("doc/*.txt", "doc/a.txt", true),
        Case("doc/*.txt", "doc/sub/a.txt", false),
        Case("a/*/c", "a/b/c", true),
        Case("a/*/c", "a/b/x/c", false),
        Case("a?c", "abc", true),
        Case("a?c", "a/c", false),
        Case("x/a?c", "x/a/c", false),
        Case("d/a*b", "d/axyb", true),
        Case("d/a*b", "d/ax/yb", false),
        Case("a*b", "ax/yb", false),
        Case("*a*b*c", "xaybzc", true),
        Case("*a*b*c", "xaybzcq", false),
        Case("a*a*a*a", "aaaa", true),
        Case("a*a*a*a", "aaa", false),
        // `**` components.
        Case("**/foo", "foo", true),
        Case("**/foo", "a/foo", true),
        Case("**/foo", "a/b/foo", true),
        Case("**/foo", "foox", false),
        Case("**/foo", "foo/x", false),
        Case("**/foo/bar", "foo/bar", true),
        Case("**/foo/bar", "x/y/foo/bar", true),
        Case("**/foo/bar", "foo/x/bar", false),
        Case("a/**/b", "a/b", true),
        Case("a/**/b", "a/x/b", true),
        Case("a/**/b", "a/x/y/b", true),
        Case("a/**/b", "a/xb", false),
        Case("a/**/b", "b", false),
        Case("a/**/b", "x/a/b", false),
        Case("a/**/b", "a/b/c", false),
        Case("a/**/**/b", "a/b", true),
        Case("a/**/b/**/c", "a/b/c", true),
        Case("a/**/b/**/c", "a/x/b/y/z/c", true),
        Case("a/**/b/**/c", "a/b/x", false),
        Case("a/**/*.o", "a/x.o", true),
        Case("a/**/*.o", "a/b/c/x.o", true),
        Case("a/**/*.o", "b/x.o", false),
        Case("abc/**", "abc", dir: true, false),
        Case("abc/**", "abc/x", true),
        Case("abc/**", "abc/x/y", dir: true, true),
        Case("abc/**", "abcd/x", false),
        Case("**/*.tmp/", "x/a.tmp", dir: true, true),
        Case("**/*.tmp/", "a.tmp", dir: true, true),
        Case("**/*.tmp/", "x/a.tmp", false),
        // Classes.
        Case("[abc].txt", "a.txt", true),
        Case("[abc].txt", "d.txt", false),
        Case("file[0-9]", "file7", true),
        Case("file[0-9]", "filex", false),
        Case("[!x]y", "ay", true),
        Case("[!x]y", "xy", false),
        Case("[^x]y", "xy", false),
        Case("[]]", "]", true),
        Case("[!]]", "]", false),
        Case("[!]]", "a", true),
        Case("[a-]", "-", true),
        Case("[a-]", "a", true),
        Case("[a-]", "b", false),
        Case("[a-cx-z]", "y", true),
        Case("[a-cx-z]", "d", false),
        Case("[[:digit:]]*", "9lives", true),
        Case("[[:digit:]]*", "cat", false),
        Case("[[:upper:]][[:lower:]]", "Ab", true),
        Case("[[:upper:]][[:lower:]]", "aB", false),
        Case("[[:alpha:]_]x", "_x", true),
        // Escapes.
        Case("\\*", "*", true),
        Case("\\*", "a", false),
        Case("\\[a]", "[a]", true),
        Case("\\[a]", "a", false),
        Case("a\\?", "a?", true),
        Case("a\\?", "ab", false),
        Case("\\!important", "!important", true),
        Case("\\\\x", "\\x", true),
        Case("foo\\ ", "foo ", true),
        Case("[\\]]", "]", true),
        Case("[a\\-z]", "-", true),
        Case("[a\\-z]", "b", false),
        // Names are bytes, not text.
        Case([0x63, 0x61, 0x66, 0xE9], [0x63, 0x61, 0x66, 0xE9], true),
        Case([0x63, 0x61, 0x66, 0xE9], Array("café".utf8), false),
        Case(Array("caf?".utf8), [0x63, 0x61, 0x66, 0xE9], true),
        Case(Array("caf?".utf8), Array("café".utf8), false),
        Case(Array("*".utf8) + [0xFF] + Array("*".utf8), [0x61, 0xFF, 0x62], true),
        Case([0x5B, 0xE9, 0x5D, 0x78], [0xE9, 0x78], true),
        Case([0x5B, 0x80, 0x2D, 0xFF, 0x5D, 0x2A], [0xC3, 0xA9], true),
        Case([0x5B, 0x80, 0x2D, 0xFF, 0x5D, 0x2A], Array("e".utf8), false),
        Case(Array("d/".utf8) + [0xE9], Array("d/".utf8) + [0xE9], true),
    ]

    @Test("matches applies one pattern to the path itself", arguments: matchCases)
    func matchesTable(_ row: Case) throws {
        let matcher = try ExcludeMatcher(patterns: [row.pattern])
        #expect(matcher.matches(RelativePath(bytes: row.path), isDirectory: row.isDirectory) == row.expected)
    }

    static let excludeCases: [Case] = [
        Case("node_modules/", "a/node_modules/pkg/index.js", true),
        Case("node_modules/", "node_modules", false),
        Case("node_modules/", "a/node_modules.txt", false),
        Case("build/cache", "build/cache/x/y", true),
        Case("build/cache", "build/cachex/y", false),
        Case("build/cache", "src/build/cache/x", false),
        Case("build/cache", "build", dir: true, false),
        Case("*.o", "x.o/inner", true),
        Case("*.o", "a/b/c", false),
        Case("abc/**", "abc", dir: true, false),
        Case("abc/**", "abc/x", true),
        Case("a/**/b", "a/x/b/c", true),
        Case("a/**/b", "a/x/c/d", false),
        Case("/build/", "build/x", true),
        Case("/build/", "src/build/x", false),
        Case("docs/*.md", "docs/a.md", true),
        Case("docs/*.md", "docs/a.md/x", true),
        Case("docs/*.md", "docs/sub/a.md", false),
        Case("out/bin/", "out/bin", false),
        Case("out/bin/", "out/bin", dir: true, true),
        Case("out/bin/", "out/bin/x", true),
        Case("**/cache/", "x/cache/y", true),
        Case("**/cache/", "x/cache", false),
        Case("**/cache/", "x/cache", dir: true, true),
        Case("tmp/", "tmp/a", true),
        Case("tmp/", "tmp", false),
        Case("a/**/b/", "a/b", false),
        Case("a/**/b/", "a/x/b/y", true),
    ]

    @Test("excludes also applies to every ancestor, as a directory", arguments: excludeCases)
    func excludesTable(_ row: Case) throws {
        let matcher = try ExcludeMatcher(patterns: [row.pattern])
        #expect(matcher.excludes(RelativePath(bytes: row.path), isDirectory: row.isDirectory) == row.expected)
    }

    @Test("excludes is matches on the path or on one of its ancestors", arguments: matchCases + excludeCases)
    func excludesAgreesWithMatches(_ row: Case) throws {
        let matcher = try ExcludeMatcher(patterns: [row.pattern])
        let path = RelativePath(bytes: row.path)
        var expected = matcher.matches(path, isDirectory: row.isDirectory)
        var ancestor = path.parent
        while let current = ancestor, !current.isRoot {
            expected = expected || matcher.matches(current, isDirectory: true)
            ancestor = current.parent
        }
        #expect(matcher.excludes(path, isDirectory: row.isDirectory) == expected)
    }

    @Test("the root is never matched nor excluded")
    func rootNeverMatches() throws {
        let matcher = try ExcludeMatcher(patterns: [Array("*".utf8), Array("**".utf8), Array("/**/".utf8)])
        #expect(!matcher.matches(.root, isDirectory: true))
        #expect(!matcher.excludes(.root, isDirectory: true))
        #expect(matcher.matches(RelativePath("x"), isDirectory: false))
    }

    @Test("several patterns: any one of them is enough")
    func severalPatterns() throws {
        let matcher = try ExcludeMatcher(patterns: ["*.o", "tmp/", "/dist"].map { Array($0.utf8) })
        #expect(matcher.excludes(RelativePath("tmp/a"), isDirectory: false))
        #expect(matcher.excludes(RelativePath("src/x.o"), isDirectory: false))
        #expect(matcher.excludes(RelativePath("dist"), isDirectory: true))
        #expect(!matcher.excludes(RelativePath("src/dist"), isDirectory: true))
        #expect(!matcher.excludes(RelativePath("src/main.c"), isDirectory: false))
    }

    @Test("none excludes nothing and equals an empty pattern list")
    func noneExcludesNothing() throws {
        #expect(ExcludeMatcher.none.patterns.isEmpty)
        #expect(ExcludeMatcher.none.isEmpty)
        #expect(!ExcludeMatcher.none.excludes(RelativePath("a/b"), isDirectory: false))
        #expect(!ExcludeMatcher.none.matches(RelativePath("a"), isDirectory: true))
        #expect(try ExcludeMatcher(patterns: []) == .none)
    }

    @Test("equality and patterns follow the given pattern list")
    func equalityFollowsPatterns() throws {
        let a = try ExcludeMatcher(patterns: [Array("*.o".utf8), Array("x/".utf8)])
        let b = try ExcludeMatcher(patterns: [Array("*.o".utf8), Array("x/".utf8)])
        let c = try ExcludeMatcher(patterns: [Array("x/".utf8), Array("*.o".utf8)])
        #expect(a == b)
        #expect(a != c)
        #expect(a.patterns == [Array("*.o".utf8), Array("x/".utf8)])
    }

    static let badPatterns: [(String, String)] = [
        ("", "bad exclude pattern '': empty"),
        ("[ab", "bad exclude pattern '[ab': unterminated '['"),
        ("[!]", "bad exclude pattern '[!]': unterminated '['"),
        ("x[a-", "bad exclude pattern 'x[a-': unterminated '['"),
        ("[[:alpha:]", "bad exclude pattern '[[:alpha:]': unterminated '['"),
        ("[[:alpha", "bad exclude pattern '[[:alpha': unterminated '[:'"),
        ("[[:foo:]]", "bad exclude pattern '[[:foo:]]': unknown class '[:foo:]'"),
        ("[z-a]", "bad exclude pattern '[z-a]': reversed range in '['"),
        ("/", "bad exclude pattern '/': matches nothing"),
        ("//", "bad exclude pattern '//': matches nothing"),
        ("a//b", "bad exclude pattern 'a//b': empty component"),
        ("foo\\", "bad exclude pattern 'foo\\': dangling '\\'"),
        ("a\\/b", "bad exclude pattern 'a\\/b': dangling '\\'"),
        ("a\\/", "bad exclude pattern 'a\\/': dangling '\\'"),
        ("../x", "bad exclude pattern '../x': '.' and '..' components are not allowed"),
        ("a/./b", "bad exclude pattern 'a/./b': '.' and '..' components are not allowed"),
        ("!keep", "bad exclude pattern '!keep': negation with '!' is not supported; write '\\!' for a literal '!'"),
        ("a\u{0}b", "bad exclude pattern 'a\\x00b': contains a NUL byte"),
    ]

    @Test("a bad pattern throws a configuration error naming it", arguments: badPatterns)
    func badPatternThrows(_ pattern: String, _ message: String) {
        #expect(throws: KeepSyncError(.configuration, message)) {
            try ExcludeMatcher(patterns: [Array("ok".utf8), Array(pattern.utf8)])
        }
    }

    // MARK: - Cross-check against a slow reference matcher

    /// Recursive glob on one name: literal bytes, `?` and `*` only.
    static func referenceName(_ p: ArraySlice<UInt8>, _ s: ArraySlice<UInt8>) -> Bool {
        guard let first = p.first else { return s.isEmpty }
        if first == 0x2A {
            var rest = s
            while true {
                if referenceName(p.dropFirst(), rest) { return true }
                if rest.isEmpty { return false }
                rest = rest.dropFirst()
            }
        }
        guard let c = s.first else { return false }
        return (first == 0x3F || first == c) && referenceName(p.dropFirst(), s.dropFirst())
    }

    /// Recursive anchored match over components; `**` is zero or more, one or more when last.
    static func referencePath(_ p: ArraySlice<[UInt8]>, _ s: ArraySlice<[UInt8]>) -> Bool {
        guard let first = p.first else { return s.isEmpty }
        if first == Array("**".utf8) {
            if p.count == 1 { return !s.isEmpty }
            var rest = s
            while true {
                if referencePath(p.dropFirst(), rest) { return true }
                if rest.isEmpty { return false }
                rest = rest.dropFirst()
            }
        }
        guard let c = s.first else { return false }
        return referenceName(first[...], c[...]) && referencePath(p.dropFirst(), s.dropFirst())
    }

    @Test("random anchored globs agree with a slow reference matcher", arguments: [1, 2, 3, 4])
    func agreesWithReference(seed: UInt64) throws {
        var rng = SplitMix64(seed: seed)
        let nameParts: [[UInt8]] = ["a", "b", "?", "*", "ab"].map { Array($0.utf8) }
        let pathNames: [[UInt8]] = ["a", "b", "ab", "ba", "aab", "bb"].map { Array($0.utf8) }
        for _ in 0..<2000 {
            var components: [[UInt8]] = []
            for _ in 0..<(1 + rng.below(4)) {
                if rng.below(4) == 0 {
                    components.append(Array("**".utf8))
                } else {
                    var name: [UInt8] = []
                    for _ in 0..<(1 + rng.below(3)) { name += nameParts[rng.below(nameParts.count)] }
                    if name == Array("**".utf8) { name = Array("*".utf8) }
                    components.append(name)
                }
            }
            if components.count == 1 { components.insert(Array("**".utf8), at: 0) }
            var path: [[UInt8]] = []
            for _ in 0..<(1 + rng.below(5)) { path.append(pathNames[rng.below(pathNames.count)]) }

            let pattern = Array(components.joined(separator: [0x2F]))
            let bytes = Array(path.joined(separator: [0x2F]))
            // Consecutive `**` mean the same as one; the reference needs them collapsed.
            var collapsed: [[UInt8]] = []
            for c in components where !(c == Array("**".utf8) && collapsed.last == c) { collapsed.append(c) }
            // `*` and `**`-as-`*` inside a name collapse too.
            collapsed = collapsed.map { c in
                c == Array("**".utf8) ? c : c.reduce(into: []) { out, b in
                    if !(b == 0x2A && out.last == 0x2A) { out.append(b) }
                }
            }
            let expected = Self.referencePath(collapsed[...], path[...])
            let matcher = try ExcludeMatcher(patterns: [pattern])
            let actual = matcher.matches(RelativePath(bytes: bytes), isDirectory: false)
            #expect(actual == expected, "pattern '\(ByteEscaping.escape(pattern))' path '\(ByteEscaping.escape(bytes))'")
            if actual != expected { return }
        }
    }
}
