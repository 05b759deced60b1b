import Glibc

extension Bench {
    // MARK: --scale

    /// Issue 17's big tree (default 1M files of 0-4 KiB in 200k directories, more than the
    /// default inotify watch limit): initial copy and no-op rerun against rsync -a, then
    /// `keepsync run` on the unchanged tree (READY, memory, 4 KiB latency in watched and
    /// unwatched directories, CPU while quiet) and lsyncd the same way, the watch limit
    /// raised for it.
    func scaleMeasures() throws -> [Row] {
        let tree = ScaleTree(root: path("scale"), files: options.scaleFiles, leaves: options.scaleDirectories,
                             seed: options.seed ^ 0x5CA1E)
        try checkRoom(for: tree)
        let started = Clock.now()
        let bytes = try tree.build()
        let size = "\(Self.short(tree.files)) files / \(Self.short(tree.leaves)) dirs"
        log("scale tree: \(tree.files) files in \(tree.directories) directories, \(bytes >> 20) MiB, built in \(Unit.seconds.format(Clock.now() - started))")
        let copy = scaleCopies(tree, size: size)
        var rows = copy.rows
        let live = ScaleLive(tree: tree, candidates: pickCandidates(tree))
        var k = ScaleAgentSamples()
        do { k = try scaleKeepsync(live, mirror: copy.keepsyncMirror, state: copy.keepsyncState) } catch {
            // Its rows say FAILED; the copy rows stay.
            k.ready.failures.append("\(error)")
            failures.append("keepsync run on the scale tree: \(error)")
        }
        let l = lsyncd == nil ? ScaleAgentSamples() : scaleLsyncd(live, mirror: copy.rsyncMirror)
        let temperature = cold ? "cold" : "warm"
        let period = k.period.map { "\(Unit.count.fixed($0, 0)) s" } ?? "-"
        let unwatchedNote = k.unwatched.map { $0 == 0 ? "n/a (all watched)" : "\($0) of \(tree.directories) directories unwatched, polled every \(period) (status.json)" }
            ?? "n/a (status.json not read)"
        rows += [
            Row(measure: "run until READY=1, \(size), \(temperature)", unit: .seconds,
                tools: [("keepsync", k.ready), ("rsync -a", copy.rsyncNoop), ("lsyncd", l.ready)],
                targets: [("rsync -a", nil), ("lsyncd", nil)], absolute: 15,
                note: "rsync -a: its no-op rerun; lsyncd: until its startup rsync is done"
                    + (options.scaleWatchLimit.map { "; keepsync in a user namespace with \($0) inotify watches" } ?? "")),
            Row(measure: "VmHWM until READY=1", unit: .mebibytes, tools: [("keepsync", k.peak), ("lsyncd", l.peak)],
                targets: [("lsyncd", nil)], absolute: 160),
            Row(measure: "resident 5 s after READY=1", unit: .mebibytes, tools: [("keepsync", k.resident), ("lsyncd", l.resident)],
                targets: [("lsyncd", nil)], informational: true),
            Row(measure: "latency p50, \(k.watched.values.count) x 4 KiB, watched dirs", unit: .milliseconds,
                tools: [("keepsync", k.watched.percentile(0.5)), ("lsyncd", l.watched.percentile(0.5))],
                targets: [("lsyncd", nil)], absolute: 0.003,
                note: "one agent at a time, in the same \(live.candidates.count) sampled directories"),
            Row(measure: "latency p99, watched dirs", unit: .milliseconds,
                tools: [("keepsync", k.watched.percentile(0.99)), ("lsyncd", l.watched.percentile(0.99))],
                targets: [("lsyncd", nil)], absolute: 0.02),
            Row(measure: "latency max, watched dirs", unit: .milliseconds,
                tools: [("keepsync", k.watched.percentile(1)), ("lsyncd", l.watched.percentile(1))],
                targets: [("lsyncd", nil)], informational: true),
            Row(measure: "unwatched dirs (keepsync's status.json)", unit: .count,
                tools: [("keepsync", Samples(values: k.unwatched.map { [Double($0)] } ?? []))],
                note: k.unwatched == 0 ? "" : unwatchedNote, informational: true),
        ]
        if k.unwatched ?? 0 > 0 {
            rows += [
                Row(measure: "latency p50, \(k.unwatchedWrites.values.count) x 4 KiB, unwatched dirs", unit: .seconds,
                    tools: [("keepsync", k.unwatchedWrites.percentile(0.5))], informational: true),
                Row(measure: "latency max, unwatched dirs", unit: .seconds, tools: [("keepsync", k.unwatchedWrites.percentile(1))],
                    absolute: k.period, note: k.periodChange, informational: k.period == nil),
            ]
        } else {
            let why = k.unwatched == 0 ? "all watched" : "status.json not read"
            rows.append(Row(measure: "latency, unwatched dirs: n/a (\(why))", unit: .seconds, tools: [], informational: true))
        }
        rows += [
            Row(measure: "CPU of the quiet agent, \(options.scaleQuiet) s", unit: .percent,
                tools: [("keepsync", k.cpu), ("lsyncd", l.cpu)], targets: [("lsyncd", nil)], absolute: 2,
                note: "utime+stime from /proc/PID/stat, % of one core"),
        ]
        if tree.files != 1_000_000 || tree.leaves != 200_000 {
            rows[0].note = "the targets are the issue's for 1M files / 200k dirs"
        }
        return rows
    }

