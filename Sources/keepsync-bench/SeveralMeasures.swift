import Glibc

extension Bench {
    // MARK: Several mirrors (issue 41)

    /// One agent serving two mirrors against one serving a single mirror, in the same
    /// run, interleaved: 4 KiB latency to a local mirror while the other mirror's host is
    /// unreachable, a burst to two local mirrors, and a cold start to READY=1 with its
    /// peak RSS. Every run gets its default state directories under a scratch
    /// `XDG_STATE_HOME` (`--state` is refused with several mirrors).
    func severalMeasures() throws -> [Row] {
        var rows: [Row] = []
        let parts: [(String, () throws -> [Row])] = [
            ("latency", severalLatency), ("burst", severalBurst), ("startup", severalStartup),
        ]
        for (name, body) in parts where options.wants("several", part: name) {
            FileHandleOut.error("several \(name)...")
            do { rows += try body() } catch { failures.append("several \(name): \(error)") }
        }
        return rows
    }

    /// The environment of every run of this phase: state and (empty) configuration in the
    /// work directory, so no user's file is read.
    var severalEnvironment: [String: String] {
        ["XDG_STATE_HOME": Paths.display(path("several-xdg-state")), "XDG_CONFIG_HOME": Paths.display(path("several-xdg-config"))]
    }

    /// `--source SOURCE --mirror M …` for `keepsync`, warnings only.
    func severalArguments(_ source: [UInt8], _ mirrors: [[UInt8]]) -> [[UInt8]] {
        [b("--source"), source] + mirrors.flatMap { [b("--mirror"), $0] } + [b("--log-level"), b("warning")]
    }

    /// 4 KiB writes alternating between two agents: one mirroring to a local directory and
    /// to a remote one whose sshd was stopped after a first `keepsync sync` to it, and one
    /// mirroring to a local directory alone.
    func severalLatency() throws -> [Row] {
        let n = options.latencyWrites
        let measure = "several mirrors: latency p50, \(n) x 4 KiB, local mirror while a remote mirror is unreachable"
        if let missing = BenchSSHD.missing {
            return [Row(measure: measure, unit: .milliseconds, tools: [], note: "skipped: \(missing)", informational: true)]
        }
        let twoSource = path("several-latency-two-src"), oneSource = path("several-latency-one-src")
        let twoLocal = path("several-latency-two-local"), twoRemote = path("several-latency-two-remote")
        let oneLocal = path("several-latency-one-local")
        for dir in [twoSource, oneSource] {
            try Paths.mkdirs(dir)
            try Paths.write(Paths.join(dir, "existing.txt"), Array("already here\n".utf8))
        }
        // The remote mirror gets its records while its host is up, then the host goes.
        let remote = try BenchSSHD.start(in: path("sshd-several"), skipBashrc: !options.remoteBashrc)
        let remoteSpec = remoteMirror(remote, twoRemote), ssh = sshOptions(remote)
        do {
            try Spawn.run([keepsync, b("sync")] + severalArguments(twoSource, [remoteSpec]) + ssh, extra: severalEnvironment)
        } catch {
            remote.stop()
            throw error
        }
        remote.stop()
        guard !BenchSSHD.listening(port: remote.port) else { throw BenchError("127.0.0.1:\(remote.port) still answers after sshd stopped") }
        let how = "the remote mirror (\(remote.destination):DIR, synced once by keepsync sync) is unreachable: its loopback sshd was stopped, connect to 127.0.0.1:\(remote.port) refused"

        let (two, _) = try startRun(severalArguments(twoSource, [twoLocal, remoteSpec]) + ssh, name: "several-latency-two",
                                    environment: severalEnvironment)
        defer { two.stop() }
        let (one, _) = try startRun(severalArguments(oneSource, [oneLocal]), name: "several-latency-one", environment: severalEnvironment)
        defer { one.stop() }
        // The agent must have seen the host unreachable, or the row measures nothing.
        guard let before = awaitStatus(mirror: twoRemote, pid: two.pid, containing: "unreachable", timeout: 20) else {
            throw BenchError("the two-mirror agent's status.json never said the remote mirror is unreachable (see \(Paths.display(path("several-latency-two.log"))))")
        }
        log("remote mirror's status before the writes: \(before.summary)")
        let (k, o) = try latencySamples(keepsyncTree: (twoSource, twoLocal), lsyncdTree: (oneSource, oneLocal), writes: n, slow: 0.02,
                                        names: ("keepsync", "keepsync, one mirror"))
        let after = awaitStatus(mirror: twoRemote, pid: two.pid, containing: "unreachable", timeout: 5)
        log("remote mirror's status after the writes: \(after?.summary ?? "no longer unreachable")")
        var k50 = k.percentile(0.5)
        if after == nil {
            let line = "several latency: the remote mirror was no longer reported unreachable after the writes"
            k50.failures.append(line)
            failures.append(line)
        }
        let seen = "its status.json (pid \(two.pid)) before the writes: \(before.summary); after: \(after?.summary ?? "-")"
        return [
            Row(measure: measure, unit: .milliseconds, tools: [("keepsync", k50), ("keepsync, one mirror", o.percentile(0.5))],
                targets: [("keepsync, one mirror", 1.2)],
                note: "one agent with --mirror LOCAL --mirror HOST:DIR against one with --mirror LOCAL alone, writes alternating; one mirror: \(o.percentile(0.5).cell(.milliseconds)); \(how); \(seen)"),
            Row(measure: "several mirrors: latency p99, the same writes", unit: .milliseconds,
                tools: [("keepsync", k.percentile(0.99)), ("keepsync, one mirror", o.percentile(0.99))],
                targets: [("keepsync, one mirror", nil)], note: "one mirror: \(o.percentile(0.99).cell(.milliseconds))", informational: true),
        ]
    }

