import Glibc
import KeepSyncCore

/// Finds out what the mirror's file system holds (SPEC "Mirrors on file systems that hold
/// less") by trying it, in a temporary directory inside the mirror that it removes again,
/// restoring the mirror root's mtime: symlinks, permission bits, the mtime granularity,
/// case folding, the bytes names may not hold. Whether `syncfs` reaches the file system
/// and whether inode numbers survive a remount cannot be tried without a remount: both
/// are false on FUSE (Linux forwards `syncfs` to no FUSE server but virtiofs, and a FUSE
/// server may number inodes anew at each mount).
enum MirrorProbe {
    /// `FUSE_SUPER_MAGIC`.
    static let fuseMagic = 0x6573_5546

    /// The mirror root as it is now, without writing: its identity and file system; nil
    /// when it is missing or not a directory.
    static func currentRoot(_ mirrorPath: [UInt8]) -> (identity: FileIdentity, fileSystem: [UInt8], type: String, isFUSE: Bool)? {
        guard let fd = try? Sys.openDirectory(mirrorPath) else { return nil }
        defer { fd.close() }
        guard let st = try? fd.stat(), st.kind == .directory else { return nil }
        let isFUSE = (try? fd.fileSystemType()) == fuseMagic
        let resolved = (try? Sys.realPath(mirrorPath)) ?? mirrorPath
        let mount = MountTable.mount(containing: resolved)
        var fileSystem = mount.map { $0.source + [0x20] + Array($0.type.utf8) } ?? []
        if fileSystem.isEmpty { fileSystem = Array("device \(st.device)".utf8) }
        return (FileIdentity(device: st.device, inode: st.inode), fileSystem, mount?.type ?? "", isFUSE)
    }

    /// `currentRoot` as a `MirrorRoot` (inode 0 where it does not survive a remount; no
    /// limits probed but those two).
    static func currentMirrorRoot(_ mirrorPath: [UInt8]) -> MirrorRoot? {
        guard let now = currentRoot(mirrorPath) else { return nil }
        var limits = MirrorLimits()
        limits.stableInodes = !now.isFUSE
        limits.syncfsReaches = !now.isFUSE
        return MirrorRoot(identity: now.isFUSE ? FileIdentity(device: now.identity.device, inode: 0) : now.identity,
                          fileSystem: now.fileSystem, limits: limits)
    }

    /// Probes the mirror at `mirrorPath` (an existing directory).
    static func probe(_ mirrorPath: [UInt8]) throws -> MirrorRoot {
        guard let current = currentRoot(mirrorPath) else {
            throw KeepSyncError(.notFound, "mirror \(HostPaths.display(mirrorPath)) is not a directory")
        }
        let root: FileDescriptor
        do throws(Errno) { root = try Sys.openDirectory(mirrorPath) } catch { throw error.error("open", path: .root) }
        defer { root.close() }
        let rootStat: FileStat
        do throws(Errno) { rootStat = try root.stat() } catch { throw error.error("stat", path: .root) }
        var limits = MirrorLimits(fileSystem: current.type)
        limits.syncfsReaches = !current.isFUSE
        limits.stableInodes = !current.isFUSE

        let name = TemporaryName.prefix + Sys.randomHex16()
        do throws(Errno) { try Sys.makeDirectory(root, name, mode: 0o700) } catch { throw error.error("mkdirat", path: .root) }
        defer {
            removeAll(root, name)
            try? root.setModificationTime(rootStat.mtime, withAccessTime: current.isFUSE)
        }
        let dir: FileDescriptor
        do throws(Errno) { dir = try Sys.openDirectory(name, relativeTo: root) } catch { throw error.error("open", path: .root) }
        defer { dir.close() }

        limits.symlinks = (try? Sys.makeSymlink(target: Array("t".utf8), dir, Array("l".utf8))) != nil
        limits.permissions = keepsModes(dir)
        limits.mtimeGranularity = mtimeGranularity(dir)
        (limits.foldsCase, limits.foldsUnicodeCase) = foldsCase(dir)
        limits.refusedBytes = ([UInt8](0x01...0x1F) + [0x7F] + Array(":*?\"<>|\\".utf8)).filter { !accepts(dir, [0x6B, $0, 0x70]) }
        limits.refusesInvalidUTF8 = !accepts(dir, [0x6B, 0xE9, 0x70])
        limits.refusesTrailingDotOrSpace = !accepts(dir, Array("kp.".utf8)) || !accepts(dir, Array("kp ".utf8))
        limits.refusesDeviceNames = !accepts(dir, Array("nul.txt".utf8))
        return MirrorRoot(identity: limits.stableInodes ? current.identity : FileIdentity(device: current.identity.device, inode: 0),
                          fileSystem: current.fileSystem, limits: limits)
    }

