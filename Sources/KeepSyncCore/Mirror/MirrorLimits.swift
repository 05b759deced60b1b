/// What a mirror's file system can hold, as a probe found it (SPEC "Mirrors on file
/// systems that hold less"): the one model the planner, the scanner and `check` compare
/// through. The default holds everything (a local POSIX file system).
public struct MirrorLimits: Sendable, Equatable {
    /// The file system's type as the mount table names it (for messages only).
    public var fileSystem: String
    /// Symbolic links can be made.
    public var symlinks = true
    /// Permission bits are kept.
    public var permissions = true
    /// Modification times are kept to this many nanoseconds (1: exactly).
    public var mtimeGranularity: Int64 = 1
    /// Names that differ only in ASCII case are one name.
    public var foldsCase = false
    /// ... and in the case of other letters too (`É` and `é`).
    public var foldsUnicodeCase = false
    /// Bytes no name may contain, sorted.
    public var refusedBytes: [UInt8] = []
    /// Names must be valid UTF-8.
    public var refusesInvalidUTF8 = false
    /// Names may not end in a dot or a space.
    public var refusesTrailingDotOrSpace = false
    /// DOS device names (`CON`, `nul.txt`, `COM1`…) are refused.
    public var refusesDeviceNames = false
    /// The largest file size known to be refused, less one (learned from EFBIG: FAT32
    /// takes 4 GiB - 1); nil: none known.
    public var maxFileSize: UInt64?
    /// `syncfs` makes the file system's changes durable (not on FUSE): otherwise each file
    /// and directory is fsynced itself.
    public var syncfsReaches = true
    /// Inode numbers survive a remount (not on FUSE): otherwise a record's mirror inode is
    /// not compared.
    public var stableInodes = true

    /// Limits of a file system that holds everything.
    public init(fileSystem: String = "") {
        self.fileSystem = fileSystem
    }

    /// Holds everything a POSIX file system holds (what the planner compares is exact).
    public static let none = MirrorLimits()

    /// True when nothing is limited.
    public var holdsEverything: Bool {
        var plain = self
        plain.fileSystem = ""
        plain.syncfsReaches = true
        plain.stableInodes = true
        return plain == .none
    }

    // MARK: Comparing within the limits

    /// True when two mtimes are the same as this file system keeps them: equal, or
    /// closer than its granularity.
    public func mtimesEqual(_ a: Timespec, _ b: Timespec) -> Bool {
        if mtimeGranularity <= 1 { return a == b }
        let x = a.seconds &* 1_000_000_000 &+ a.nanoseconds
        let y = b.seconds &* 1_000_000_000 &+ b.nanoseconds
        return abs(x - y) < mtimeGranularity
    }

    /// True when the mirror's permission bits do not differ from the source's as far as
    /// this file system keeps them.
    public func modesEqual(source: UInt32, mirror: UInt32) -> Bool {
        !permissions || source & 0o7777 == mirror & 0o7777
    }

    /// The mirror inode a record keeps: none where inode numbers do not survive a remount.
    public func recordedInode(_ inode: UInt64) -> UInt64 { stableInodes ? inode : 0 }

    /// Why a name cannot be held, or nil when it can.
    public func refusal(of name: [UInt8]) -> String? {
        if refusesInvalidUTF8, String(validating: name, as: UTF8.self) == nil {
            return "the mirror's file system takes only UTF-8 names"
        }
        if !refusedBytes.isEmpty, let b = name.first(where: { refusedBytes.contains($0) }) {
            return "the mirror's file system does not take \(Self.show(b)) in a name"
        }
        if refusesTrailingDotOrSpace, let last = name.last, last == 0x2E || last == 0x20 {
            return "the mirror's file system does not take a name ending in \(last == 0x2E ? "a dot" : "a space")"
        }
        if refusesDeviceNames, Self.isDeviceName(name) {
            return "the mirror's file system does not take a DOS device name"
        }
        return nil
    }

    /// `CON`, `PRN`, `AUX`, `NUL`, `COM1`-`COM9`, `LPT1`-`LPT9`, in any case, alone or
    /// before a dot.
    static func isDeviceName(_ name: [UInt8]) -> Bool {
        let stem = name.split(separator: 0x2E, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        let upper = String(decoding: stem.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }, as: UTF8.self)
        if ["CON", "PRN", "AUX", "NUL"].contains(upper) { return true }
        guard upper.count == 4, upper.hasPrefix("COM") || upper.hasPrefix("LPT"), let digit = upper.last else { return false }
        return digit >= "1" && digit <= "9"
    }