    /// "1M", "200k", "30k", or the number.
    static func short(_ n: Int) -> String {
        if n >= 1_000_000 && n % 1_000_000 == 0 { return "\(n / 1_000_000)M" }
        if n >= 1_000 && n % 1_000 == 0 { return "\(n / 1_000)k" }
        return "\(n)"
    }

    /// Refuses a run the work directory cannot hold: the tree and two copies per repetition.
    func checkRoom(for tree: ScaleTree) throws {
        var fs = statvfs()
        guard Paths.with(work, { statvfs($0, &fs) }) == 0 else { return }
        let copies = 1 + 2 * options.repetitions
        let inodes = copies * (tree.files + tree.directories)
        // A file of 1-4096 bytes takes a 4 KiB block, a directory at least one.
        let bytes = copies * (tree.files + tree.directories) * 4096
        let freeBytes = Int(fs.f_bavail) * Int(fs.f_frsize)
        log("room: \(copies) trees need about \(inodes) inodes and \(bytes >> 20) MiB; \(Paths.display(work)) has \(fs.f_favail) and \(freeBytes >> 20) MiB free")
        if fs.f_files > 0 && Int(fs.f_favail) < inodes || freeBytes < bytes {
            throw BenchError("not enough room in \(Paths.display(work)) for \(copies) trees of \(tree.files) files (fewer --reps, or --work elsewhere)")
        }
    }

