import Foundation
import Glibc
import Testing
import KeepSyncCore
import KeepSyncTestSupport

/// A disk of its own for a test, as a USB stick would be: an image file on a loop device,
/// formatted exFAT or NTFS and mounted through FUSE (this kernel has no in-kernel vfat,
/// exfat or ntfs3), or a tmpfs for comparison. `unmount()` and `mount()` again are an
/// unplug and a replug of the same disk. Everything lives in a scratch directory of its
/// own (not in a Sandbox, whose removal must never walk into a live mount), and `destroy()`
/// (also run by deinit) lazily unmounts, detaches the loop device and removes it all, so a
/// failing test leaves nothing mounted.
final class LoopMount {
    enum Kind: String, CaseIterable, Sendable, CustomStringConvertible {
        /// `mkfs.exfat`, mounted with `mount.exfat-fuse`.
        case exfat
        /// `mkntfs -Q -F`, mounted with `ntfs-3g` and its default options.
        case ntfs
        /// The same with `ntfs-3g -o windows_names`.
        case ntfsWindowsNames = "ntfs-windows_names"
        /// A tmpfs, reached through a bind mount so that an unplug keeps its content.
        case tmpfs

        var description: String { rawValue }
        var isFuse: Bool { self != .tmpfs }
    }

    let kind: Kind
    /// The scratch directory holding the image and the mount points.
    let directory: [UInt8]
    /// The mount point: what a user would pass as the disk (`/media/usb`).
    let path: [UInt8]
    let image: [UInt8]
    /// The loop device (`/dev/loopN`) while attached.
    private(set) var device: String?
    private(set) var mounted = false
    /// Set when a replug had to use another loop device because the previous file system
    /// was still held open after a lazy unmount (as a replugged USB disk gets a new node).
    private(set) var replugNotes: [String] = []
    /// For tmpfs: where the tmpfs itself is mounted (the bind mount at `path` is the "disk").
    private let backing: [UInt8]
    private var destroyed = false

    static let commandPath = "/usr/sbin:/usr/bin:/sbin:/bin"

    init(_ kind: Kind, sizeMiB: Int = 64) throws {
        self.kind = kind
        directory = FS.realpath(try ScratchDirectory.make(prefix: "keepsync-disk-\(kind.rawValue)"))
        path = directory / "mnt"
        image = directory / "disk.img"
        backing = directory / "backing"
        try FS.mkdir(path)
        do {
            switch kind {
            case .tmpfs:
                try FS.mkdir(backing)
                try Self.run("mount", ["-t", "tmpfs", "-o", "size=\(sizeMiB)m,mode=0755", "tmpfs", Self.text(backing)])
            case .exfat, .ntfs, .ntfsWindowsNames:
                let fd = FS.withCPath(image) { open($0, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600) }
                guard fd >= 0 else { throw FSError(call: "open", path: image, code: errno) }
                let truncated = ftruncate(fd, off_t(sizeMiB) << 20)
                close(fd)
                try FS.check(truncated, "ftruncate", image)
                try attach()
                if kind == .exfat {
                    try Self.run("mkfs.exfat", [device!])
                } else {
                    try Self.run("mkntfs", ["-Q", "-F", device!])
                }
            }
            try mount()
        } catch {
            destroy()
            throw error
        }
    }

    deinit { destroy() }

    /// Plugs the disk in: mounts it at `path` and returns once it is mounted there.
    func mount() throws {
        precondition(!destroyed && !mounted)
        switch kind {
        case .tmpfs:
            try Self.run("mount", ["--bind", Self.text(backing), Self.text(path)])
        case .exfat, .ntfs, .ntfsWindowsNames:
            // The same loop device as before when the last file system on it has let go of it
            // (its FUSE daemon exited); else a new one on the same image.
            if let device, !waitForDaemonExit(device, timeout: .seconds(5)) {
                replugNotes.append("\(device) still held by the unmounted file system; replugged on another loop device")
                Self.runQuietly("losetup", ["-d", device])
                self.device = nil
            }
            if device == nil { try attach() }
            switch kind {
            case .exfat: try Self.run("mount.exfat-fuse", [device!, Self.text(path)])
            case .ntfs: try Self.run("ntfs-3g", [device!, Self.text(path)])
            default: try Self.run("ntfs-3g", ["-o", "windows_names", device!, Self.text(path)])
            }
        }
        let up = eventuallyBlocking(timeout: .seconds(10)) { Self.isMountPoint(self.path) }
        try #require(up, "\(kind) did not appear mounted at \(Self.text(path))")
        mounted = true
    }

    /// Unplugs the disk. `lazy` (`umount -l`) works while a process holds a descriptor
    /// inside, as pulling the stick out would; a plain unmount then fails with EBUSY.
    /// A plain unmount waits for the FUSE daemon to exit, so the next mount is a clean replug.
    func unmount(lazy: Bool = false) throws {
        guard mounted else { return }
        try Self.run("umount", (lazy ? ["-l"] : []) + [Self.text(path)])
        mounted = false
        if !lazy, kind.isFuse, let device {
            let gone = waitForDaemonExit(device, timeout: .seconds(10))
            try #require(gone, "the FUSE daemon for \(device) did not exit after umount")
        }
    }

