/// The bytes of the record journal: snapshot and log files, checksummed frames and
/// batches of `RecordChange`. Pure encoding; no I/O. All integers are little-endian.
///
/// - header (20 bytes): 8-byte magic, u64 generation, u32 CRC-32C of those 16 bytes.
/// - frame: u32 payload length, u32 CRC-32C of the payload, the payload.
/// - batch payload: u32 change count, then each change as a tag byte and its fields:
///   put (1): a record; remove (2): a path; setRoot (3): device u64, inode u64;
///   end (4, snapshots only, alone in the last frame): u64 record count;
///   setMirror (5): device u64, inode u64, file system (u32 length + bytes), limits
///   (u32 length + `MirrorLimits.encoded`).
/// - path: u32 length + bytes. Record: path, kind u8, device u64, inode u64, size u64,
///   mtime seconds i64, mtime nanoseconds u32, mode u32, mirror inode u64,
///   link target (u8 present flag, then u32 length + bytes when 1).
/// - snapshot file: header `KSSNAP01`, frames of setRoot/setMirror/put batches, the end frame.
/// - log file: header `KSLOG001` carrying the generation of the snapshot it extends,
///   then one frame per batch.
public enum RecordJournalCodec {
    private static let snapshotMagic: [UInt8] = Array("KSSNAP01".utf8)
    private static let logMagic: [UInt8] = Array("KSLOG001".utf8)
    private static let headerSize = 20
    private static let frameHeaderSize = 8
    /// Snapshot frames are cut once their payload reaches this size.
    private static let snapshotChunkSize = 1 << 16
    /// The smallest encoded change (a remove of the empty path): caps hostile counts.
    private static let minimumChangeSize = 5

    private static let tagPut: UInt8 = 1
    private static let tagRemove: UInt8 = 2
    private static let tagSetRoot: UInt8 = 3
    private static let tagEnd: UInt8 = 4
    private static let tagSetMirror: UInt8 = 5

    // MARK: Encoding

    /// The header of a log file that extends the snapshot of `generation`.
    public static func encodeLogHeader(generation: UInt64) -> [UInt8] {
        encodeHeader(magic: logMagic, generation: generation)
    }

    /// One log frame holding `changes` as a single batch.
    public static func encodeBatch(_ changes: [RecordChange]) -> [UInt8] {
        var body: [UInt8] = []
        for change in changes { encode(change, into: &body) }
        return frame(count: changes.count, body: body)
    }

    /// A complete snapshot file holding exactly the records and root of `set`
    /// (`wasDamaged` is not stored). Records are written by directory, then name.
    public static func encodeSnapshot(_ set: RecordSet, generation: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        encodeSnapshot(set, generation: generation) { out += $0 }
        return out
    }

    /// `encodeSnapshot`, handing the file to `emit` a frame (about 64 KiB) at a time.
    public static func encodeSnapshot(_ set: RecordSet, generation: UInt64, emit: ([UInt8]) throws -> Void) rethrows {
        try emit(encodeHeader(magic: snapshotMagic, generation: generation))
        var body: [UInt8] = []
        var count = 0
        func add(_ change: RecordChange) throws {
            encode(change, into: &body)
            count += 1
            if body.count >= snapshotChunkSize {
                try emit(frame(count: count, body: body))
                body.removeAll(keepingCapacity: true)
                count = 0
            }
        }
        if let root = set.root { try add(.setRoot(root)) }
        if let mirror = set.mirror { try add(.setMirror(mirror)) }
        try set.table.forEachInOrder { _, record in try add(.put(record)) }
        if count > 0 { try emit(frame(count: count, body: body)) }
        var end: [UInt8] = [tagEnd]
        append(UInt64(set.table.count), to: &end)
        try emit(frame(count: 1, body: end))
    }

    // MARK: Decoding