    /// The copies of the scale tree, each tool in every repetition: the initial copy
    /// (cold, durable) and the no-op rerun right after it, with the peak RSS of each.
    func scaleCopies(_ tree: ScaleTree, size: String) -> ScaleCopies {
        var k = Samples(), r = Samples(), kRSS = Samples(), rRSS = Samples()
        var nk = Samples(), nr = Samples(), nkRSS = Samples(), nrRSS = Samples()
        var result = ScaleCopies()
        let source = tree.root
        for rep in 0..<options.repetitions {
            let km = path("scale-keepsync-\(rep)"), ks = path("scale-state-\(rep)"), rm = path("scale-rsync-\(rep)")
            let sync = [keepsync, b("sync"), b("--source"), source, b("--mirror"), km, b("--state"), ks, b("--log-level"), b("warning")]
            let rsyncArgs = rsync.map { [$0, b("-a"), source + b("/"), rm + b("/")] }
            recordMeasured(&k, &kRSS, "keepsync sync of the scale tree, repetition \(rep + 1)", sync)
            // Every copy of the first repetition is verified (a full compare of 1M files takes a minute).
            if rep == 0 { _ = verify(source, km, "keepsync sync of the scale tree", into: &k) }
            if let rsyncArgs {
                recordMeasured(&r, &rRSS, "rsync -a of the scale tree, repetition \(rep + 1)", rsyncArgs)
                if rep == 0 { _ = verify(source, rm, "rsync -a of the scale tree", into: &r) }
            }
            recordMeasured(&nk, &nkRSS, "keepsync no-op of the scale tree, repetition \(rep + 1)", sync)
            if let rsyncArgs { recordMeasured(&nr, &nrRSS, "rsync -a no-op of the scale tree, repetition \(rep + 1)", rsyncArgs) }
            log("scale \(rep + 1)/\(options.repetitions): initial copy keepsync \(Self.last(k, .seconds)) (peak \(Self.last(kRSS, .mebibytes))), rsync -a \(Self.last(r, .seconds)) (peak \(Self.last(rRSS, .mebibytes))); no-op \(Self.last(nk, .seconds)) (peak \(Self.last(nkRSS, .mebibytes))) vs \(Self.last(nr, .seconds)) (peak \(Self.last(nrRSS, .mebibytes)))")
            (result.keepsyncMirror, result.keepsyncState, result.rsyncMirror) = (km, ks, rm)
        }
        let temperature = cold ? "cold" : "warm"
        result.rsyncNoop = nr
        result.rows = [
            Row(measure: "initial copy, \(size), 0-4 KiB, \(temperature), durable", unit: .seconds,
                tools: [("keepsync", k), ("rsync -a", r)], targets: [("rsync -a", 0.8)]),
            Row(measure: "peak RSS, initial copy", unit: .mebibytes,
                tools: [("keepsync", kRSS), ("rsync -a", rRSS)], targets: [("rsync -a", nil)], absolute: 200),
            Row(measure: "no-op rerun, \(temperature)", unit: .seconds,
                tools: [("keepsync", nk), ("rsync -a", nr)], targets: [("rsync -a", 0.8)]),
            Row(measure: "peak RSS, no-op rerun", unit: .mebibytes,
                tools: [("keepsync", nkRSS), ("rsync -a", nrRSS)], targets: [("rsync -a", nil)], informational: true),
        ]
        return result
    }

    static func last(_ s: Samples, _ unit: Unit) -> String { s.values.last.map { unit.format($0) } ?? "-" }

    /// Up to 400 leaves, spread at random, whose mirror directories the latency writes are
    /// watched in (by the bench: one inotify watch each, taken before an agent starts).
    func pickCandidates(_ tree: ScaleTree) -> [Int] {
        var picked = Set<Int>()
        while picked.count < min(400, tree.leaves) { picked.insert(rng.below(tree.leaves)) }
        return picked.sorted()
    }

