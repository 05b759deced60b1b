import Glibc

extension Bench {
    // MARK: Propagation latency

    /// 4 KiB write-close operations, alternating between a keepsync and an lsyncd tree:
    /// time from the close until the complete file is in that tool's mirror.
    func latencyMeasures() throws -> [Row] {
        let kSource = path("latency-keepsync-src"), kMirror = path("latency-keepsync-mirror")
        let lSource = path("latency-lsyncd-src"), lMirror = path("latency-lsyncd-mirror")
        for dir in [kSource, lSource] {
            try Paths.mkdirs(dir)
            try Paths.write(Paths.join(dir, "existing.txt"), Array("already here\n".utf8))
        }
        let (agent, _) = try startKeepsync(source: kSource, mirror: kMirror, state: path("latency-keepsync-state"), name: "latency-keepsync")
        defer { agent.stop() }
        var lsyncdAgent: Spawn?
        if lsyncd != nil {
            do { lsyncdAgent = try startLsyncd(source: lSource, mirror: lMirror, name: "latency-lsyncd").0 } catch { log("\(error)") }
        }
        defer { lsyncdAgent?.stop() }
        let (k, l) = try latencySamples(keepsyncTree: (kSource, kMirror), lsyncdTree: lsyncdAgent == nil ? nil : (lSource, lMirror),
                                        writes: options.latencyWrites, slow: 0.02)
        let n = options.latencyWrites
        return [
            Row(measure: "latency p50, \(n) x 4 KiB", unit: .milliseconds, tools: [("keepsync", k.percentile(0.5)), ("lsyncd", l.percentile(0.5))],
                targets: [("lsyncd", nil)], absolute: 0.002),
            Row(measure: "latency p90", unit: .milliseconds, tools: [("keepsync", k.percentile(0.9)), ("lsyncd", l.percentile(0.9))],
                targets: [("lsyncd", nil)]),
            Row(measure: "latency p99", unit: .milliseconds, tools: [("keepsync", k.percentile(0.99)), ("lsyncd", l.percentile(0.99))],
                targets: [("lsyncd", nil)], absolute: 0.008),
            Row(measure: "latency max", unit: .milliseconds, tools: [("keepsync", k.percentile(1)), ("lsyncd", l.percentile(1))],
                targets: [("lsyncd", nil)]),
        ]
    }

    /// `writes` 4 KiB write-closes alternating between keepsync's (source, mirror) and lsyncd's (nil:
    /// keepsync alone): seconds from each close until the complete file is in that tool's
    /// mirror. Writes slower than `slow` are logged.
    func latencySamples(keepsyncTree: ([UInt8], [UInt8]), lsyncdTree: ([UInt8], [UInt8])?, writes: Int, slow: Double,
                        names: (String, String) = ("keepsync", "lsyncd"), overwriting: Int? = nil) throws -> (Samples, Samples) {
        let (kSource, kMirror) = keepsyncTree
        let (lSource, lMirror) = lsyncdTree ?? ([], [])
        let kWatch = try MirrorWatch([kMirror])
        let lWatch = lsyncdTree == nil ? nil : try MirrorWatch([lMirror])
        var k = Samples(), l = Samples()
        var content = [UInt8](repeating: 0, count: 4096)
        for i in 0..<writes {
            for (tool, source, mirror, watch) in [(names.0, kSource, kMirror, Optional(kWatch)), (names.1, lSource, lMirror, lWatch)] {
                guard let watch else { continue }
                content.withUnsafeMutableBytes { raw in
                    for w in 0..<(4096 / 8) { raw.storeBytes(of: rng.next(), toByteOffset: w * 8, as: UInt64.self) }
                }
                // New names, or `overwriting` files over and over (`o0.dat` …).
                let name = overwriting.map { b("o\(i % $0).dat") } ?? b("w\(i).dat")
                try Paths.write(Paths.join(source, name), content)
                let closed = Clock.now()
                var samples = tool == names.0 ? k : l
                if let arrived = watch.wait(in: 0, for: name, timeout: 10) {
                    let got = Machine.readBytes(Paths.join(mirror, name))
                    if got == content {
                        samples.values.append(arrived - closed)
                        if arrived - closed > slow { log("\(tool): write \(i + 1) took \(Unit.milliseconds.format(arrived - closed))") }
                    } else {
                        let line = "\(tool): \(Paths.display(name)) arrived incomplete (\(got?.count ?? 0) bytes)"
                        samples.failures.append(line)
                        failures.append(line)
                    }
                } else {
                    let line = "\(tool): \(Paths.display(name)) not in the mirror after 10 s"
                    samples.failures.append(line)
                    failures.append(line)
                }
                if tool == names.0 { k = samples } else { l = samples }
                usleep(20_000)
            }
        }
        log("latency: \(k.values.count) \(names.0), \(l.values.count) \(names.1) samples")
        return (k, l)
    }