    /// `burstFiles` files at once into a tree watched by an agent with two local mirrors,
    /// until both hold every file and verify; against an agent with one, order alternating.
    func severalBurst() throws -> [Row] {
        var two = Samples(), one = Samples()
        var directoryTimes = 0
        for rep in 0..<options.repetitions {
            for both in rep % 2 == 0 ? [true, false] : [false, true] {
                let tag = "several-burst-\(both ? "two" : "one")-\(rep)"
                let source = path("\(tag)-src")
                let mirrors = (both ? ["a", "b"] : ["a"]).map { path("\(tag)-\($0)") }
                var samples = both ? two : one
                defer { if both { two = samples } else { one = samples } }
                try seedBurstSource(source)
                let agent: Spawn
                do { agent = try startRun(severalArguments(source, mirrors), name: tag, environment: severalEnvironment).0 } catch {
                    samples.failures.append("\(tag): \(error)")
                    failures.append("\(tag): \(error)")
                    continue
                }
                let expected = try writeBurst(source)
                let outcome = awaitBurst(source: source, mirrors: mirrors, expected: expected, last: Clock.now())
                agent.stop()
                directoryTimes += outcome.directoryTimes
                if let seconds = outcome.seconds { samples.values.append(seconds) } else {
                    let line = "\(tag): \(outcome.failure ?? "no time")"
                    samples.failures.append(line)
                    failures.append(line)
                }
                log("several burst \(rep + 1)/\(options.repetitions), \(both ? "two mirrors" : "one mirror"): \(samples.values.last.map { Unit.seconds.format($0) } ?? "-"), \(outcome.missing) missing")
            }
        }
        return [
            Row(measure: "several mirrors: burst of \(options.burstFiles / 1000)k files to two local mirrors, to converged on both", unit: .seconds,
                tools: [("keepsync", two), ("keepsync, one mirror", one)], targets: [("keepsync, one mirror", 1.5)],
                note: "one agent with two --mirror against one with one, order alternating; one mirror: \(one.cell(.seconds)); \(directoryTimes) directory mtimes differ"),
        ]
    }

    /// `keepsync run` on the unchanged watched tree with two local mirrors until READY=1,
    /// cold, and its peak RSS; against the same run with the first mirror alone (the same
    /// state directory), order alternating.
    func severalStartup() throws -> [Row] {
        let source = try watchedTree()
        let mirrors = [path("several-watched-a"), path("several-watched-b")]
        let first = try Spawn.run([keepsync, b("sync")] + severalArguments(source, mirrors), extra: severalEnvironment)
        log("keepsync sync of the watched tree to two mirrors: \(Unit.seconds.format(first))")
        var startup = ["two": Samples(), "one": Samples()], rss = ["two": Samples(), "one": Samples()]
        for rep in 0..<options.repetitions {
            for which in rep % 2 == 0 ? ["two", "one"] : ["one", "two"] {
                var s = startup[which]!, r = rss[which]!
                record(&s, "keepsync run startup with \(which) mirror(s), repetition \(rep + 1)") {
                    if cold { Machine.dropCaches() }
                    let (agent, ready) = try startRun(severalArguments(source, which == "two" ? mirrors : [mirrors[0]]),
                                                      name: "several-startup-\(which)-\(rep)", environment: severalEnvironment)
                    usleep(200_000)
                    if let peak = Machine.peakRSS(agent.pid) { r.values.append(Double(peak) / 1024) }
                    agent.stop()
                    return ready
                }
                startup[which] = s
                rss[which] = r
            }
            func last(_ which: String) -> String {
                "\(startup[which]!.values.last.map { Unit.seconds.format($0) } ?? "-") (peak \(rss[which]!.values.last.map { Unit.mebibytes.format($0) } ?? "-"))"
            }
            log("several startup \(rep + 1)/\(options.repetitions): two mirrors \(last("two")), one mirror \(last("one"))")
        }
        for mirror in mirrors { _ = verify(source, mirror, "keepsync run with two mirrors, \(Paths.display(mirror))", into: &startup["two"]!) }
        let size = "\(options.watchedFiles / 1000)k files / \(options.watchedDirectories / 1000)k dirs"
        return [
            Row(measure: "several mirrors: startup to READY=1 with two local mirrors, \(size), \(cold ? "cold" : "warm")", unit: .seconds,
                tools: [("keepsync", startup["two"]!), ("keepsync, one mirror", startup["one"]!)], targets: [("keepsync, one mirror", 1.4)],
                note: "keepsync run --mirror A --mirror B against --mirror A alone (the same state directory), both up to date, order alternating; one mirror: \(startup["one"]!.cell(.seconds))"),
            Row(measure: "several mirrors: peak RSS with two local mirrors, \(size)", unit: .mebibytes,
                tools: [("keepsync", rss["two"]!), ("keepsync, one mirror", rss["one"]!)], targets: [("keepsync, one mirror", 1.5)],
                note: "VmHWM 0.2 s after READY=1; one mirror: \(rss["one"]!.cell(.mebibytes))"),
        ]
    }