    /// The name as this file system compares it: two names with the same key are one.
    public func caseKey(_ name: [UInt8]) -> [UInt8] {
        guard foldsCase else { return name }
        if foldsUnicodeCase, let text = String(validating: name, as: UTF8.self), name.contains(where: { $0 >= 0x80 }) {
            return Array(text.lowercased().utf8)
        }
        return name.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }
    }

    // MARK: Telling

    /// What this mirror cannot hold, e.g. `no symlinks, no permission bits, mtimes to 1 s,
    /// names without case`; empty when it holds everything.
    public var summary: String {
        var parts: [String] = []
        if !symlinks { parts.append("no symlinks") }
        if !permissions { parts.append("no permission bits") }
        if mtimeGranularity > 1 { parts.append("mtimes to \(Self.duration(mtimeGranularity))") }
        if foldsCase { parts.append("names without case") }
        var names: [String] = []
        if !refusedBytes.isEmpty {
            let printable = refusedBytes.filter { $0 > 0x20 && $0 < 0x7F }.map { String(UnicodeScalar($0)) }.joined()
            names.append(printable.isEmpty ? "control characters" : printable + (refusedBytes.contains { $0 < 0x20 } ? " and control characters" : ""))
        }
        if refusesInvalidUTF8 { names.append("non-UTF-8 names") }
        if refusesTrailingDotOrSpace { names.append("a trailing dot or space") }
        if refusesDeviceNames { names.append("DOS device names") }
        if let maxFileSize { parts.append("files up to \(ByteSize.human(maxFileSize))") }
        if !names.isEmpty { parts.append("no " + names.joined(separator: ", ")) }
        if !syncfsReaches { parts.append("no syncfs (each file fsynced)") }
        return parts.joined(separator: ", ")
    }

    /// `status.json`'s `"mirrorLimits"`.
    public var json: JSONValue {
        .object([
            "fileSystem": .string(fileSystem),
            "symlinks": .bool(symlinks),
            "permissions": .bool(permissions),
            "mtimeGranularityNs": .number(Double(mtimeGranularity)),
            "caseInsensitive": .bool(foldsCase),
            "refusedNameBytes": .string(refusedBytes.map { Self.show($0) }.joined()),
            "utf8NamesOnly": .bool(refusesInvalidUTF8),
            "syncfs": .bool(syncfsReaches),
            "stableInodes": .bool(stableInodes),
            "summary": .string(summary),
        ])
    }

    static func show(_ byte: UInt8) -> String { ByteEscaping.escape(CollectionOfOne(byte)) }

    static func duration(_ ns: Int64) -> String {
        if ns % 1_000_000_000 == 0 { return "\(ns / 1_000_000_000) s" }
        if ns % 1_000_000 == 0 { return "\(ns / 1_000_000) ms" }
        if ns % 1000 == 0 { return "\(ns / 1000) µs" }
        return "\(ns) ns"
    }

    // MARK: Records

    /// The limits as bytes for the records (a version byte, flags, granularity, the
    /// refused bytes, the file system's name).
    public var encoded: [UInt8] {
        var flags: UInt16 = 0
        for (i, bit) in [symlinks, permissions, foldsCase, foldsUnicodeCase, refusesInvalidUTF8,
                         refusesTrailingDotOrSpace, syncfsReaches, stableInodes, refusesDeviceNames].enumerated() where bit {
            flags |= 1 << UInt16(i)
        }
        var out: [UInt8] = [1, UInt8(flags & 0xFF), UInt8(flags >> 8)]
        for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: UInt64(bitPattern: mtimeGranularity) >> (8 * UInt64(i)))) }
        out.append(UInt8(refusedBytes.count))
        out += refusedBytes
        let name = Array(fileSystem.utf8.prefix(255))
        out.append(UInt8(name.count))
        out += name
        if let maxFileSize { for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: maxFileSize >> (8 * UInt64(i)))) } }
        return out
    }

    /// Limits read back from `encoded`; nil when the bytes are not such an encoding.
    public init?(encoded bytes: [UInt8]) {
        guard bytes.count >= 12, bytes[0] == 1 else { return nil }
        let flags = UInt16(bytes[1]) | UInt16(bytes[2]) << 8
        var granularity: UInt64 = 0
        for i in 0..<8 { granularity |= UInt64(bytes[3 + i]) << (8 * UInt64(i)) }
        let refusedCount = Int(bytes[11])
        guard bytes.count >= 12 + refusedCount + 1 else { return nil }
        let nameCount = Int(bytes[12 + refusedCount])
        let end = 13 + refusedCount + nameCount
        guard bytes.count == end || bytes.count == end + 8 else { return nil }
        self.init(fileSystem: String(decoding: bytes[(13 + refusedCount)..<end], as: UTF8.self))
        if bytes.count == end + 8 {
            var size: UInt64 = 0
            for i in 0..<8 { size |= UInt64(bytes[end + i]) << (8 * UInt64(i)) }
            maxFileSize = size
        }
        func bit(_ i: Int) -> Bool { flags & (1 << UInt16(i)) != 0 }
        symlinks = bit(0)
        permissions = bit(1)
        foldsCase = bit(2)
        foldsUnicodeCase = bit(3)
        refusesInvalidUTF8 = bit(4)
        refusesTrailingDotOrSpace = bit(5)
        syncfsReaches = bit(6)
        stableInodes = bit(7)
        refusesDeviceNames = bit(8)
        mtimeGranularity = Int64(bitPattern: granularity)
        refusedBytes = Array(bytes[12..<(12 + refusedCount)])
    }
}