    // MARK: Burst

    /// `burstFiles` files written at once (three quarters in new directories) into a
    /// watched tree: seconds from the last close until the mirror holds every file.
    /// `remote`: both tools mirror through that sshd (keepsync `--ssh`, lsyncd rsyncssh).
    func burstMeasures(remote: BenchSSHD? = nil, profile: String = "") throws -> [Row] {
        let prefix = remote.map { "remote-burst-\($0.port)" } ?? "burst"
        var k = Samples(), l = Samples(), km = Samples(), lm = Samples()
        var directoryNotes: [String] = []
        let reps = options.quick ? 1 : 2
        for rep in 0..<reps {
            for tool in ["keepsync", "lsyncd"] {
                if tool == "lsyncd" && lsyncd == nil { continue }
                let source = path("\(prefix)-\(tool)-\(rep)-src"), mirror = path("\(prefix)-\(tool)-\(rep)-mirror")
                try seedBurstSource(source)
                let agent: Spawn
                do {
                    let name = "\(prefix)-\(tool)-\(rep)"
                    agent = tool == "keepsync"
                        ? try startKeepsync(source: source, mirror: remote.map { remoteMirror($0, mirror) } ?? mirror,
                                            state: path("\(name)-state"), name: name, extra: remote.map(sshOptions) ?? []).0
                        : try startLsyncd(source: source, mirror: mirror, name: name, remote: remote).0
                } catch {
                    failures.append("\(tool) \(prefix): \(error)")
                    continue
                }
                defer { agent.stop() }
                let expected = try writeBurst(source)
                let outcome = awaitBurst(source: source, mirrors: [mirror], expected: expected, last: Clock.now())
                var samples = tool == "keepsync" ? k : l
                var counted = tool == "keepsync" ? km : lm
                counted.values.append(Double(outcome.missing))
                if outcome.directoryTimes > 0 { directoryNotes.append("\(tool) \(prefix) \(rep + 1): \(outcome.directoryTimes) directory mtimes differ") }
                if let seconds = outcome.seconds {
                    samples.values.append(seconds)
                } else {
                    let line = "\(tool) \(prefix) \(rep + 1): \(outcome.failure ?? "no time")"
                    samples.failures.append(line)
                    failures.append(line)
                }
                log("\(prefix) \(rep + 1)/\(reps) \(tool): \(samples.values.last.map { Unit.seconds.format($0) } ?? "-"), \(outcome.missing) missing")
                if tool == "keepsync" { k = samples; km = counted } else { l = samples; lm = counted }
            }
        }
        let note = directoryNotes.isEmpty ? "" : directoryNotes.joined(separator: "; ")
        if remote != nil {
            return [
                Row(measure: "remote (\(profile)) burst of \(options.burstFiles / 1000)k files, to converged", unit: .seconds,
                    tools: [("keepsync", k), ("lsyncd", l)], targets: [("lsyncd", 0.5)]),
                Row(measure: "remote (\(profile)) burst: files missing", unit: .count, tools: [("keepsync", km), ("lsyncd", lm)], absolute: 0, note: note),
            ]
        }
        return [
            Row(measure: "burst of \(options.burstFiles / 1000)k files, to converged", unit: .seconds,
                tools: [("keepsync", k), ("lsyncd", l)], targets: [("lsyncd", nil)], absolute: 1.5),
            Row(measure: "burst: files missing", unit: .count, tools: [("keepsync", km), ("lsyncd", lm)], absolute: 0, note: note),
        ]
    }