    /// What one mirror's status.json says, in short.
    struct MirrorStatus {
        var state: String
        var pending: String
        var message: String
        /// The state, pending count and the error: its first line up to ssh's own words
        /// (a warning about the stopped sshd's key), then ssh's last line.
        var summary: String {
            let lines = message.split(separator: "\n").map(String.init)
            var head = lines.first ?? ""
            if let cut = head.split(separator: ":", omittingEmptySubsequences: false).firstIndex(where: { $0.hasPrefix(" Warning") }) {
                head = head.split(separator: ":", omittingEmptySubsequences: false)[..<cut].joined(separator: ":")
            }
            let tail = lines.count > 1 ? " / \(lines[lines.count - 1])" : ""
            return "state \(state), pending \(pending), error \"\(head)\(tail)\""
        }
    }

    /// The status.json under this phase's state home whose mirror ends with `mirror` and
    /// whose pid is `pid`, once an error message holds `containing`; nil after `timeout`.
    func awaitStatus(mirror: [UInt8], pid: pid_t, containing: String, timeout: Double) -> MirrorStatus? {
        let home = Paths.join(path("several-xdg-state"), "keepsync")
        let until = Clock.now() + timeout
        repeat {
            for dir in (try? Paths.list(home)) ?? [] {
                guard let text = Machine.read(Paths.display(Paths.join(Paths.join(home, dir), "status.json"))),
                      JSONText.string(text, "mirror")?.hasSuffix(Paths.display(mirror)) == true,
                      JSONText.number(text, "pid") == String(pid),
                      let message = JSONText.strings(text, "message").first(where: { $0.contains(containing) }) else { continue }
                return MirrorStatus(state: JSONText.string(text, "state") ?? "?", pending: JSONText.number(text, "pending") ?? "?",
                                    message: message)
            }
            usleep(100_000)
        } while Clock.now() < until
        return nil
    }
}

/// Just enough JSON reading for status.json's flat fields: `"key": "string"` and
/// `"key": number`, the first (or every) occurrence.
enum JSONText {
    static func string(_ text: String, _ key: String) -> String? { strings(text, key).first }

    /// Every string value of `key`, unescaped (`\uXXXX` kept as written).
    static func strings(_ text: String, _ key: String) -> [String] {
        let bytes = Array(text.utf8)
        var found: [String] = []
        var at = 0
        while let start = find(Array("\"\(key)\": \"".utf8), in: bytes, from: at) {
            var value: [UInt8] = [], escaped = false
            var index = start
            while index < bytes.count {
                let c = bytes[index]
                index += 1
                if escaped {
                    value.append(c == UInt8(ascii: "n") ? 0x0A : c == UInt8(ascii: "t") ? 0x09 : c)
                    escaped = false
                } else if c == UInt8(ascii: "\\") {
                    escaped = true
                } else if c == UInt8(ascii: "\"") {
                    break
                } else {
                    value.append(c)
                }
            }
            found.append(String(decoding: value, as: UTF8.self))
            at = index
        }
        return found
    }

    static func number(_ text: String, _ key: String) -> String? {
        let bytes = Array(text.utf8)
        guard let start = find(Array("\"\(key)\": ".utf8), in: bytes, from: 0) else { return nil }
        let digits = bytes[start...].prefix { ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }
        return digits.isEmpty ? nil : String(decoding: digits, as: UTF8.self)
    }

    /// The index just past the first `needle` in `bytes` at or after `from`.
    static func find(_ needle: [UInt8], in bytes: [UInt8], from: Int) -> Int? {
        guard needle.count <= bytes.count else { return nil }
        var i = from
        while i + needle.count <= bytes.count {
            if bytes[i] == needle[0] && Array(bytes[i..<(i + needle.count)]) == needle { return i + needle.count }
            i += 1
        }
        return nil
    }
}
