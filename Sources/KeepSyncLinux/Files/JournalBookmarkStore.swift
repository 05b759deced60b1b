import KeepSyncCore
import Synchronization

/// The bookmark records on disk, in a state directory: `records.snapshot` holds a full
/// set tagged with a generation, `records.log` the batches applied since, tagged with
/// the generation of the snapshot they extend (format: `RecordJournalCodec`).
///
/// Every apply is one appended frame, fsynced. Compaction writes the next generation's
/// snapshot, then a fresh log, each by temp + fsync + rename + directory fsync; a log
/// whose generation is not the snapshot's is ignored, so a crash at any point loads
/// the same set. Damage is reported once, by the load that finds it, and repaired by
/// the next write. Sendable: all mutable state (the log descriptor) sits in a `Mutex`.
public final class JournalBookmarkStore: BookmarkStorageProviding {
    private static let snapshotName: [UInt8] = Array("records.snapshot".utf8)
    private static let snapshotTempName: [UInt8] = Array("records.snapshot.tmp".utf8)
    private static let logName: [UInt8] = Array("records.log".utf8)
    private static let logTempName: [UInt8] = Array("records.log.tmp".utf8)

    /// What the store knows about its files; guarded by `state`.
    private struct State {
        /// True once the files were read; writes read them first.
        var opened = false
        /// Generation of the snapshot that appends extend.
        var generation: UInt64 = 0
        /// Highest generation seen in any header; compaction goes above it.
        var highestSeen: UInt64 = 0
        /// The snapshot cannot be trusted: the next write replaces it.
        var snapshotUnusable = false
        /// Open log of `generation`, valid up to `logLength`; nil until one is created.
        var log: FileDescriptor?
        /// Length of the log's valid bytes.
        var logLength: UInt64 = 0
        /// Size of the snapshot file (0 when there is none).
        var snapshotLength: UInt64 = 0
        /// A failed append may have left bytes past `logLength`.
        var needsTruncation = false

        /// Closes the log, if open.
        mutating func closeLog() {
            log?.close()
            log = nil
        }
    }

    private let directoryPath: [UInt8]
    private let directory: FileDescriptor
    private let readOnly: Bool
    private let state = Mutex(State())
    private let heartbeat: Heartbeat?

    /// Log bytes that never make `needsCompaction` true, however small the snapshot.
    public let logAllowance: UInt64

    /// Opens the store in the existing state directory at `directory` (absolute path
    /// bytes). A `readOnly` store only loads: it never repairs or creates files, so it
    /// is safe beside a running agent (`check`, `status`); its writes throw. Loads beat
    /// `heartbeat` once per snapshot frame.
    public init(directory: [UInt8], readOnly: Bool = false, logAllowance: UInt64 = 1 << 20,
                heartbeat: Heartbeat? = nil) throws {
        self.heartbeat = heartbeat
        self.directoryPath = directory
        self.readOnly = readOnly
        self.logAllowance = logAllowance
        do {
            self.directory = try Sys.openDirectory(directory)
        } catch {
            throw error.error("open \(ByteEscaping.escape(directory))")
        }
    }

    deinit {
        state.withLock { $0.closeLog() }
        directory.close()
    }

    /// Bytes in the log since the last compaction, header included (0 before the first
    /// load or write): lets the owner of the records decide when to compact.
    public var logLength: UInt64 {
        state.withLock { $0.logLength }
    }

    /// Size of the snapshot last read or written (0 when there is none).
    public var snapshotLength: UInt64 {
        state.withLock { $0.snapshotLength }
    }

    /// True when the log is longer than both the allowance and the snapshot: it then
    /// takes longer to load than a fresh snapshot would, and its disk space is waste.
    public var needsCompaction: Bool {
        state.withLock { $0.logLength > max(logAllowance, $0.snapshotLength) }
    }

    /// Loads the snapshot and the log batches that extend it. Damaged content is never
    /// an error: it yields what could be trusted, with `wasDamaged`; a torn log tail is
    /// cut off on disk. Throws only for I/O errors.
    public func load() throws -> RecordSet {
        try state.withLock { (s) throws(KeepSyncError) -> RecordSet in try open(&s) }
    }