    /// Decodes a log file. Frames are read until the end; the first truncated frame, bad
    /// checksum or undecodable payload ends the valid prefix. `validLength` is where that
    /// prefix ends (0 when the header is unreadable), `damaged` is true when bytes follow
    /// it, and `generation` is nil when the header is missing or corrupt.
    public static func decodeLog(_ bytes: [UInt8])
        -> (changes: [[RecordChange]], validLength: Int, damaged: Bool, generation: UInt64?) {
        guard let generation = decodeHeader(bytes, magic: logMagic) else {
            return ([], 0, !bytes.isEmpty, nil)
        }
        var batches: [[RecordChange]] = []
        var at = headerSize
        while at < bytes.count {
            guard let payload = payloadRange(bytes, at: at),
                  let decoded = decodePayload(bytes[payload]), decoded.endCount == nil else {
                return (batches, at, true, generation)
            }
            batches.append(decoded.changes)
            at = payload.upperBound
        }
        return (batches, at, false, generation)
    }

    /// Decodes a snapshot file; nil when anything is wrong with it: header, any frame,
    /// a missing end frame, bytes after it, or a record count that does not match.
    public static func decodeSnapshot(_ bytes: [UInt8]) -> (set: RecordSet, generation: UInt64)? {
        var at = 0
        return decodeSnapshot(size: bytes.count) { n in
            guard n <= bytes.count - at else { return nil }
            defer { at += n }
            return Array(bytes[at..<(at + n)])
        }
    }

    /// Bytes at the end of a snapshot that hold its record count (the end frame).
    public static let snapshotTailSize = frameHeaderSize + 4 + 1 + 8

    /// The record count the end frame of a snapshot claims (for reserving room; the
    /// decode checks it); nil when the tail is no end frame.
    public static func snapshotRecordCount(tail: [UInt8], size: Int) -> Int? {
        guard tail.count == snapshotTailSize else { return nil }
        var at = 0
        guard read(UInt32.self, tail[...], &at) == UInt32(snapshotTailSize - frameHeaderSize), read(UInt32.self, tail[...], &at) != nil,
              read(UInt32.self, tail[...], &at) == 1, read(UInt8.self, tail[...], &at) == tagEnd,
              let count = read(UInt64.self, tail[...], &at), count <= UInt64(size / 40) else { return nil }
        return Int(count)
    }

    /// `decodeSnapshot` reading a file of `size` bytes a frame at a time: `read(n)`
    /// returns the next `n` bytes, nil when fewer remain. Never holds more than a frame.
    public static func decodeSnapshot(size: Int, reserve: Int = 0, read next: (Int) -> [UInt8]?) -> (set: RecordSet, generation: UInt64)? {
        guard let header = next(headerSize), let generation = decodeHeader(header, magic: snapshotMagic) else { return nil }
        var set = RecordSet()
        set.table.reserveCapacity(reserve)
        var consumed = headerSize
        while consumed < size {
            guard let frameHeader = next(frameHeaderSize) else { return nil }
            var cursor = 0
            guard let length = read(UInt32.self, frameHeader[...], &cursor), let crc = read(UInt32.self, frameHeader[...], &cursor),
                  Int(length) <= size - consumed - frameHeaderSize, let payload = next(Int(length)),
                  CRC32C.checksum(payload[...]) == crc, let decoded = decodePayload(payload[...]) else { return nil }
            consumed += frameHeaderSize + Int(length)
            if let endCount = decoded.endCount {
                guard consumed == size, endCount == UInt64(set.table.count) else { return nil }
                return (set, generation)
            }
            for change in decoded.changes {
                if case .remove = change { return nil }
                set.apply(change)
            }
        }
        return nil
    }

    // MARK: Frames and headers

    private static func encodeHeader(magic: [UInt8], generation: UInt64) -> [UInt8] {
        var out = magic
        append(generation, to: &out)
        append(CRC32C.checksum(out), to: &out)
        return out
    }

