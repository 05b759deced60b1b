import Dispatch
import Glibc
import Synchronization

/// The --scale tree: `files` files of 0-4 KiB spread over `leaves` directories
/// (`p<d/100>/q<d%100>`, file j in leaf j % leaves), written on 2 threads with plain
/// openat/write/futimens relative to each leaf. Seeded: file j's size and bytes depend
/// on the seed and j only, whichever thread writes it.
struct ScaleTree {
    let root: [UInt8]
    let files: Int
    let leaves: Int
    let seed: UInt64

    /// Directories above the leaves (root not counted).
    var parents: Int { (leaves + 99) / 100 }
    /// Every directory of the tree, root included.
    var directories: Int { leaves + parents + 1 }

    /// Leaf `d`, relative to the root.
    func leaf(_ d: Int) -> [UInt8] { Array("p\(d / 100)/q\(d % 100)".utf8) }

    /// Builds the tree; returns the bytes of its files.
    func build() throws -> Int {
        try Paths.mkdirs(root)
        for p in 0..<parents { try Paths.mkdir(Paths.join(root, "p\(p)")) }
        // Noise every file takes a slice of (stamped with its index).
        var pool = [UInt8](repeating: 0, count: 1 << 20)
        var r = TreeBuilder.Rng(state: seed ^ 0xB0B)
        pool.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in 0..<words.count { words[i] = r.next() }
        }
        let shared = Shared(pool: pool)
        let threads = 2
        DispatchQueue.concurrentPerform(iterations: threads) { t in
            var scratch = [UInt8](repeating: 0, count: 4096)
            var d = t
            while d < leaves, shared.ok {
                do { shared.add(bytes: try writeLeaf(d, pool: shared.pool, scratch: &scratch)) } catch { shared.fail("\(error)") }
                d += threads
            }
        }
        if let error = shared.failure { throw BenchError(error) }
        // Directory mtimes in the past, after their entries: parents, then the root.
        for p in 0..<parents {
            try Paths.setTimes(Paths.join(root, "p\(p)"), seconds: TreeBuilder.past + 900_000 + p, nanoseconds: 123_456 + p)
        }
        try Paths.setTimes(root, seconds: TreeBuilder.past + 950_000, nanoseconds: 654_321)
        return shared.bytes
    }

    /// Makes leaf `d` and writes its files; returns their bytes.
    private func writeLeaf(_ d: Int, pool: [UInt8], scratch: inout [UInt8]) throws -> Int {
        let path = Paths.join(root, leaf(d))
        try Paths.mkdir(path)
        let dir = Paths.with(path) { open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard dir >= 0 else { throw BenchError("open \(Paths.display(path)): \(String(cString: strerror(errno)))") }
        defer { close(dir) }
        var total = 0
        var j = d
        while j < files {
            var r = TreeBuilder.Rng(state: seed &+ UInt64(j) &* 0x2545_F491_4F6C_DD1D)
            let size = r.below(4097)
            let offset = r.below(pool.count - 4096)
            scratch.withUnsafeMutableBytes { out in
                pool.withUnsafeBytes { out.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: size) }
                for k in 0..<min(8, size) { out[k] = UInt8(truncatingIfNeeded: j >> (8 * k)) }
            }
            let fd = "s\(j)".withCString { openat(dir, $0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
            guard fd >= 0 else { throw BenchError("open \(Paths.display(path))/s\(j): \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            var done = 0
            while done < size {
                let n = scratch.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, size - done) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw BenchError("write \(Paths.display(path))/s\(j): \(String(cString: strerror(errno)))") }
                done += n
            }
            var times = [timespec(tv_sec: TreeBuilder.past + j, tv_nsec: (j &* 7_919) % 1_000_000_000)]
            times.append(times[0])
            guard futimens(fd, times) == 0 else { throw BenchError("futimens \(Paths.display(path))/s\(j): \(String(cString: strerror(errno)))") }
            total += size
            j += leaves
        }
        try Paths.setTimes(path, seconds: TreeBuilder.past + 800_000 + d, nanoseconds: 123_456 + d)
        return total
    }

    /// What the writer threads share: the pool, the byte count, the first failure.
    private final class Shared: Sendable {
        let pool: [UInt8]
        private let state = Mutex<(bytes: Int, failure: String?)>((0, nil))
        init(pool: [UInt8]) { self.pool = pool }
        var ok: Bool { state.withLock { $0.failure == nil } }
        var bytes: Int { state.withLock { $0.bytes } }
        var failure: String? { state.withLock { $0.failure } }
        func add(bytes n: Int) { state.withLock { $0.bytes += n } }
        func fail(_ text: String) { state.withLock { if $0.failure == nil { $0.failure = text } } }
    }
}
