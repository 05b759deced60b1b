import Glibc

extension Bench {
    // MARK: Versions: bytes written (issue 40)

    /// The data versions cost the disk, on ext4, xfs and btrfs (each a loop-mounted image
    /// of its own): 1,000 files of 64 KiB overwritten, then `keepsync sync` with
    /// `--keep-versions 30d` and, on a tree of its own on the same file system, without.
    /// Counted as the bytes keepsync passed to write calls (`wchar`), with versions less
    /// without (a version is a link or a rename: no write call); and, metadata included,
    /// at the loop device: the sectors written from just before the sync until after a
    /// `sync` that follows it (`/sys/block/loopN/stat`). A copy would add 62.5 MiB.
    /// Skipped, saying why, without root or the file system's mkfs.
    func versionBytesWritten() -> [Row] {
        guard geteuid() == 0 else {
            return [Row(measure: "versions: data written", unit: .mebibytes, tools: [],
                        note: "skipped: loop mounts need root", informational: true)]
        }
        var rows: [Row] = []
        for fs in ["ext4", "xfs", "btrfs"] {
            guard let mkfs = Spawn.which("mkfs.\(fs)") else {
                rows.append(Row(measure: "versions: data written on \(fs)", unit: .mebibytes, tools: [],
                                note: "skipped: mkfs.\(fs) is not installed", informational: true))
                continue
            }
            FileHandleOut.error("versions: bytes written on \(fs)...")
            do { rows.append(try versionBytes(fs: fs, mkfs: mkfs)) } catch { failures.append("versions bytes on \(fs): \(error)") }
        }
        return rows
    }

    private func versionBytes(fs: String, mkfs: [UInt8]) throws -> Row {
        func tool(_ name: String) -> [UInt8] { Spawn.which(name) ?? b(name) }
        let image = path("vbytes-\(fs).img"), mount = path("vbytes-\(fs)")
        let fd = open(Paths.display(image), O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0, ftruncate(fd, 1 << 30) == 0 else { throw BenchError("cannot make \(Paths.display(image))") }
        close(fd)
        try Spawn.run([mkfs, b(fs == "ext4" ? "-F" : "-f"), b("-q"), image], output: path("vbytes-\(fs).mkfs"))
        let attached = path("vbytes-\(fs).loop")
        try Spawn.run([tool("losetup"), b("--find"), b("--show"), image], output: attached)
        let device = Array((Machine.read(Paths.display(attached)) ?? "").utf8.split(separator: 0x0A).first ?? [])
        guard device.starts(with: b("/dev/loop")) else { throw BenchError("losetup printed \(Paths.display(device))") }
        defer { _ = try? Spawn.run([tool("losetup"), b("-d"), device], quiet: true) }
        try Paths.mkdirs(mount)
        try Spawn.run([tool("mount"), device, mount])
        defer { _ = try? Spawn.run([tool("umount"), mount], quiet: true) }
        let stat = b("/sys/block/") + Array(device.split(separator: 0x2F).last ?? []) + b("/stat")
        func sectorsWritten() throws -> UInt64 {
            let fields = (Machine.read(Paths.display(stat)) ?? "").split(separator: " ")
            guard fields.count > 6, let n = UInt64(fields[6]) else {
                throw BenchError("cannot read \(Paths.display(stat))")
            }
            return n
        }
        func sync(_ on: Bool) -> [[UInt8]] {
            [keepsync, b("sync"), b("--source"), Paths.join(mount, "src-\(on)"), b("--mirror"), Paths.join(mount, "mirror-\(on)"),
             b("--state"), path("vbytes-\(fs)-state-\(on)"), b("--log-level"), b("warning")] + (on ? [b("--keep-versions"), b("30d")] : [])
        }
        for on in [true, false] {
            try Paths.mkdirs(Paths.join(mount, "src-\(on)"))
            try fillOverwriteFiles(Paths.join(mount, "src-\(on)"))
            try Spawn.run(sync(on))
        }
        var extra = Samples(), atDevice = Samples()
        var written: [Bool: [Double]] = [:]
        for _ in 0..<options.repetitions {
            var bytes: [Bool: Double] = [:], calls: [Bool: Double] = [:]
            for on in [true, false] {
                try fillOverwriteFiles(Paths.join(mount, "src-\(on)"))
                try Spawn.run([tool("sync")])
                let before = try sectorsWritten(), wrote = Self.writeCalls()
                try Spawn.run(sync(on))
                calls[on] = Double(Self.writeCalls() - wrote)
                try Spawn.run([tool("sync")])
                bytes[on] = Double(try sectorsWritten() - before) * 512
                written[on, default: []].append(bytes[on]! / 1_048_576)
            }
            extra.values.append(calls[true]! - calls[false]!)
            atDevice.values.append((bytes[true]! - bytes[false]!) / 1_048_576)
        }
        let kept = (try? Paths.list(Paths.join(Paths.join(mount, "mirror-true"), ".keepsync-versions")))?.count ?? 0
        log("versions bytes on \(fs): with \(written[true] ?? []) MiB, without \(written[false] ?? []) MiB; \(kept) versions")
        let shown = { (v: [Double]?) in (v ?? []).map { Unit.mebibytes.format($0) }.joined(separator: ", ") }
        let deviceText = atDevice.values.map { Unit.mebibytes.format($0) }.joined(separator: ", ")
        return Row(measure: "versions: bytes written for versions on \(fs), 1,000 x 64 KiB overwritten", unit: .count,
                   tools: [("keepsync", extra)], absolute: 4096,
                   note: "bytes keepsync passed to write calls (wchar) in a sync with versions less one without (a file's data would be 65,536; what differs is text: status and summary name the versions); at the device, metadata included: \(deviceText) more (with: \(shown(written[true])); without: \(shown(written[false]))); \(kept) versions kept; a copy would add 62.5 MiB")
    }

    /// Bytes this process and its reaped children passed to write calls (`wchar` of
    /// `/proc/self/io`: a child's counts join its parent's when it is reaped).
    static func writeCalls() -> UInt64 {
        for line in (Machine.read("/proc/self/io") ?? "").split(separator: "\n") where line.hasPrefix("wchar:") {
            return UInt64(line.dropFirst(6).filter { $0 != " " }) ?? 0
        }
        return 0
    }
}
