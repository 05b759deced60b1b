import Glibc

extension Bench {
    // MARK: Remote mirrors (issue 18)

    /// `USER@127.0.0.1:PATH`: the local directory `path` reached through `remote`.
    func remoteMirror(_ remote: BenchSSHD, _ path: [UInt8]) -> [UInt8] { b("\(remote.destination):") + path }

    /// keepsync's `--ssh` for `remote`.
    func sshOptions(_ remote: BenchSSHD) -> [[UInt8]] { [b("--ssh"), b(remote.sshCommand)] }

    /// keepsync with `--mirror root@127.0.0.1:DIR` against rsync over ssh and lsyncd's
    /// default.rsyncssh, through two loopback sshds in turn: one whose sessions' login
    /// shell starts at once (an empty profile) and one whose login shell first sleeps
    /// 0.25 s (a `~/.bashrc` running pyenv or conda): initial copy, 4 KiB latency and the
    /// burst on both, a renamed large file on the first; then the slow one's copy and burst
    /// against the empty one's. Skipped, saying why, without the OpenSSH programs.
    func remoteMeasures() throws -> [Row] {
        if let missing = BenchSSHD.missing {
            return [Row(measure: "remote rows", unit: .count, tools: [], note: "skipped: \(missing)", informational: true)]
        }
        var rows: [Row] = []
        var compared: [String: [Row]] = [:]
        for (i, startup) in [0.0, 0.25].enumerated() {
            let remote: BenchSSHD
            do {
                remote = try BenchSSHD.start(in: path("sshd-\(i)"), skipBashrc: !options.remoteBashrc, shellStartup: startup)
            } catch {
                failures.append("sshd with a shell start of \(startup) s: \(error)")
                continue
            }
            defer { remote.stop() }
            let profile = startup > 0 ? "login shell +\(Unit.milliseconds.format(startup))" : "empty profile"
            let cost = try remote.sshCost("true")
            let how = remote.skipsBashrc
                ? "sshd SetEnv SHLVL=1 (a bash started by sshd skips ~/.bashrc)\(startup > 0 ? " and BASH_ENV: every bash sshd starts sleeps \(startup) s first" : "")"
                : "the login shell runs ~/.bashrc (--remote-bashrc)\(startup > 0 ? ", then sleeps \(startup) s (BASH_ENV)" : "")"
            log("\(profile): ssh \(remote.destination) true over a master: \(Unit.milliseconds.format(cost)); \(how)")
            rows.append(Row(measure: "remote (\(profile)) floor: ssh \(remote.destination) true over a master, \(Unit.milliseconds.format(cost))",
                            unit: .milliseconds, tools: [], note: how, informational: true))
            var parts: [(String, (BenchSSHD) throws -> [Row])] = [
                ("copy", { try self.remoteCopyMeasures($0, profile: profile) }),
                ("latency", { try self.remoteLatencyMeasures($0, profile: profile) }),
                ("burst", { try self.burstMeasures(remote: $0, profile: profile) }),
            ]
            if startup == 0 { parts.append(("rename", { try self.remoteRenameMeasures($0, profile: profile) })) }
            for (name, body) in parts {
                FileHandleOut.error("remote \(name), \(profile)...")
                do {
                    let made = try body(remote)
                    rows += made
                    compared[name, default: []].append(contentsOf: made.prefix(1))
                } catch { failures.append("remote \(name), \(profile): \(error)") }
            }
        }
        // What the slow shell costs a copy and a burst: keepsync against itself.
        for name in ["copy", "burst"] {
            guard let pair = compared[name], pair.count == 2, let slow = pair[1].samples("keepsync"),
                  let fast = pair[0].samples("keepsync") else { continue }
            rows.append(Row(measure: "remote \(name): login shell +250 ms against the empty profile", unit: .seconds,
                            tools: [("keepsync", slow), ("keepsync, empty profile", fast)],
                            targets: [("keepsync, empty profile", 1.2)]))
        }
        return rows
    }

