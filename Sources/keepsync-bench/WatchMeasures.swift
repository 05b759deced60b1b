import Glibc

extension Bench {
    /// A large unchanged tree: `keepsync run` from start until READY=1 against an
    /// `rsync -a` no-op of the same tree, and the peak RSS of both agents watching it;
    /// then `run`'s resident size after it copied that tree itself, against a restart's.
    func watchMeasures() throws -> [Row] {
        let source = try watchedTree()
        let kMirror = path("watched-keepsync"), kState = path("watched-keepsync-state"), rMirror = path("watched-rsync")
        let first = try Spawn.run([keepsync, b("sync"), b("--source"), source, b("--mirror"), kMirror, b("--state"), kState,
                                   b("--log-level"), b("warning")])
        log("keepsync sync of the watched tree: \(Unit.seconds.format(first))")
        if let rsync { try Spawn.run([rsync, b("-a"), source + b("/"), rMirror + b("/")]) }
        var startup = Samples(), noop = Samples(), rss = Samples(), lrss = Samples()
        for rep in 0..<options.repetitions {
            record(&startup, "keepsync run startup, repetition \(rep + 1)") {
                if cold { Machine.dropCaches() }
                let (agent, ready) = try startKeepsync(source: source, mirror: kMirror, state: kState, name: "watch-keepsync-\(rep)")
                usleep(200_000)
                if let peak = Machine.peakRSS(agent.pid) { rss.values.append(Double(peak) / 1024) }
                agent.stop()
                return ready
            }
            if let rsync {
                record(&noop, "rsync -a no-op of the watched tree, repetition \(rep + 1)") {
                    try timed { try Spawn.run([rsync, b("-a"), source + b("/"), rMirror + b("/")]) }
                }
            }
            log("startup \(rep + 1)/\(options.repetitions): keepsync \(startup.values.last.map { Unit.seconds.format($0) } ?? "-") (peak \(rss.values.last.map { Unit.mebibytes.format($0) } ?? "-")), rsync -a no-op \(noop.values.last.map { Unit.seconds.format($0) } ?? "-")")
        }
        _ = verify(source, kMirror, "keepsync run on the watched tree", into: &startup)
        let (afterCopy, restarted) = residentAfterCopy(source)
        if lsyncd != nil {
            do {
                let (agent, _) = try startLsyncd(source: source, mirror: rMirror, name: "watch-lsyncd")
                if let peak = Machine.peakRSS(agent.pid) { lrss.values.append(Double(peak) / 1024) }
                agent.stop()
            } catch {
                lrss.failures.append("\(error)")
            }
        }
        let temperature = cold ? "cold" : "warm"
        let size = "\(options.watchedFiles / 1000)k files / \(options.watchedDirectories / 1000)k dirs"
        return [
            Row(measure: "startup to READY=1, \(size), \(temperature)", unit: .seconds,
                tools: [("keepsync", startup), ("rsync -a", noop)], targets: [("rsync -a", 0.7)],
                note: "rsync -a: a no-op run on the same tree"),
            Row(measure: "peak RSS watching \(size)", unit: .mebibytes, tools: [("keepsync", rss), ("lsyncd", lrss)],
                targets: [("lsyncd", nil)], absolute: 24),
            Row(measure: "resident after run's own initial copy, \(size)", unit: .mebibytes, tools: [("keepsync", afterCopy)],
                absolute: restarted.median.map { $0 * 1.5 },
                note: "target: 1.5x a restart's (next row); VmRSS \(Unit.seconds.format(Self.settle)) after READY=1"),
            Row(measure: "resident after a restart on that mirror and state", unit: .mebibytes, tools: [("keepsync", restarted)],
                informational: true),
        ]
    }

    /// How long after READY=1 the resident size is read.
    static let settle = 2.0

    /// `keepsync run` into an empty mirror (its initial copy, warm), its VmRSS a little
    /// after READY=1; then a restart on the same mirror and state, the same way.
    func residentAfterCopy(_ source: [UInt8]) -> (afterCopy: Samples, restarted: Samples) {
        var afterCopy = Samples(), restarted = Samples()
        func resident(_ agent: Spawn, into samples: inout Samples) {
            usleep(UInt32(Self.settle * 1_000_000))
            if let kib = Machine.value("/proc/\(agent.pid)/status", key: "VmRSS:") {
                samples.values.append(Double(kib) / 1024)
            } else {
                samples.failures.append("no VmRSS for keepsync run (pid \(agent.pid))")
            }
            agent.stop()
        }
        for rep in 0..<options.repetitions {
            let mirror = path("watched-run-\(rep)"), state = path("watched-run-state-\(rep)")
            do {
                let (first, _) = try startKeepsync(source: source, mirror: mirror, state: state, name: "watch-run-copy-\(rep)")
                resident(first, into: &afterCopy)
                let (again, _) = try startKeepsync(source: source, mirror: mirror, state: state, name: "watch-run-restart-\(rep)")
                resident(again, into: &restarted)
            } catch {
                afterCopy.failures.append("\(error)")
            }
            log("run's own copy \(rep + 1)/\(options.repetitions): resident \(afterCopy.values.last.map { Unit.mebibytes.format($0) } ?? "-") after it, \(restarted.values.last.map { Unit.mebibytes.format($0) } ?? "-") after a restart")
            if rep == 0 { _ = verify(source, mirror, "keepsync run's own initial copy of the watched tree", into: &afterCopy) }
        }
        return (afterCopy, restarted)
    }
}
