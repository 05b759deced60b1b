import Glibc

extension Bench {
    // MARK: Versions (issue 40)

    /// The versions rows on a local mirror, then the same on the loopback remote (skipped,
    /// saying why, without OpenSSH), then the bytes written for versions on ext4, xfs and btrfs.
    func versionMeasures() throws -> [Row] {
        var rows = try versionRows(remote: nil)
        if let missing = BenchSSHD.missing {
            rows.append(Row(measure: "versions, remote rows", unit: .count, tools: [], note: "skipped: \(missing)", informational: true))
        } else {
            let remote = try BenchSSHD.start(in: path("sshd-versions"), skipBashrc: !options.remoteBashrc, shellStartup: 0)
            defer { remote.stop() }
            rows += try versionRows(remote: remote)
        }
        return rows + versionBytesWritten()
    }

    /// `keepsync sync` with `--keep-versions 30d` against the same without, interleaved
    /// in each repetition on trees of their own: 1,000 files of 64 KiB rewritten in the
    /// source, then a sync; a directory of 10,000 files removed, then a sync (`--allow-mass-delete`);
    /// the live overwrite latency. To a local mirror, or over `remote`.
    func versionRows(remote: BenchSSHD?) throws -> [Row] {
        let at = remote == nil ? "" : "remote-"
        var overwrite: [String: Samples] = [:], removal: [String: Samples] = [:]
        let modes = [("keepsync", true), ("keepsync, versions off", false)]
        for (_, on) in modes {
            let source = path("versions-\(at)\(on)-src")
            try Paths.mkdirs(Paths.join(source, "many"))
            try fillOverwriteFiles(source)
            for f in 0..<10_000 { try Paths.write(Paths.join(source, "many/f\(f)"), Array("file \(f)\n".utf8)) }
            _ = try Spawn.run(versionSync(on, remote: remote), output: versionLog(on, remote: remote))
        }
        for rep in 0..<options.repetitions {
            for (name, on) in modes {
                try fillOverwriteFiles(path("versions-\(at)\(on)-src"))
                var samples = overwrite[name] ?? Samples()
                record(&samples, "\(name) \(at)overwrite \(rep + 1)") { try timed { try Spawn.run(versionSync(on, remote: remote), output: versionLog(on, remote: remote)) } }
                overwrite[name] = samples
                log("versions \(at)overwrite \(rep + 1)/\(options.repetitions) \(name): \(samples.values.last.map { Unit.seconds.format($0) } ?? "-")")
            }
        }
        // One rm -r each (the second would find nothing to remove).
        for (name, on) in modes {
            Paths.remove(Paths.join(path("versions-\(at)\(on)-src"), "many"))
            var samples = Samples()
            // 10,000 of 11,000 entries: past the brake, on purpose.
            record(&samples, "\(name) \(at)rm -r") {
                try timed { try Spawn.run(versionSync(on, remote: remote) + [b("--allow-mass-delete")], output: versionLog(on, remote: remote)) }
            }
            removal[name] = samples
            log("versions \(at)rm -r of 10,000 files \(name): \(samples.values.last.map { Unit.seconds.format($0) } ?? "-")")
        }
        let latency = try versionLatency(remote: remote)
        let versions = Paths.join(path("versions-\(at)true-mirror"), ".keepsync-versions")
        let kept = (try? Paths.list(versions))?.filter { $0 != b(".keepsync-incoming") }.count ?? 0
        let label = remote == nil ? "versions" : "versions, remote"
        return [
            Row(measure: "\(label): overwrite 1,000 x 64 KiB, sync", unit: .seconds,
                tools: modes.map { ($0.0, overwrite[$0.0] ?? Samples()) }, targets: [("keepsync, versions off", 1.15)]),
            Row(measure: "\(label): rm -r of a 10,000-file directory, sync", unit: .seconds,
                tools: modes.map { ($0.0, removal[$0.0] ?? Samples()) }, targets: [("keepsync, versions off", 1.5)],
                note: "\(kept) entries in the versions directory's root after the runs (files linked, the directory moved whole)"),
            Row(measure: "\(label): live overwrite latency p50, \(options.latencyWrites) x 4 KiB over 10 files", unit: .milliseconds,
                tools: [("keepsync", latency.on.percentile(0.5)), ("keepsync, versions off", latency.off.percentile(0.5))],
                targets: [("keepsync, versions off", 1.2)],
                note: "keepsync run with --keep-versions 30d and without, writes alternating between their sources; \(latency.kept) versions made meanwhile (one per overwrite; thinning runs hourly)"),
        ]
    }

    /// 4 KiB overwrites of 10 files while `keepsync run` watches with versions and without.
    private func versionLatency(remote: BenchSSHD?) throws -> (on: Samples, off: Samples, kept: Int) {
        let at = remote == nil ? "" : "remote-"
        var agents: [Spawn] = []
        defer { for a in agents { a.stop() } }
        var trees: [([UInt8], [UInt8])] = []
        for on in [true, false] {
            let source = path("versions-live-\(at)\(on)-src"), mirror = path("versions-live-\(at)\(on)-mirror")
            try Paths.mkdirs(source)
            for f in 0..<10 { try Paths.write(Paths.join(source, "o\(f).dat"), Array("first \(f)\n".utf8)) }
            let target = remote.map { remoteMirror($0, mirror) } ?? mirror
            agents.append(try startKeepsync(source: source, mirror: target, state: path("versions-live-\(at)\(on)-state"),
                                            name: "versions-live-\(at)\(on)",
                                            extra: (on ? [b("--keep-versions"), b("30d")] : []) + (remote.map(sshOptions) ?? [])).0)
            trees.append((source, mirror))
        }
        let (on, off) = try latencySamples(keepsyncTree: trees[0], lsyncdTree: trees[1], writes: options.latencyWrites, slow: 0.05,
                                           names: ("keepsync", "keepsync, versions off"), overwriting: 10)
        let kept = (try? Paths.list(Paths.join(trees[0].1, ".keepsync-versions")))?.filter { $0 != b(".keepsync-incoming") }.count ?? 0
        return (on, off, kept)
    }

    /// `keepsync sync` of the versions tree, on or off, to a local mirror or over `remote`.
    private func versionSync(_ on: Bool, remote: BenchSSHD?) -> [[UInt8]] {
        let at = remote == nil ? "" : "remote-"
        let mirror = path("versions-\(at)\(on)-mirror")
        return [keepsync, b("sync"), b("--source"), path("versions-\(at)\(on)-src"),
                b("--mirror"), remote.map { remoteMirror($0, mirror) } ?? mirror,
                b("--state"), path("versions-\(at)\(on)-state"), b("--log-level"), b("warning")]
            + (on ? [b("--keep-versions"), b("30d")] : []) + (remote.map(sshOptions) ?? [])
    }

    /// Where those syncs' output goes (a failed one's last lines name its cause).
    private func versionLog(_ on: Bool, remote: BenchSSHD?) -> [UInt8] {
        path("versions-\(remote == nil ? "" : "remote-")\(on).log")
    }

    /// 1,000 files of 64 KiB of noise at the top of `source`.
    func fillOverwriteFiles(_ source: [UInt8]) throws {
        var block = [UInt8](repeating: 0, count: 64 << 10)
        for f in 0..<1000 {
            block.withUnsafeMutableBytes { raw in
                for w in 0..<(raw.count / 8) { raw.storeBytes(of: rng.next(), toByteOffset: w * 8, as: UInt64.self) }
            }
            try Paths.write(Paths.join(source, "o\(f)"), block)
        }
    }
}