    /// The generation in a header with this magic and a good checksum.
    private static func decodeHeader(_ bytes: [UInt8], magic: [UInt8]) -> UInt64? {
        guard bytes.count >= headerSize, bytes[0..<magic.count].elementsEqual(magic) else { return nil }
        var at = magic.count
        guard let generation = read(UInt64.self, bytes[...], &at),
              let crc = read(UInt32.self, bytes[...], &at),
              crc == CRC32C.checksum(bytes[0..<magic.count + 8]) else { return nil }
        return generation
    }

    /// A frame around a batch payload of `count` encoded changes.
    private static func frame(count: Int, body: [UInt8]) -> [UInt8] {
        var payload: [UInt8] = []
        payload.reserveCapacity(4 + body.count)
        append(UInt32(count), to: &payload)
        payload += body
        var out: [UInt8] = []
        out.reserveCapacity(frameHeaderSize + payload.count)
        append(UInt32(payload.count), to: &out)
        append(CRC32C.checksum(payload), to: &out)
        out += payload
        return out
    }

    /// The payload of the frame starting at `at`, when it is complete and its checksum holds.
    private static func payloadRange(_ bytes: [UInt8], at: Int) -> Range<Int>? {
        var cursor = at
        guard let length = read(UInt32.self, bytes[...], &cursor),
              let crc = read(UInt32.self, bytes[...], &cursor),
              Int(length) <= bytes.count - cursor else { return nil }
        let payload = cursor..<(cursor + Int(length))
        guard CRC32C.checksum(bytes[payload]) == crc else { return nil }
        return payload
    }

    // MARK: Changes

    private static func encode(_ change: RecordChange, into out: inout [UInt8]) {
        switch change {
        case .put(let record):
            out.append(tagPut)
            appendBytes(record.path.bytes, to: &out)
            out.append(record.kind.rawValue)
            append(record.device, to: &out)
            append(record.inode, to: &out)
            append(record.size, to: &out)
            append(UInt64(bitPattern: record.mtime.seconds), to: &out)
            // Kernel nanoseconds are 0..<1e9 and fit; anything else is truncated.
            append(UInt32(truncatingIfNeeded: record.mtime.nanoseconds), to: &out)
            append(record.mode, to: &out)
            append(record.mirrorInode, to: &out)
            if let target = record.linkTarget {
                out.append(1)
                appendBytes(target, to: &out)
            } else {
                out.append(0)
            }
            if let birth = record.birthTime {
                out.append(1)
                append(UInt64(bitPattern: birth.seconds), to: &out)
                append(UInt32(truncatingIfNeeded: birth.nanoseconds), to: &out)
            } else {
                out.append(0)
            }
        case .remove(let path):
            out.append(tagRemove)
            appendBytes(path.bytes, to: &out)
        case .setRoot(let root):
            out.append(tagSetRoot)
            append(root.device, to: &out)
            append(root.inode, to: &out)
        case .setMirror(let mirror):
            out.append(tagSetMirror)
            append(mirror.identity.device, to: &out)
            append(mirror.identity.inode, to: &out)
            appendBytes(mirror.fileSystem, to: &out)
            appendBytes(mirror.limits.encoded, to: &out)
        }
    }

    /// The changes of a batch payload, or the record count of an end payload; nil when
    /// the payload is malformed in any way, including trailing bytes.
    private static func decodePayload(_ p: ArraySlice<UInt8>) -> (changes: [RecordChange], endCount: UInt64?)? {
        var at = p.startIndex
        guard let count = read(UInt32.self, p, &at),
              Int(count) <= (p.endIndex - at) / minimumChangeSize else { return nil }
        var changes: [RecordChange] = []
        changes.reserveCapacity(Int(count))
        var endCount: UInt64?
        for _ in 0..<count {
            guard let tag = read(UInt8.self, p, &at) else { return nil }
            switch tag {
            case tagPut:
                guard let record = decodeRecord(p, &at) else { return nil }
                changes.append(.put(record))
            case tagRemove:
                guard let path = readBytes(p, &at) else { return nil }
                changes.append(.remove(RelativePath(bytes: path)))
            case tagSetRoot:
                guard let device = read(UInt64.self, p, &at), let inode = read(UInt64.self, p, &at) else { return nil }
                changes.append(.setRoot(FileIdentity(device: device, inode: inode)))
            case tagSetMirror:
                guard let device = read(UInt64.self, p, &at), let inode = read(UInt64.self, p, &at),
                      let fileSystem = readBytes(p, &at), let encoded = readBytes(p, &at),
                      let limits = MirrorLimits(encoded: encoded) else { return nil }
                changes.append(.setMirror(MirrorRoot(identity: FileIdentity(device: device, inode: inode),
                                                     fileSystem: fileSystem, limits: limits)))
            case tagEnd:
                guard count == 1, let records = read(UInt64.self, p, &at) else { return nil }
                endCount = records
            default:
                return nil
            }
        }
        guard at == p.endIndex else { return nil }
        return (changes, endCount)
    }

