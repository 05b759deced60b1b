import Dispatch
import Glibc
import KeepSyncCore
import Synchronization

/// Reads every directory of a tree on several threads (open, getdents), so that a walk
/// that must stay sequential (the watcher's: watch, then list) finds them in the page
/// cache; with `lookUp`, each entry is stat'ed too, so that its inode is read from the
/// disk now rather than by the scan after. Reads only; never follows a link; stops when
/// told.
final class DirectoryWarmer: Sendable {
    private let stack: SleepingLock<(pending: [[UInt8]], busy: Int)>
    private let wake = DispatchSemaphore(value: 0)
    private let group = DispatchGroup()
    private let width: Int
    private let excludes: ExcludeMatcher
    private let root: [UInt8]
    private let lookUp: Bool
    private let counts = Atomic<Int>(0)
    private let lookups = Atomic<Int>(0)
    /// Set by `stop`: readers take no more directories, and the one in hand is read
    /// without its lookups.
    private let halted = Atomic<Bool>(false)

    /// Directories read so far.
    var directoriesRead: Int { counts.load(ordering: .relaxed) }
    /// Entries stat'ed so far (`lookUp`).
    var entriesLookedUp: Int { lookups.load(ordering: .relaxed) }

    /// Starts `width` readers at `root` (absolute path), skipping excluded directories;
    /// `lookUp`: each entry is stat'ed as well.
    init(root: [UInt8], excludes: ExcludeMatcher, width: Int, lookUp: Bool = false) {
        self.root = root
        self.lookUp = lookUp
        self.excludes = excludes
        self.width = width
        stack = SleepingLock(([[]], 0))
        wake.signal()
        for i in 0..<width {
            DispatchQueue(label: "keepsync.warm.\(i)").async(group: group) { self.work() }
        }
    }

    /// Stops the readers (they finish the directory in hand) and waits for them.
    func stop() {
        halted.store(true, ordering: .relaxed)
        for _ in 0..<width { wake.signal() }
        group.wait()
    }

    private func work() {
        while true {
            wake.wait()
            let next: [UInt8]?? = stack.withLock { s in
                if halted.load(ordering: .relaxed) { return .some(nil) }
                guard let p = s.pending.popLast() else { return nil }
                s.busy += 1
                return .some(p)
            }
            guard let got = next else {
                // Woken for nothing: done when nobody holds work that could add some.
                if stack.withLock({ $0.pending.isEmpty && $0.busy == 0 }) {
                    for _ in 0..<width { wake.signal() }
                    return
                }
                continue
            }
            guard let relative = got else { return }
            let children = list(relative)
            stack.withLock { s in
                s.pending += children
                s.busy -= 1
            }
            for _ in children { wake.signal() }
            if children.isEmpty, stack.withLock({ $0.pending.isEmpty && $0.busy == 0 }) {
                for _ in 0..<width { wake.signal() }
            }
        }
    }

    /// The subdirectories (relative paths) of `relative`, read from the disk.
    private func list(_ relative: [UInt8]) -> [[UInt8]] {
        let path = relative.isEmpty ? root : root + [0x2F] + relative
        guard let fd = try? Sys.open(.currentDirectory, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) else { return [] }
        defer { fd.close() }
        guard let entries = try? Inotify.entries(fd) else { return [] }
        counts.add(1, ordering: .relaxed)
        var out: [[UInt8]] = []
        for e in entries {
            let child = relative.isEmpty ? e.name : relative + [0x2F] + e.name
            if lookUp, !halted.load(ordering: .relaxed) {
                _ = try? Sys.lstat(fd, e.name)
                lookups.add(1, ordering: .relaxed)
            }
            if e.isDirectory, !excludes.excludes(RelativePath(bytes: child), isDirectory: true) { out.append(child) }
        }
        return out
    }
}
