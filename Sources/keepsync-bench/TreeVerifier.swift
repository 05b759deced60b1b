import Glibc

/// Compares a mirror with its source: names (bytes), kinds, modes, mtimes (ns) of files
/// and directories, link targets and file contents. Special files are not compared.
enum TreeVerifier {
    /// Up to `limit` differences, empty when the mirror is exact; `directoryTimes: false`
    /// leaves directory mtimes out.
    static func differences(_ source: [UInt8], _ mirror: [UInt8], limit: Int = 10, directoryTimes: Bool = true) -> [String] {
        var out: [String] = []
        var a = [UInt8](repeating: 0, count: 1 << 20), b = a
        func note(_ rel: [UInt8], _ what: String) {
            if out.count < limit { out.append("\(rel.isEmpty ? "." : Paths.display(rel)): \(what)") }
        }
        func compare(_ rel: [UInt8]) {
            guard out.count < limit else { return }
            let s = rel.isEmpty ? source : Paths.join(source, rel)
            let m = rel.isEmpty ? mirror : Paths.join(mirror, rel)
            guard let ss = Paths.lstat(s) else { return note(rel, "gone from the source") }
            guard let ms = Paths.lstat(m) else { return note(rel, "missing") }
            let kind = ss.st_mode & S_IFMT
            if kind != S_IFREG && kind != S_IFDIR && kind != S_IFLNK { return }
            guard ms.st_mode & S_IFMT == kind else { return note(rel, "kind differs") }
            if kind != S_IFLNK {
                if ss.st_mode & 0o7777 != ms.st_mode & 0o7777 { note(rel, "mode \(String(ss.st_mode & 0o7777, radix: 8)) vs \(String(ms.st_mode & 0o7777, radix: 8))") }
                if (kind != S_IFDIR || directoryTimes) && (ss.st_mtim.tv_sec != ms.st_mtim.tv_sec || ss.st_mtim.tv_nsec != ms.st_mtim.tv_nsec) {
                    note(rel, "mtime differs")
                }
            }
            switch kind {
            case S_IFLNK:
                if Paths.readlink(s) != Paths.readlink(m) { note(rel, "link target differs") }
            case S_IFREG:
                guard ss.st_size == ms.st_size else { return note(rel, "size \(ss.st_size) vs \(ms.st_size)") }
                if !sameBytes(s, m, &a, &b) { note(rel, "content differs") }
            default:
                let sn = (try? Paths.list(s)) ?? [], mn = (try? Paths.list(m)) ?? []
                let names = Set(sn)
                for n in mn where !names.contains(n) { note(rel.isEmpty ? n : rel + [0x2F] + n, "extra in the mirror") }
                for n in sn.sorted(by: { $0.lexicographicallyPrecedes($1) }) { compare(rel.isEmpty ? n : rel + [0x2F] + n) }
            }
        }
        compare([])
        return out
    }

    static func sameBytes(_ x: [UInt8], _ y: [UInt8], _ a: inout [UInt8], _ b: inout [UInt8]) -> Bool {
        let fx = Paths.with(x) { open($0, O_RDONLY | O_CLOEXEC) }, fy = Paths.with(y) { open($0, O_RDONLY | O_CLOEXEC) }
        defer { if fx >= 0 { close(fx) }; if fy >= 0 { close(fy) } }
        guard fx >= 0, fy >= 0 else { return false }
        while true {
            let n = a.withUnsafeMutableBytes { Glibc.read(fx, $0.baseAddress, $0.count) }
            var got = 0
            while got < max(n, 0) {
                let k = b.withUnsafeMutableBytes { Glibc.read(fy, $0.baseAddress! + got, n - got) }
                if k <= 0 { return false }
                got += k
            }
            if n <= 0 { return n == 0 && b.withUnsafeMutableBytes { Glibc.read(fy, $0.baseAddress, 1) } == 0 }
            if memcmp(a, b, n) != 0 { return false }
        }
    }
}
