import KeepSyncCore

/// A remote file's bytes held in memory.
final class RemoteFileContents: SourceFile {
    let stat: FileStat
    private var bytes: [UInt8]
    private var offset = 0

    init(stat: FileStat, bytes: [UInt8]) {
        self.stat = stat
        self.bytes = bytes
    }

    func read(upTo count: Int) throws -> [UInt8] {
        let end = min(bytes.count, offset + count)
        defer { offset = end }
        return Array(bytes[offset..<end])
    }

    func currentStat() throws -> FileStat { stat }

    func close() { bytes = [] }
}
