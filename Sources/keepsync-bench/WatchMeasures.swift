import Glibc

extension Bench {
    /// A large unchanged tree: `keepsync run` from start until READY=1 against an
    /// `rsync -a` no-op of the same tree, and the peak RSS of both agents watching it.
    func watchMeasures() throws -> [Row] {
        let source = path("watched")
        var builder = TreeBuilder(seed: options.seed ^ 0xFACE)
        let started = Clock.now()
        try builder.buildWatched(source, files: options.watchedFiles, directories: options.watchedDirectories)
        log("watched tree: \(options.watchedFiles) files in \(options.watchedDirectories) directories, built in \(Unit.seconds.format(Clock.now() - started))")
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
        ]
    }
}