    /// The main tree to `remote`: `keepsync sync` against `rsync -a --fsync -e SSH`.
    func remoteCopyMeasures(_ remote: BenchSSHD, profile: String) throws -> [Row] {
        let (source, bytes) = try mainTree()
        var k = Samples(), r = Samples()
        for rep in 0..<options.repetitions {
            let tag = "\(remote.port)-\(rep)"
            let km = path("remote-copy-keepsync-\(tag)"), ks = path("remote-copy-state-\(tag)"), rm = path("remote-copy-rsync-\(tag)")
            let what = "keepsync sync to \(remote.destination), repetition \(rep + 1)"
            record(&k, what) {
                try timed {
                    try Spawn.run([keepsync, b("sync"), b("--source"), source, b("--mirror"), remoteMirror(remote, km), b("--state"), ks,
                                   b("--log-level"), b("warning")] + sshOptions(remote))
                }
            }
            _ = verify(source, km, what, into: &k)
            if let rsync {
                let what = "rsync -a --fsync -e ssh, repetition \(rep + 1)"
                record(&r, what) {
                    try timed {
                        try Spawn.run([rsync, b("-a"), b("--fsync"), b("-e"), b(remote.sshCommand), source + b("/"), remoteMirror(remote, rm) + b("/")])
                    }
                }
                _ = verify(source, rm, what, into: &r)
            }
            log("remote copy (\(profile)) \(rep + 1)/\(options.repetitions): keepsync \(k.values.last.map { Unit.seconds.format($0) } ?? "-"), rsync -a --fsync \(r.values.last.map { Unit.seconds.format($0) } ?? "-")")
        }
        return [
            Row(measure: "remote (\(profile)) initial copy, \(options.files / 1000)k files / \(bytes >> 20) MiB, \(cold ? "cold" : "warm"), durable",
                unit: .seconds, tools: [("keepsync", k), ("rsync -a", r)], targets: [("rsync -a", 1.0)],
                note: "rsync -a: rsync -a --fsync -e SSH SRC/ \(remote.destination):DST/, SSH the words keepsync's --ssh gets"),
        ]
    }

    /// 4 KiB writes while `keepsync run` and lsyncd rsyncssh watch, alternating.
    func remoteLatencyMeasures(_ remote: BenchSSHD, profile: String) throws -> [Row] {
        let tag = remote.port
        let kSource = path("remote-latency-keepsync-src-\(tag)"), kMirror = path("remote-latency-keepsync-mirror-\(tag)")
        let lSource = path("remote-latency-lsyncd-src-\(tag)"), lMirror = path("remote-latency-lsyncd-mirror-\(tag)")
        for dir in [kSource, lSource] {
            try Paths.mkdirs(dir)
            try Paths.write(Paths.join(dir, "existing.txt"), Array("already here\n".utf8))
        }
        let (agent, _) = try startKeepsync(source: kSource, mirror: remoteMirror(remote, kMirror), state: path("remote-latency-keepsync-state-\(tag)"),
                                           name: "remote-latency-keepsync-\(tag)", extra: sshOptions(remote))
        defer { agent.stop() }
        var lsyncdAgent: Spawn?
        if lsyncd != nil {
            do { lsyncdAgent = try startLsyncd(source: lSource, mirror: lMirror, name: "remote-latency-lsyncd-\(tag)", remote: remote).0 } catch {
                failures.append("lsyncd rsyncssh: \(error)")
            }
        }
        defer { lsyncdAgent?.stop() }
        let (k, l) = try latencySamples(keepsyncTree: (kSource, kMirror), lsyncdTree: lsyncdAgent == nil ? nil : (lSource, lMirror),
                                        writes: options.latencyWrites, slow: 0.1)
        return [
            Row(measure: "remote (\(profile)) latency p50, \(options.latencyWrites) x 4 KiB", unit: .milliseconds,
                tools: [("keepsync", k.percentile(0.5)), ("lsyncd", l.percentile(0.5))], targets: [("lsyncd", 0.2)], absolute: 0.025),
            Row(measure: "remote (\(profile)) latency p99", unit: .milliseconds,
                tools: [("keepsync", k.percentile(0.99)), ("lsyncd", l.percentile(0.99))], targets: [("lsyncd", nil)], absolute: 0.05),
        ]
    }