    /// Unmounts (lazily), detaches the loop device and removes the scratch directory.
    func destroy() {
        guard !destroyed else { return }
        destroyed = true
        if Self.isMountPoint(path) { Self.runQuietly("umount", ["-l", Self.text(path)]) }
        mounted = false
        if kind == .tmpfs, Self.isMountPoint(backing) { Self.runQuietly("umount", ["-l", Self.text(backing)]) }
        if let device {
            // A lazily unmounted file system may still hold it: -d then only sets autoclear.
            _ = waitForDaemonExit(device, timeout: .seconds(2))
            Self.runQuietly("losetup", ["-d", device])
        }
        device = nil
        // Only once nothing is mounted below it (a removal must not walk into a mount).
        if !Self.isMountPoint(path) && !Self.isMountPoint(backing) { try? ScratchDirectory.removeTree(directory) }
    }

    // MARK: Helpers

    private func attach() throws {
        let result = try Self.run("losetup", ["--find", "--show", Self.text(image)])
        let name = result.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(name.hasPrefix("/dev/loop"), "losetup: \(result)")
        device = name
    }

    /// True once no process runs with `device` in its argv (the FUSE daemon that served it).
    private func waitForDaemonExit(_ device: String, timeout: Duration) -> Bool {
        eventuallyBlocking(timeout: timeout) { Self.processes(naming: device).isEmpty }
    }

    /// PIDs of live processes whose argv holds `argument` (zombies have none).
    static func processes(naming argument: String) -> [Int32] {
        let wanted = Array(argument.utf8)
        return ((try? FS.list(bytes("/proc"))) ?? []).compactMap { name in
            guard let pid = Int32(String(decoding: name, as: UTF8.self)) else { return nil }
            guard let cmdline = try? FS.readFile(bytes("/proc/") + name + bytes("/cmdline")) else { return nil }
            return cmdline.split(separator: 0).contains { Array($0) == wanted } ? pid : nil
        }
    }

    /// Whether `path` is a mount point now (per /proc/self/mountinfo).
    static func isMountPoint(_ path: [UInt8]) -> Bool {
        guard let info = try? FS.readFile(bytes("/proc/self/mountinfo")) else { return false }
        let wanted = escapeMountinfo(path)
        return info.split(separator: 0x0A).contains { line in
            let fields = line.split(separator: 0x20)
            return fields.count > 4 && Array(fields[4]) == wanted
        }
    }

    /// mountinfo writes space, tab, newline and backslash as `\ooo`.
    private static func escapeMountinfo(_ path: [UInt8]) -> [UInt8] {
        path.flatMap { b -> [UInt8] in
            [0x20, 0x09, 0x0A, 0x5C].contains(b) ? bytes("\\" + String(b, radix: 8).leftPadded(to: 3)) : [b]
        }
    }

    static func text(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }

    /// Runs a system tool (found on `commandPath`); throws unless it exits 0.
    @discardableResult
    static func run(_ tool: String, _ arguments: [String]) throws -> ProcessResult {
        guard let program = program(tool) else { throw SpawnError(description: "\(tool) not found on \(commandPath)") }
        let result = try ChildProcess.run(bytes(program), arguments: arguments.map(bytes), environment: ["PATH": commandPath],
                                          timeout: .seconds(60))
        try #require(result.status == 0 && !result.timedOut, "\(tool) \(arguments.joined(separator: " ")): \(result)")
        return result
    }

    /// Runs a system tool for cleanup: a failure is not a test failure.
    static func runQuietly(_ tool: String, _ arguments: [String]) {
        guard let program = program(tool) else { return }
        _ = try? ChildProcess.run(bytes(program), arguments: arguments.map(bytes), environment: ["PATH": commandPath], timeout: .seconds(60))
    }

    /// The full path of an executable on `commandPath`.
    static func program(_ name: String) -> String? {
        for dir in commandPath.split(separator: ":") {
            let candidate = "\(dir)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    // MARK: Availability

    static let tools = ["losetup", "mount", "umount", "mkfs.exfat", "mount.exfat-fuse", "mkntfs", "ntfs-3g"]

    /// Nil when these tests can run here, else why not (for the skip message).
    static let unavailableReason: String? = {
        if geteuid() != 0 { return "needs root: it attaches loop devices and mounts file systems" }
        if access("/dev/fuse", R_OK | W_OK) != 0 { return "needs /dev/fuse" }
        if access("/dev/loop-control", R_OK | W_OK) != 0 { return "needs /dev/loop-control" }
        let missing = tools.filter { program($0) == nil }
        if !missing.isEmpty { return "needs \(missing.joined(separator: ", ")) (Debian: exfatprogs exfat-fuse ntfs-3g)" }
        return nil
    }()

    static var available: Bool { unavailableReason == nil }
}

private extension String {
    func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
