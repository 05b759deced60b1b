@testable import KeepSyncCore
import KeepSyncTestSupport
import Synchronization
import Testing

/// The read-ahead of a scan (`ScanPrefetcher`): every directory is listed once, whoever
/// lists it (a worker ahead of the scan, or the scan itself).
@Suite("Scan read-ahead")
struct ScanPrefetcherTests {
    /// A complete tree computed, not stored: `fanOut` directories and two files in each
    /// directory down to `depth`; listings cost no lock, so workers race the scan freely.
    struct SyntheticTree: FileSystemProviding {
        let fanOut: Int
        let depth: Int

        static let directoryStat = FileStat(kind: .directory, mode: 0o755, size: 0, mtime: Timespec(seconds: 1, nanoseconds: 0))
        static let fileStat = FileStat(kind: .regular, mode: 0o644, size: 1, mtime: Timespec(seconds: 1, nanoseconds: 0))

        func level(_ path: RelativePath) -> Int { path.isRoot ? 0 : path.components.count }
        func stat(_ path: RelativePath) throws -> FileStat? { Self.directoryStat }
        func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
            let files = [DirectoryEntry(name: Array("f1".utf8), stat: Self.fileStat),
                         DirectoryEntry(name: Array("f2".utf8), stat: Self.fileStat)]
            guard level(directory) < depth else { return files }
            return (0..<fanOut).map { DirectoryEntry(name: Array("d\($0)".utf8), stat: Self.directoryStat) } + files
        }
        func readLink(_ path: RelativePath) throws -> [UInt8] { throw KeepSyncError(.notFound, "no links", path: path) }
        func open(_ path: RelativePath) throws -> any SourceFile { throw KeepSyncError(.notFound, "no content", path: path) }
    }

    /// Walks like a scan: each directory taken in path order (depth first), then its
    /// subdirectories; returns how many it took.
    static func scan(_ prefetcher: ScanPrefetcher, _ path: RelativePath) -> Int {
        let listing = prefetcher.take(path, mirrorIsDirectory: true)
        guard case .success(let entries) = listing.source else { return 1 }
        let children = entries.filter { $0.stat.kind == .directory }.map { path.appending($0.name) }.sorted()
        return 1 + children.reduce(0) { $0 + scan(prefetcher, $1) }
    }

    @Test("each directory is listed once: a listing the scan waited for hands over its subdirectories before the scan goes on (150 scans of 1,555 directories, 12 readers)")
    func eachDirectoryListedOnce() {
        let tree = SyntheticTree(fanOut: 6, depth: 4)
        let io = ParallelIO(width: 12)
        var twice = 0, taken = 0
        for _ in 0..<150 {
            let prefetcher = ScanPrefetcher(source: tree, mirror: tree, excludes: .none, io: io)
            prefetcher.start(.root, mirrorIsDirectory: true)
            let visited = Self.scan(prefetcher, .root)
            prefetcher.stop()
            taken += visited
            twice += prefetcher.listings - visited
            #expect(visited == 1 + 6 + 36 + 216 + 1296)
        }
        // A directory listed again was listed once more by a worker after the scan had
        // listed it itself: that listing holds a read-ahead place until the scan ends.
        #expect(twice == 0, "\(twice) of \(taken) directories listed twice")
    }
}