    /// The burst's starting tree: 50 directories of 10 small files.
    func seedBurstSource(_ source: [UInt8]) throws {
        for d in 0..<50 {
            try Paths.mkdirs(Paths.join(source, "old\(d)"))
            for f in 0..<10 { try Paths.write(Paths.join(source, "old\(d)/e\(f)"), Array("existing \(d)/\(f)\n".utf8)) }
        }
    }

    /// Writes `burstFiles` files of 0-4 KiB into `source` as fast as it can, three quarters
    /// in new directories of 100; returns their relative paths.
    func writeBurst(_ source: [UInt8]) throws -> [[UInt8]] {
        var expected: [[UInt8]] = []
        expected.reserveCapacity(options.burstFiles)
        let inNew = options.burstFiles * 3 / 4
        var content = [UInt8](repeating: 0x61, count: 4096)
        for j in 0..<options.burstFiles {
            let rel: [UInt8]
            if j < inNew {
                if j % 100 == 0 { try Paths.mkdir(Paths.join(source, "new\(j / 100)")) }
                rel = b("new\(j / 100)/n\(j)")
            } else {
                rel = b("old\(j % 50)/n\(j)")
            }
            let size = rng.below(4097)
            content.withUnsafeMutableBytes { $0.storeBytes(of: UInt64(j), toByteOffset: 0, as: UInt64.self) }
            try content.withUnsafeBytes { try Paths.write(Paths.join(source, rel), UnsafeRawBufferPointer(rebasing: $0[0..<size])) }
            expected.append(rel)
        }
        return expected
    }

    /// How a burst ended: seconds until converged (nil: it did not), files still missing,
    /// why it failed, and directory mtimes that differ (counted apart).
    struct BurstOutcome {
        var seconds: Double?
        var missing = 0
        var failure: String?
        var directoryTimes = 0
    }

    /// Seconds from `last` until every one of `expected` is in each of `mirrors` (checked
    /// together, up to 200 missing a look) and each mirror then verifies against `source`.
    func awaitBurst(source: [UInt8], mirrors: [[UInt8]], expected: [[UInt8]], last: Double) -> BurstOutcome {
        var missing = mirrors.indices.flatMap { m in expected.map { (m, $0) } }
        let until = last + 120
        while !missing.isEmpty && Clock.now() < until {
            var still: [(Int, [UInt8])] = []
            for (m, rel) in missing {
                if still.count >= 200 || !Paths.exists(Paths.join(mirrors[m], rel)) { still.append((m, rel)) }
            }
            missing = still
            if !missing.isEmpty { usleep(20_000) }
        }
        let arrived = Clock.now()
        var outcome = BurstOutcome(missing: missing.count)
        guard missing.isEmpty else {
            outcome.failure = "\(missing.count) files missing after 120 s"
            return outcome
        }
        // Converged when every file exists and every tree verifies.
        for mirror in mirrors {
            var diff: [String] = []
            let verifyUntil = Clock.now() + 30
            repeat {
                diff = TreeVerifier.differences(source, mirror, directoryTimes: false)
                if !diff.isEmpty { usleep(50_000) }
            } while !diff.isEmpty && Clock.now() < verifyUntil
            // Directory mtimes are checked apart: lsyncd (rsync per file) leaves them behind.
            outcome.directoryTimes += TreeVerifier.differences(source, mirror, limit: 1_000_000).count
            if !diff.isEmpty {
                outcome.failure = "every file arrived but \(Paths.display(mirror)) differs: \(diff.prefix(3).joined(separator: "; "))"
                return outcome
            }
        }
        outcome.seconds = arrived - last
        return outcome
    }
}

extension Machine {
    static func readBytes(_ path: [UInt8]) -> [UInt8]? {
        let fd = Paths.with(path) { open($0, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 8192)
        let n = Paths.readAll(fd, into: &buffer)
        return Array(buffer[..<n])
    }
}
