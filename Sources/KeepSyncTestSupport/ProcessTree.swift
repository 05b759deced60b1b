#if canImport(Glibc)
import Glibc
#endif

/// Processes as /proc shows them: who descends from whom, and who is stopped.
public enum ProcessTree {
    /// One process from `/proc/PID/stat`.
    public struct Entry: Sendable, Equatable {
        /// Its pid.
        public let pid: pid_t
        /// Its parent's pid.
        public let parent: pid_t
        /// The state letter (`R`, `S`, `T` for stopped, `Z`, …).
        public let state: UInt8
        /// `comm`, the short program name.
        public let name: String
    }

    /// `/proc/PID/stat` of `pid`, nil once it is gone.
    public static func entry(_ pid: pid_t) -> Entry? {
        let fd = open("/proc/\(pid)/stat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        let text = buffer[0..<n]
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the last ')' ends it.
        guard let nameStart = text.firstIndex(of: 0x28), let nameEnd = text.lastIndex(of: 0x29),
              nameEnd + 2 < text.endIndex else { return nil }
        let rest = text[(nameEnd + 2)...].split(separator: 0x20, maxSplits: 2)
        guard rest.count >= 2, let parent = pid_t(String(decoding: rest[1], as: UTF8.self)) else { return nil }
        return Entry(pid: pid, parent: parent, state: rest[0].first ?? 0,
                     name: String(decoding: text[(nameStart + 1)..<nameEnd], as: UTF8.self))
    }

    /// Every process now running.
    public static func all() -> [Entry] {
        guard let dir = opendir("/proc") else { return [] }
        defer { closedir(dir) }
        var out: [Entry] = []
        while let item = readdir(dir) {
            let name: [UInt8] = withUnsafeBytes(of: item.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            guard !name.isEmpty, name.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let pid = pid_t(String(decoding: name, as: UTF8.self)), let e = entry(pid) else { continue }
            out.append(e)
        }
        return out
    }

    /// The children of `root`, their children and so on (not `root`), parents first.
    public static func descendants(of root: pid_t) -> [Entry] {
        var children: [pid_t: [Entry]] = [:]
        for e in all() { children[e.parent, default: []].append(e) }
        var out: [Entry] = []
        var queue = [root]
        while !queue.isEmpty {
            let next = queue.removeFirst()
            for child in children[next] ?? [] where child.pid != root {
                out.append(child)
                queue.append(child.pid)
            }
        }
        return out
    }
}