    /// `keepsync run` on the unchanged tree: READY, VmHWM and resident size in every
    /// repetition (cold), then in the last one the latency writes and the quiet CPU.
    func scaleKeepsync(_ live: ScaleLive, mirror: [UInt8], state: [UInt8]) throws -> ScaleAgentSamples {
        var s = ScaleAgentSamples()
        let watch = try MirrorWatch(live.candidates.map { Paths.join(mirror, live.tree.leaf($0)) })
        var wrapper: [[UInt8]] = []
        if let limit = options.scaleWatchLimit {
            guard let unshare = Spawn.which("unshare") else { throw BenchError("--scale-watch-limit needs unshare (util-linux)") }
            wrapper = [unshare, b("-U"), b("-r"), b("--"), b("/bin/sh"), b("-c"),
                       b("echo \(limit) > /proc/sys/user/max_inotify_watches && exec \"$0\" \"$@\"")]
        }
        var agent: Spawn?
        defer { agent?.stop() }
        var ready = Samples(), peak = Samples(), resident = Samples()
        for rep in 0..<options.repetitions {
            record(&ready, "keepsync run on the scale tree, repetition \(rep + 1)") {
                if cold { Machine.dropCaches() }
                let (started, seconds) = try startKeepsync(source: live.tree.root, mirror: mirror, state: state,
                                                           name: "scale-keepsync-\(rep)", wrapper: wrapper)
                agent = started
                if let kib = Machine.peakRSS(started.pid) { peak.values.append(Double(kib) / 1024) }
                usleep(5_000_000)
                if let kib = AgentProbe.residentKiB(started.pid) { resident.values.append(Double(kib) / 1024) }
                return seconds
            }
            log("keepsync run \(rep + 1)/\(options.repetitions): READY=1 after \(Self.last(ready, .seconds)), VmHWM \(Self.last(peak, .mebibytes)), resident \(Self.last(resident, .mebibytes)) 5 s later")
            if rep < options.repetitions - 1 { agent?.stop() }
        }
        (s.ready, s.peak, s.resident) = (ready, peak, resident)
        guard let agent, agent.poll() == nil else { throw BenchError("keepsync run is not running on the scale tree") }

        // What it watches (its inotify fdinfo) and what status.json says is left to polling.
        let statusFile = Paths.join(state, "status.json")
        let until = Clock.now() + 15
        var watching = false
        while !watching && Clock.now() < until {
            watching = Machine.read(Paths.display(statusFile))?.contains("\"state\": \"watching\"") ?? false
            if !watching { usleep(100_000) }
        }
        let report = AgentProbe.unwatched(statusFile: statusFile)
        s.unwatched = watching ? report?.directories ?? 0 : report?.directories
        s.period = report?.period
        if !watching { log("keepsync: status.json never said \"watching\" within 15 s of READY=1") }
        let inodes = AgentProbe.watchedInodes(agent.pid)
        var watchedCandidates: [Int] = []
        for (i, d) in live.candidates.enumerated() {
            if let st = Paths.lstat(Paths.join(live.tree.root, live.tree.leaf(d))), inodes.contains(UInt64(st.st_ino)) {
                watchedCandidates.append(i)
            }
        }
        var unwatchedLeaves: [Int] = []
        if s.unwatched ?? 0 > 0 {
            for d in 0..<live.tree.leaves {
                if let st = Paths.lstat(Paths.join(live.tree.root, live.tree.leaf(d))), !inodes.contains(UInt64(st.st_ino)) {
                    unwatchedLeaves.append(d)
                }
            }
        }
        log("keepsync watches \(inodes.count) of \(live.tree.directories) directories (its fdinfo); status.json: "
            + (report.map { "\($0.directories) unwatched, polled every \(Unit.count.fixed($0.period, 0)) s" } ?? "every directory watched")
            + "; \(watchedCandidates.count) of \(live.candidates.count) sampled directories watched, \(unwatchedLeaves.count) leaves unwatched")

        s.watched = latencyWrites(live, tool: "keepsync", mirror: mirror, watch: watch, among: watchedCandidates)
        if !unwatchedLeaves.isEmpty, let period = s.period {
            let count = max(5, options.scaleWrites / 5)
            var chosen: [Int] = []
            for _ in 0..<count { chosen.append(unwatchedLeaves[rng.below(unwatchedLeaves.count)]) }
            s.unwatchedWrites = unwatchedLatency(live, mirror: mirror, leaves: chosen, period: period, timeout: max(3 * period, 30),
                                                 statusFile: statusFile)
            // The period may have changed while the writes waited: each write is held to
            // what status said when it was made, so to the longer of the two figures.
            if let after = AgentProbe.unwatched(statusFile: statusFile)?.period, after != period {
                s.period = max(period, after)
                s.periodChange = "status said \(Unit.count.fixed(period, 0)) s before the writes, \(Unit.count.fixed(after, 0)) s after"
                log("keepsync: \(s.periodChange)")
            }
            log("keepsync, unwatched dirs: \(s.unwatchedWrites.values.count) writes, p50 \(Self.last(s.unwatchedWrites.percentile(0.5), .seconds)), max \(Self.last(s.unwatchedWrites.percentile(1), .seconds)) (poll period \(Unit.count.fixed(s.period ?? period, 0)) s)")
        }
        if let cpu = quietCPU(agent.pid) { s.cpu.values.append(cpu) }
        log("keepsync quiet: \(Self.last(s.cpu, .percent)) of one core over \(options.scaleQuiet) s; VmHWM now \(Machine.peakRSS(agent.pid).map { Unit.mebibytes.format(Double($0) / 1024) } ?? "-")")
        agent.stop()
        // The mirror holds every latency write, and nothing else changed.
        _ = verify(live.tree.root, mirror, "keepsync run on the scale tree", into: &s.watched)
        return s
    }