    /// A large file renamed in the source while both agents watch: seconds from the
    /// rename until the new name is in the mirror, and the content bytes sent (the remote
    /// is this machine: 0 when the mirror's file kept its inode, else its size).
    func remoteRenameMeasures(_ remote: BenchSSHD, profile: String) throws -> [Row] {
        let mebibytes = options.quick ? 256 : 1024
        let size = "\(mebibytes >= 1024 ? "\(mebibytes >> 10) GiB" : "\(mebibytes) MiB")"
        var agents: [(tool: String, source: [UInt8], mirror: [UInt8], agent: Spawn)] = []
        defer { for a in agents { a.agent.stop() } }
        for tool in ["keepsync", "lsyncd"] where tool == "keepsync" || lsyncd != nil {
            let source = path("remote-rename-\(tool)-src"), mirror = path("remote-rename-\(tool)-mirror")
            try Paths.mkdirs(source)
            try writeLarge(Paths.join(source, "big-0.bin"), mebibytes: mebibytes)
            let started = Clock.now()
            let agent = tool == "keepsync"
                ? try startKeepsync(source: source, mirror: remoteMirror(remote, mirror), state: path("remote-rename-keepsync-state"),
                                    name: "remote-rename-keepsync", extra: sshOptions(remote)).0
                : try startLsyncd(source: source, mirror: mirror, name: "remote-rename-lsyncd", remote: remote).0
            let until = Clock.now() + 600
            while (Paths.lstat(Paths.join(mirror, "big-0.bin"))?.st_size ?? -1) != mebibytes << 20 && Clock.now() < until { usleep(20_000) }
            log("\(tool): \(size) file in the mirror after \(Unit.seconds.format(Clock.now() - started))")
            agents.append((tool: tool, source: source, mirror: mirror, agent: agent))
        }
        var times: [String: Samples] = [:], sent: [String: Samples] = [:]
        for rep in 0..<options.repetitions {
            for a in agents {
                let old = b("big-\(rep).bin"), new = b("big-\(rep + 1).bin")
                var t = times[a.tool] ?? Samples(), s = sent[a.tool] ?? Samples()
                defer { times[a.tool] = t; sent[a.tool] = s }
                guard let before = Paths.lstat(Paths.join(a.mirror, old)) else {
                    let line = "\(a.tool) rename \(rep + 1): \(Paths.display(old)) is not in the mirror"
                    t.failures.append(line)
                    failures.append(line)
                    continue
                }
                let watch = try MirrorWatch([a.mirror])
                let renamed = Paths.with(Paths.join(a.source, old)) { o in Paths.with(Paths.join(a.source, new)) { Glibc.rename(o, $0) } }
                let start = Clock.now()
                try Paths.check(renamed, "rename", Paths.join(a.source, old))
                guard let arrived = watch.wait(in: 0, for: new, timeout: 120), let after = Paths.lstat(Paths.join(a.mirror, new)) else {
                    let line = "\(a.tool) rename \(rep + 1): \(Paths.display(new)) not in the mirror after 120 s"
                    t.failures.append(line)
                    failures.append(line)
                    continue
                }
                t.values.append(arrived - start)
                s.values.append(after.st_ino == before.st_ino ? 0 : Double(after.st_size))
                // The old name must go before the next rename is timed.
                let gone = Clock.now() + 30
                while Paths.exists(Paths.join(a.mirror, old)) && Clock.now() < gone { usleep(10_000) }
                log("remote rename \(rep + 1)/\(options.repetitions) \(a.tool): \(Unit.milliseconds.format(arrived - start)), inode \(after.st_ino == before.st_ino ? "kept" : "changed")")
                usleep(300_000)
            }
        }
        return [
            Row(measure: "remote (\(profile)) rename of a \(size) file, to in the mirror", unit: .seconds,
                tools: [("keepsync", times["keepsync"] ?? Samples()), ("lsyncd", times["lsyncd"] ?? Samples())],
                targets: [("lsyncd", nil)], absolute: 0.1),
            Row(measure: "remote (\(profile)) rename: content bytes sent", unit: .count,
                tools: [("keepsync", sent["keepsync"] ?? Samples()), ("lsyncd", sent["lsyncd"] ?? Samples())], absolute: 0,
                note: "0 when the mirror's file kept its inode (renamed there), else the file's size"),
        ]
    }

    /// A file of `mebibytes` MiB of noise (each MiB stamped with its index).
    func writeLarge(_ path: [UInt8], mebibytes: Int) throws {
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        chunk.withUnsafeMutableBytes { raw in
            for w in 0..<(raw.count / 8) { raw.storeBytes(of: rng.next(), toByteOffset: w * 8, as: UInt64.self) }
        }
        let fd = Paths.with(path) { open($0, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        guard fd >= 0 else { throw BenchError("open \(Paths.display(path)): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        for m in 0..<mebibytes {
            chunk.withUnsafeMutableBytes { $0.storeBytes(of: UInt64(m), toByteOffset: 0, as: UInt64.self) }
            try chunk.withUnsafeBytes { raw in
                var done = 0
                while done < raw.count {
                    let n = Glibc.write(fd, raw.baseAddress! + done, raw.count - done)
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { throw BenchError("write \(Paths.display(path)): \(String(cString: strerror(errno)))") }
                    done += n
                }
            }
        }
    }
}
