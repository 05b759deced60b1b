import Glibc

/// Seeded trees: the same seed gives the same names, sizes, modes, mtimes and bytes.
struct TreeBuilder {
    /// SplitMix64.
    struct Rng {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { n <= 1 ? 0 : Int(next() % UInt64(n)) }
    }

    /// 24 MiB of noise every file takes a slice of (stamped with its index).
    let pool: [UInt8]
    var rng: Rng
    static let past = 1_500_000_000

    init(seed: UInt64) {
        rng = Rng(state: seed)
        var pool = [UInt8](repeating: 0, count: 24 << 20)
        var r = Rng(state: seed ^ 0xB0B)
        pool.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in 0..<words.count { words[i] = r.next() }
        }
        self.pool = pool
    }

    /// Writes `size` bytes: the index, then a slice of the pool.
    mutating func writeFile(_ path: [UInt8], index: Int, size: Int, mode: mode_t) throws {
        let offset = rng.below(pool.count - size - 8 + 1)
        try pool.withUnsafeBytes { raw in
            if size <= 8 {
                var stamp = [UInt8](repeating: 0, count: size)
                for k in 0..<size { stamp[k] = UInt8(truncatingIfNeeded: index >> (8 * k)) }
                try Paths.write(path, stamp, mode: mode)
                return
            }
            // Stamp in place (a copy of the first 8 bytes would cost as much as the file).
            var head = Array(raw[offset..<(offset + size)].prefix(8))
            for k in 0..<8 { head[k] = UInt8(truncatingIfNeeded: index >> (8 * k)) }
            let fd = Paths.with(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) }
            guard fd >= 0 else { throw BenchError("open \(Paths.display(path)): \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            _ = head.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, 8) }
            var done = 8
            while done < size {
                let n = Glibc.write(fd, raw.baseAddress! + offset + done, size - done)
                if n <= 0 { throw BenchError("write \(Paths.display(path)): \(String(cString: strerror(errno)))") }
                done += n
            }
            _ = fchmod(fd, mode)
        }
        try Paths.setTimes(path, seconds: Self.past + index, nanoseconds: (index &* 7_919) % 1_000_000_000)
    }

    /// The main tree: `files` files (mostly 0-16 KiB, 1 in 311 of 1-10 MiB), 1 in 50 files a
    /// directory (two levels), 1 in 100 a symlink beside it, names that are not UTF-8,
    /// 20 empty directories. Returns the total bytes of the regular files.
    mutating func buildMain(_ root: [UInt8], files: Int) throws -> Int {
        try Paths.mkdirs(root)
        let dirs = max(1, files / 50)
        var dirPaths: [[UInt8]] = []
        for d in 0..<dirs {
            let path = Array("d\(d / 20)/s\(d % 20)".utf8)
            try Paths.mkdirs(Paths.join(root, path))
            dirPaths.append(path)
        }
        var total = 0
        for j in 0..<files {
            let dir = dirPaths[j % dirs]
            var name = Array("f\(j).dat".utf8)
            if j % 2_000 == 3 { name = Array("f\(j)-".utf8) + [0xFF, 0xFE, 0x80] }
            if j % 2_000 == 5 { name = Array("caf".utf8) + [0xE9] + Array("-\(j)".utf8) }
            let size = j % 311 == 7 ? (1 << 20) + rng.below(9 << 20) : rng.below(16 << 10)
            let mode: mode_t = j % 7 == 0 ? 0o600 : (j % 11 == 0 ? 0o755 : 0o644)
            try writeFile(Paths.join(root, dir + [0x2F] + name), index: j, size: size, mode: mode)
            total += size
            if j % 100 == 0 {
                try Paths.symlink(name, at: Paths.join(root, dir + Array("/l\(j)".utf8)))
            }
        }
        for k in 0..<20 { try Paths.mkdir(Paths.join(root, "d0/empty\(k)")) }
        try setDirectoryTimes(root)
        return total
    }

    /// The small-file tree: `files` files of 0-4 KiB in `directories` directories (two
    /// levels). Returns the total bytes.
    mutating func buildSmall(_ root: [UInt8], files: Int, directories: Int) throws -> Int {
        try Paths.mkdirs(root)
        for d in 0..<directories { try Paths.mkdirs(Paths.join(root, "p\(d / 100)/q\(d % 100)")) }
        var total = 0
        for j in 0..<files {
            let d = j % directories
            let size = rng.below(4097)
            try writeFile(Paths.join(root, "p\(d / 100)/q\(d % 100)/s\(j)"), index: j, size: size, mode: 0o644)
            total += size
        }
        try setDirectoryTimes(root)
        return total
    }

    /// The watched tree: `files` files of 0-256 bytes in `directories` directories.
    mutating func buildWatched(_ root: [UInt8], files: Int, directories: Int) throws {
        try Paths.mkdirs(root)
        for d in 0..<directories { try Paths.mkdirs(Paths.join(root, "w\(d / 50)/x\(d % 50)")) }
        for j in 0..<files {
            let d = j % directories
            try writeFile(Paths.join(root, "w\(d / 50)/x\(d % 50)/g\(j)"), index: j, size: rng.below(257), mode: 0o644)
        }
        try setDirectoryTimes(root)
    }

    /// Past mtimes on every directory, deepest first (after their entries).
    func setDirectoryTimes(_ root: [UInt8]) throws {
        var dirs: [[UInt8]] = []
        var stack = [root]
        while let d = stack.popLast() {
            dirs.append(d)
            for name in try Paths.list(d) {
                let p = Paths.join(d, name)
                if let st = Paths.lstat(p), st.st_mode & S_IFMT == S_IFDIR { stack.append(p) }
            }
        }
        for (n, d) in dirs.reversed().enumerated() {
            try Paths.setTimes(d, seconds: Self.past + 900_000 + n, nanoseconds: 123_456 + n)
        }
    }
}