    /// lsyncd on the same tree, in its rsync copy, the watch limit raised for it (lsyncd
    /// exits when it runs out of watches) and put back afterwards.
    func scaleLsyncd(_ live: ScaleLive, mirror: [UInt8]) -> ScaleAgentSamples {
        var s = ScaleAgentSamples()
        let old = WatchLimit.current ?? 0
        let needed = options.scaleLsyncdWatches ?? (live.tree.directories + 65_536)
        var raised: Int?
        if old < needed {
            raised = WatchLimit.raise(to: needed)
            guard raised != nil else {
                let line = "lsyncd: fs.inotify.max_user_watches is \(old), below the \(needed) its rows need, and cannot be raised (not root?)"
                s.ready.failures.append(line)
                failures.append(line)
                return s
            }
            FileHandleOut.line("fs.inotify.max_user_watches raised from \(old) to \(needed) for lsyncd's rows (sysctl fs.inotify.max_user_watches=\(old) puts it back if this run is killed)")
        } else {
            log("lsyncd: fs.inotify.max_user_watches \(old) is enough for \(live.tree.directories) directories, not raised")
        }
        defer {
            if let raised {
                WatchLimit.restore(raised)
                FileHandleOut.line("fs.inotify.max_user_watches restored to \(WatchLimit.current.map(String.init) ?? "?") (it was \(raised) before lsyncd's rows)")
            }
        }
        do {
            let watch = try MirrorWatch(live.candidates.map { Paths.join(mirror, live.tree.leaf($0)) })
            if cold { Machine.dropCaches() }
            let (agent, ready) = try startLsyncd(source: live.tree.root, mirror: mirror, name: "scale-lsyncd")
            defer { agent.stop() }
            s.ready.values.append(ready)
            if let peak = Machine.peakRSS(agent.pid) { s.peak.values.append(Double(peak) / 1024) }
            usleep(5_000_000)
            if let resident = AgentProbe.residentKiB(agent.pid) { s.resident.values.append(Double(resident) / 1024) }
            log("lsyncd: startup sync done after \(Self.last(s.ready, .seconds)), VmHWM \(Self.last(s.peak, .mebibytes)), resident \(Self.last(s.resident, .mebibytes)); watches \(AgentProbe.watchedInodes(agent.pid).count) directories")
            s.watched = latencyWrites(live, tool: "lsyncd", mirror: mirror, watch: watch, among: Array(live.candidates.indices))
            if let cpu = quietCPU(agent.pid) { s.cpu.values.append(cpu) }
            log("lsyncd quiet: \(Self.last(s.cpu, .percent)) of one core over \(options.scaleQuiet) s")
        } catch {
            s.ready.failures.append("lsyncd: \(error)")
            failures.append("lsyncd on the scale tree: \(error)")
        }
        return s
    }

    /// `scaleWrites` new 4 KiB files, each in one of the sampled directories `among`
    /// (indices into the candidates), one at a time: close to arrival in the mirror.
    func latencyWrites(_ live: ScaleLive, tool: String, mirror: [UInt8], watch: MirrorWatch, among: [Int]) -> Samples {
        var samples = Samples()
        guard !among.isEmpty else {
            samples.failures.append("\(tool): none of the sampled directories is watched")
            failures.append(samples.failures[0])
            return samples
        }
        for i in 0..<options.scaleWrites {
            let c = among[i % among.count]
            let leaf = live.tree.leaf(live.candidates[c])
            let name = b("lat-\(tool)-\(i).dat")
            let content = randomBlock()
            do { try Paths.write(Paths.join(live.tree.root, leaf + [0x2F] + name), content) } catch {
                samples.failures.append("\(error)")
                break
            }
            let closed = Clock.now()
            if let arrived = watch.wait(in: c, for: name, timeout: 10), Machine.readBytes(Paths.join(mirror, leaf + [0x2F] + name)) == content {
                samples.values.append(arrived - closed)
                if arrived - closed > 0.05 { log("\(tool): write \(i + 1) took \(Unit.milliseconds.format(arrived - closed))") }
            } else {
                samples.failures.append("\(tool): \(Paths.display(leaf))/lat-\(tool)-\(i).dat not (complete) in the mirror after 10 s")
            }
            usleep(20_000)
        }
        failures += samples.failures
        log("\(tool), watched dirs: \(samples.values.count) writes, p50 \(Self.last(samples.percentile(0.5), .milliseconds)), p99 \(Self.last(samples.percentile(0.99), .milliseconds)), max \(Self.last(samples.percentile(1), .milliseconds))")
        return samples
    }