    private static func decodeRecord(_ p: ArraySlice<UInt8>, _ at: inout Int) -> FileRecord? {
        guard let path = readBytes(p, &at),
              let kindRaw = read(UInt8.self, p, &at), let kind = FileKind(rawValue: kindRaw),
              let device = read(UInt64.self, p, &at),
              let inode = read(UInt64.self, p, &at),
              let size = read(UInt64.self, p, &at),
              let seconds = read(UInt64.self, p, &at),
              let nanoseconds = read(UInt32.self, p, &at),
              let mode = read(UInt32.self, p, &at),
              let mirrorInode = read(UInt64.self, p, &at),
              let hasTarget = read(UInt8.self, p, &at) else { return nil }
        var target: [UInt8]?
        switch hasTarget {
        case 0: target = nil
        case 1:
            guard let bytes = readBytes(p, &at) else { return nil }
            target = bytes
        default: return nil
        }
        var birth: Timespec?
        guard let hasBirth = read(UInt8.self, p, &at) else { return nil }
        switch hasBirth {
        case 0: birth = nil
        case 1:
            guard let sec = read(UInt64.self, p, &at), let nsec = read(UInt32.self, p, &at) else { return nil }
            birth = Timespec(seconds: Int64(bitPattern: sec), nanoseconds: Int64(nsec))
        default: return nil
        }
        return FileRecord(path: RelativePath(bytes: path), kind: kind, device: device, inode: inode, size: size,
                          mtime: Timespec(seconds: Int64(bitPattern: seconds), nanoseconds: Int64(nanoseconds)),
                          mode: mode, linkTarget: target, mirrorInode: mirrorInode, birthTime: birth)
    }

    // MARK: Integers and byte strings

    private static func append<T: FixedWidthInteger & UnsignedInteger>(_ value: T, to out: inout [UInt8]) {
        var v = value
        for _ in 0..<MemoryLayout<T>.size {
            out.append(UInt8(truncatingIfNeeded: v))
            v >>= 8
        }
    }

    private static func appendBytes(_ bytes: [UInt8], to out: inout [UInt8]) {
        append(UInt32(bytes.count), to: &out)
        out += bytes
    }

    /// Reads a little-endian integer at `at`, advancing it; nil when too few bytes remain.
    private static func read<T: FixedWidthInteger & UnsignedInteger>(_ type: T.Type, _ p: ArraySlice<UInt8>,
                                                                     _ at: inout Int) -> T? {
        let size = MemoryLayout<T>.size
        guard at >= p.startIndex, p.endIndex - at >= size else { return nil }
        var value: T = 0
        for i in 0..<size { value |= T(p[at + i]) << (8 * i) }
        at += size
        return value
    }

    /// Reads a u32 length and that many bytes; nil when the length exceeds what remains.
    private static func readBytes(_ p: ArraySlice<UInt8>, _ at: inout Int) -> [UInt8]? {
        var cursor = at
        guard let length = read(UInt32.self, p, &cursor), Int(length) <= p.endIndex - cursor else { return nil }
        at = cursor + Int(length)
        return Array(p[cursor..<at])
    }
}