    /// Appends `changes` as one frame and fsyncs it; an empty batch does nothing.
    public func apply(_ changes: [RecordChange]) throws {
        if changes.isEmpty { return }
        try checkWritable()
        try state.withLock { (s) throws(KeepSyncError) in
            if !s.opened { _ = try open(&s) }
            // The set the caller holds since `load` is what a damaged store gave it:
            // make the disk agree before extending it.
            if s.snapshotUnusable { try compact(RecordSet(), &s) }
            let log = try appendTarget(&s)
            if s.needsTruncation {
                try io("ftruncate", Self.logName) { () throws(Errno) in try log.truncate(s.logLength) }
                s.needsTruncation = false
            }
            let frame = RecordJournalCodec.encodeBatch(changes)
            do throws(KeepSyncError) {
                try io("write", Self.logName) { () throws(Errno) in try log.writeAll(frame) }
                try io("fsync", Self.logName) { () throws(Errno) in try log.sync() }
            } catch {
                // Never leave a partial frame for later appends to hide behind.
                s.needsTruncation = true
                try? log.truncate(s.logLength)
                throw error
            }
            s.logLength += UInt64(frame.count)
        }
    }

    /// Replaces the store with exactly `set`, as the next generation.
    public func compact(_ set: RecordSet) throws {
        try checkWritable()
        try state.withLock { (s) throws(KeepSyncError) in
            if !s.opened { _ = try open(&s) }
            try compact(set, &s)
        }
    }

    // MARK: Reading

    /// Reads both files into `s` and returns the trusted set. After an I/O error `s` is
    /// left unopened, so that no write acts on a half-read store.
    private func open(_ s: inout State) throws(KeepSyncError) -> RecordSet {
        s.closeLog()
        s = State()
        let (set, state) = try read()
        s = state
        return set
    }

    /// The trusted set and the state that goes with it.
    private func read() throws(KeepSyncError) -> (RecordSet, State) {
        var s = State()
        s.opened = true
        if !readOnly {
            try io("unlink", Self.snapshotTempName) { () throws(Errno) in
                try Sys.removeFileIfPresent(directory, Self.snapshotTempName)
            }
            try io("unlink", Self.logTempName) { () throws(Errno) in
                try Sys.removeFileIfPresent(directory, Self.logTempName)
            }
        }

        var set = RecordSet()
        if let decodedOrNil = try readSnapshot(size: &s.snapshotLength) {
            if let decoded = decodedOrNil {
                set = decoded.set
                s.generation = decoded.generation
            } else {
                // Without a base, the log's deltas mean nothing.
                set.wasDamaged = true
                s.snapshotUnusable = true
            }
        }
        s.highestSeen = s.generation

        let opened = try io("open", Self.logName) { () throws(Errno) -> FileDescriptor? in
            readOnly ? try Sys.openForReading(directory, Self.logName) : try Sys.openForAppending(directory, Self.logName)
        }
        guard let log = opened else { return (set, s) }
        var keep = false
        defer { if !keep { log.close() } }
        let bytes = try io("read", Self.logName) { () throws(Errno) in try log.readAll() }
        let decoded = RecordJournalCodec.decodeLog(bytes)
        s.highestSeen = max(s.highestSeen, decoded.generation ?? 0)
        if s.snapshotUnusable { return (set, s) }
        guard let generation = decoded.generation, generation == s.generation else {
            // An older log is what a compaction leaves when it stops before replacing
            // the log; anything else is damage. Either way the next apply replaces it.
            if decoded.generation.map({ $0 > s.generation }) ?? true { set.wasDamaged = true }
            return (set, s)
        }
        for batch in decoded.changes {
            for change in batch { set.apply(change) }
        }
        s.logLength = UInt64(decoded.validLength)
        if decoded.damaged {
            set.wasDamaged = true
            if !readOnly {
                try io("ftruncate", Self.logName) { () throws(Errno) in try log.truncate(UInt64(decoded.validLength)) }
                try io("fsync", Self.logName) { () throws(Errno) in try log.sync() }
            }
        }
        if !readOnly {
            keep = true
            s.log = log
        }
        return (set, s)
    }

    /// The decoded snapshot (nil inside when it is damaged); nil when there is none. Read a
    /// frame at a time, so that a large store never sits in memory twice.
    private func readSnapshot(size snapshotSize: inout UInt64) throws(KeepSyncError) -> (set: RecordSet, generation: UInt64)?? {
        let opened = try io("open", Self.snapshotName) { () throws(Errno) in
            try Sys.openForReading(directory, Self.snapshotName)
        }
        guard let fd = opened else { return nil }
        defer { fd.close() }
        let size = try io("fstat", Self.snapshotName) { () throws(Errno) in try fd.stat() }.size
        snapshotSize = size
        var failure: Errno?
        var reserve = 0
        if size >= UInt64(RecordJournalCodec.snapshotTailSize), let tail = try? fd.read(at: size - UInt64(RecordJournalCodec.snapshotTailSize),
                                                                                        count: RecordJournalCodec.snapshotTailSize) {
            reserve = RecordJournalCodec.snapshotRecordCount(tail: tail, size: Int(size)) ?? 0
        }
        let decoded = RecordJournalCodec.decodeSnapshot(size: Int(size), reserve: reserve) { [heartbeat] n in
            heartbeat?.beat()
            do throws(Errno) {
                let bytes = try fd.read(exactly: n)
                return bytes.count == n ? bytes : nil
            } catch {
                failure = error
                return nil
            }
        }
        if let failure { try io("read", Self.snapshotName) { () throws(Errno) in throw failure } }
        return .some(decoded)
    }