    /// New 4 KiB files in unwatched `leaves`: close to arrival in the mirror, found by
    /// looking every 2 ms (the bench has no watch there: the agent took them all). The
    /// writes land at random over two poll periods: one after another, each would come
    /// right after the poll that brought the previous one and wait a full period. Each
    /// write is held to the period status.json gave when it was made: a write that took
    /// longer is a failure.
    func unwatchedLatency(_ live: ScaleLive, mirror: [UInt8], leaves: [Int], period: Double, timeout: Double,
                          statusFile: [UInt8]) -> Samples {
        var samples = Samples()
        let start = Clock.now()
        var plan = leaves.enumerated().map { (i, d) in
            (rel: live.tree.leaf(d) + Array("/unw-\(i).dat".utf8), at: start + Double(rng.below(2_001)) / 1_000 * period)
        }
        plan.sort { $0.at < $1.at }
        var pending: [(rel: [UInt8], content: [UInt8], closed: Double, promised: Double)] = []
        var next = 0
        while next < plan.count || !pending.isEmpty {
            while next < plan.count && plan[next].at <= Clock.now() {
                let content = randomBlock()
                do {
                    let promised = AgentProbe.unwatched(statusFile: statusFile)?.period ?? period
                    try Paths.write(Paths.join(live.tree.root, plan[next].rel), content)
                    pending.append((plan[next].rel, content, Clock.now(), promised))
                } catch {
                    samples.failures.append("\(error)")
                }
                next += 1
            }
            pending = pending.filter { w in
                if Paths.exists(Paths.join(mirror, w.rel)), Machine.readBytes(Paths.join(mirror, w.rel)) == w.content {
                    let took = Clock.now() - w.closed
                    samples.values.append(took)
                    if took > w.promised {
                        samples.failures.append("keepsync: \(Paths.display(w.rel)) (unwatched) took \(Unit.seconds.format(took)) while status said \(Unit.count.fixed(w.promised, 0)) s")
                    }
                    return false
                }
                if Clock.now() - w.closed > timeout {
                    samples.failures.append("keepsync: \(Paths.display(w.rel)) (unwatched) not in the mirror after \(Unit.seconds.format(timeout))")
                    return false
                }
                return true
            }
            usleep(2_000)
        }
        failures += samples.failures
        return samples
    }

    /// 4 KiB of noise.
    func randomBlock() -> [UInt8] {
        var content = [UInt8](repeating: 0, count: 4096)
        content.withUnsafeMutableBytes { raw in
            for w in 0..<(4096 / 8) { raw.storeBytes(of: rng.next(), toByteOffset: w * 8, as: UInt64.self) }
        }
        return content
    }

    /// The agent's CPU over `scaleQuiet` seconds of no changes (after 3 s to settle), in %
    /// of one core.
    func quietCPU(_ pid: pid_t) -> Double? {
        usleep(3_000_000)
        guard let before = AgentProbe.cpuSeconds(pid) else { return nil }
        let start = Clock.now()
        for _ in 0..<options.scaleQuiet { usleep(1_000_000) }
        guard let after = AgentProbe.cpuSeconds(pid) else { return nil }
        return (after - before) / (Clock.now() - start) * 100
    }
}

/// The scale tree and the leaves the latency writes go to.
struct ScaleLive {
    let tree: ScaleTree
    /// Leaf indices.
    let candidates: [Int]
}

/// The copy rows and the mirrors the live rows run on.
struct ScaleCopies {
    var rows: [Row] = []
    var keepsyncMirror: [UInt8] = []
    var keepsyncState: [UInt8] = []
    var rsyncMirror: [UInt8] = []
    var rsyncNoop = Samples()
}

/// One agent's live measures on the scale tree.
struct ScaleAgentSamples {
    var ready = Samples(), peak = Samples(), resident = Samples()
    var watched = Samples(), unwatchedWrites = Samples(), cpu = Samples()
    /// How the poll period status gave changed during the unwatched writes ("" when not).
    var periodChange = ""
    /// keepsync's status.json: directories left unwatched (nil: not read) and the poll period.
    var unwatched: Int?
    var period: Double?
}