    /// True when a file's mode set to 0640, then 0604, reads back as set.
    static func keepsModes(_ dir: FileDescriptor) -> Bool {
        let name = Array("m".utf8)
        guard let fd = try? Sys.open(dir, name, O_CREAT | O_EXCL | O_WRONLY, mode: 0o600) else { return false }
        fd.close()
        for mode: UInt32 in [0o640, 0o604] {
            guard (try? Sys.setMode(dir, name, mode)) != nil,
                  let st = (try? Sys.lstat(dir, name)) ?? nil, st.mode & 0o7777 == mode else { return false }
        }
        return true
    }

    /// The coarsest step at which an mtime set to …1.123456789 s reads back unchanged.
    static func mtimeGranularity(_ dir: FileDescriptor) -> Int64 {
        let name = Array("t".utf8)
        guard let fd = try? Sys.open(dir, name, O_CREAT | O_EXCL | O_WRONLY, mode: 0o600) else { return 1 }
        fd.close()
        let set = Timespec(seconds: 1_700_000_001, nanoseconds: 123_456_789)
        guard (try? Sys.setModificationTime(dir, name, set, withAccessTime: true)) != nil, let got = ((try? Sys.lstat(dir, name)) ?? nil)?.mtime else {
            return 1
        }
        let difference = abs((set.seconds - got.seconds) * 1_000_000_000 + (set.nanoseconds - got.nanoseconds))
        if difference == 0 { return 1 }
        for step: Int64 in [100, 1000, 1_000_000, 10_000_000, 1_000_000_000, 2_000_000_000] where difference < step {
            return step
        }
        return 2_000_000_000
    }

    /// Whether a name made in one case is found in another: ASCII, and `É` for `é`.
    static func foldsCase(_ dir: FileDescriptor) -> (ascii: Bool, unicode: Bool) {
        guard let fd = try? Sys.open(dir, Array("Kc".utf8), O_CREAT | O_EXCL | O_WRONLY, mode: 0o600) else { return (false, false) }
        fd.close()
        let ascii = ((try? Sys.lstat(dir, Array("kC".utf8))) ?? nil) != nil
        guard ascii, let u = try? Sys.open(dir, [0xC3, 0xA9], O_CREAT | O_EXCL | O_WRONLY, mode: 0o600) else { return (ascii, false) }
        u.close()
        return (ascii, ((try? Sys.lstat(dir, [0xC3, 0x89])) ?? nil) != nil)
    }

    /// True when a file can be made under `name` (and is removed again).
    static func accepts(_ dir: FileDescriptor, _ name: [UInt8]) -> Bool {
        guard let fd = try? Sys.open(dir, name, O_CREAT | O_EXCL | O_WRONLY, mode: 0o600) else { return false }
        fd.close()
        try? Sys.unlink(dir, name, directory: false)
        return true
    }

    /// Removes the probe directory and what is in it.
    static func removeAll(_ root: FileDescriptor, _ name: [UInt8]) {
        if let dir = try? Sys.openDirectory(name, relativeTo: root) {
            for entry in (try? Sys.readDirectory(dir)) ?? [] { try? Sys.unlink(dir, entry, directory: false) }
            dir.close()
        }
        try? Sys.unlink(root, name, directory: true)
    }
}

/// `/proc/self/mountinfo`: which mount a path is on.
enum MountTable {
    /// One mount: where, what type, from what source.
    struct Mount: Equatable {
        var point: [UInt8]
        var type: String
        var source: [UInt8]
    }

    /// The mount whose mount point is the longest prefix of `path` (an absolute, resolved
    /// path); the last listed wins among equals (it is on top).
    static func mount(containing path: [UInt8]) -> Mount? {
        guard let text = try? HostPaths.read(Array("/proc/self/mountinfo".utf8)) else { return nil }
        var best: Mount?
        for line in text.split(separator: 0x0A) {
            guard let m = parse(Array(line)), isPrefix(m.point, of: path) else { continue }
            if best == nil || m.point.count >= best!.point.count { best = m }
        }
        return best
    }

    /// A mountinfo line: `id parent major:minor root point options [optional…] - type source super`.
    static func parse(_ line: [UInt8]) -> Mount? {
        let fields = line.split(separator: 0x20).map(Array.init)
        guard fields.count >= 10, let dash = fields.firstIndex(of: [0x2D]), dash + 2 < fields.count else { return nil }
        return Mount(point: unescape(fields[4]), type: String(decoding: fields[dash + 1], as: UTF8.self),
                     source: unescape(fields[dash + 2]))
    }

    /// mountinfo's octal escapes (`\040` for a space) undone.
    static func unescape(_ field: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var i = 0
        while i < field.count {
            if field[i] == 0x5C, i + 3 < field.count,
               let value = UInt8(String(decoding: field[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                out.append(value)
                i += 4
            } else {
                out.append(field[i])
                i += 1
            }
        }
        return out
    }

    static func isPrefix(_ point: [UInt8], of path: [UInt8]) -> Bool {
        if point == [0x2F] { return true }
        return path.starts(with: point) && (path.count == point.count || path[point.count] == 0x2F)
    }
}