    // MARK: Writing

    /// Writes `set` as the next generation's snapshot, then an empty log for it.
    private func compact(_ set: RecordSet, _ s: inout State) throws(KeepSyncError) {
        let generation = max(s.generation, s.highestSeen) + 1
        // Written as it is encoded: a large store is never held in memory as bytes.
        let temp = try io("open", Self.snapshotTempName) { () throws(Errno) in try Sys.createForAppending(directory, Self.snapshotTempName) }
        var written: UInt64 = 0
        do throws(KeepSyncError) {
            var failure: Errno?
            RecordJournalCodec.encodeSnapshot(set, generation: generation) { chunk in
                guard failure == nil else { return }
                do throws(Errno) { try temp.writeAll(chunk) } catch { failure = error }
                written += UInt64(chunk.count)
            }
            if let failure { try io("write", Self.snapshotTempName) { () throws(Errno) in throw failure } }
            try io("fsync", Self.snapshotTempName) { () throws(Errno) in try temp.sync() }
        } catch {
            temp.close()
            try? Sys.removeFileIfPresent(directory, Self.snapshotTempName)
            throw error
        }
        temp.close()
        try rename(Self.snapshotTempName, to: Self.snapshotName)
        // From here the disk may hold the new snapshot: the old log must not get appends.
        s.closeLog()
        s.generation = generation
        s.highestSeen = generation
        s.snapshotUnusable = false
        s.snapshotLength = written
        try syncDirectory()
        try createLog(&s)
    }

    /// The open log of `s.generation`, created when there is none.
    private func appendTarget(_ s: inout State) throws(KeepSyncError) -> FileDescriptor {
        if let log = s.log { return log }
        return try createLog(&s)
    }

    /// Replaces the log with an empty one for `s.generation` and makes it the append target.
    @discardableResult
    private func createLog(_ s: inout State) throws(KeepSyncError) -> FileDescriptor {
        let header = RecordJournalCodec.encodeLogHeader(generation: s.generation)
        let fd = try writeTemp(Self.logTempName, header)
        do throws(KeepSyncError) {
            try rename(Self.logTempName, to: Self.logName)
            try syncDirectory()
        } catch {
            fd.close()
            throw error
        }
        s.closeLog()
        s.log = fd
        s.logLength = UInt64(header.count)
        s.needsTruncation = false
        return fd
    }

    /// Creates `name` holding `bytes`, fsynced; returns it open for appending.
    private func writeTemp(_ name: [UInt8], _ bytes: [UInt8]) throws(KeepSyncError) -> FileDescriptor {
        let fd = try io("open", name) { () throws(Errno) in try Sys.createForAppending(directory, name) }
        do throws(KeepSyncError) {
            try io("write", name) { () throws(Errno) in try fd.writeAll(bytes) }
            try io("fsync", name) { () throws(Errno) in try fd.sync() }
        } catch {
            fd.close()
            try? Sys.removeFileIfPresent(directory, name)
            throw error
        }
        return fd
    }

    private func rename(_ from: [UInt8], to: [UInt8]) throws(KeepSyncError) {
        try io("rename", from) { () throws(Errno) in try Sys.rename(directory, from, directory, to) }
    }

    private func syncDirectory() throws(KeepSyncError) {
        try io("fsync", nil) { () throws(Errno) in try directory.sync() }
    }

    private func checkWritable() throws(KeepSyncError) {
        if readOnly {
            throw KeepSyncError(.readOnly, "records store \(ByteEscaping.escape(directoryPath)) is open read-only")
        }
    }

    /// Runs a system call, naming the call and the file (or the directory) on failure.
    private func io<R>(_ call: String, _ name: [UInt8]?, _ body: () throws(Errno) -> R) throws(KeepSyncError) -> R {
        do {
            return try body()
        } catch {
            var path = directoryPath
            if let name { path += [0x2F] + name }
            throw error.error("\(call) \(ByteEscaping.escape(path))")
        }
    }
}
