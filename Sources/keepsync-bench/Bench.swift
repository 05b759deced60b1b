import Glibc

/// The measures, run against the tools found on this machine.
final class Bench {
    let options: BenchOptions
    let work: [UInt8]
    let keepsync: [UInt8]
    let cp = Spawn.which("cp")
    let rsync = Spawn.which("rsync")
    let lsyncd = Spawn.which("lsyncd")
    let cold: Bool
    var rng: TreeBuilder.Rng
    var failures: [String] = []
    /// The main tree once built (`mainTree`): its path and bytes.
    private var builtMainTree: ([UInt8], Int)?
    /// Whether the watched tree (`watchedTree`) is built.
    private var builtWatchedTree = false

    init(options: BenchOptions, work: [UInt8], keepsync: [UInt8]) {
        self.options = options
        self.work = work
        self.keepsync = keepsync
        cold = Machine.canDropCaches
        rng = TreeBuilder.Rng(state: options.seed ^ 0x1A7)
    }

    func path(_ name: String) -> [UInt8] { Paths.join(work, name) }

    func log(_ text: String) { FileHandleOut.error("  \(text)") }

    /// Verifies a copy; a difference is a failure of that sample, never a number.
    func verify(_ source: [UInt8], _ mirror: [UInt8], _ what: String, into samples: inout Samples) -> Bool {
        let diff = TreeVerifier.differences(source, mirror)
        guard diff.isEmpty else {
            let line = "\(what): the copy differs from the source: \(diff.prefix(3).joined(separator: "; "))"
            samples.failures.append(line)
            failures.append(line)
            return false
        }
        return true
    }

    /// `record` of a timed run of `argv`, its peak resident set into `rss`.
    func recordMeasured(_ samples: inout Samples, _ rss: inout Samples, _ what: String, _ argv: [[UInt8]]) {
        var peak: Double?
        record(&samples, what) {
            try timed {
                let run = try Spawn.runMeasured(argv)
                peak = run.peakMiB
                return run.seconds
            }
        }
        if let peak { rss.values.append(peak) }
    }

    func record(_ samples: inout Samples, _ what: String, _ body: () throws -> Double) {
        do { samples.values.append(try body()) } catch {
            let line = "\(what): \(error)"
            samples.failures.append(line)
            failures.append(line)
        }
    }

    // MARK: Initial copy and no-op rerun

    /// The main tree, built on first use (copy and remote copy share it), and its bytes.
    func mainTree() throws -> ([UInt8], Int) {
        if let builtMainTree { return builtMainTree }
        let source = path("tree")
        var builder = TreeBuilder(seed: options.seed)
        let started = Clock.now()
        let bytes = try builder.buildMain(source, files: options.files)
        log("tree: \(options.files) files, \(bytes >> 20) MiB, built in \(Unit.seconds.format(Clock.now() - started))")
        builtMainTree = (source, bytes)
        return (source, bytes)
    }

    /// The watched tree (100k files / 5k dirs), built on first use: startup and memory
    /// rows share it with several mirrors' startup.
    func watchedTree() throws -> [UInt8] {
        let source = path("watched")
        if builtWatchedTree { return source }
        var builder = TreeBuilder(seed: options.seed ^ 0xFACE)
        let started = Clock.now()
        try builder.buildWatched(source, files: options.watchedFiles, directories: options.watchedDirectories)
        log("watched tree: \(options.watchedFiles) files in \(options.watchedDirectories) directories, built in \(Unit.seconds.format(Clock.now() - started))")
        builtWatchedTree = true
        return source
    }

    func copyMeasures() throws -> [Row] {
        let (source, bytes) = try mainTree()
        var k = Samples(), c = Samples(), r = Samples()
        var nk = Samples(), nr = Samples(), kRSS = Samples(), rRSS = Samples()
        for rep in 0..<options.repetitions {
            let km = path("copy-keepsync-\(rep)"), ks = path("state-\(rep)")
            let cm = path("copy-cp-\(rep)"), rm = path("copy-rsync-\(rep)")
            recordMeasured(&k, &kRSS, "keepsync sync, repetition \(rep + 1)",
                           [keepsync, b("sync"), b("--source"), source, b("--mirror"), km, b("--state"), ks, b("--log-level"), b("warning")])
            _ = verify(source, km, "keepsync sync, repetition \(rep + 1)", into: &k)
            if let cp {
                record(&c, "cp -a, repetition \(rep + 1)") { try timed { try Spawn.run([cp, b("-a"), source + b("/."), cm]) } }
                _ = verify(source, cm, "cp -a, repetition \(rep + 1)", into: &c)
            }
            if let rsync {
                recordMeasured(&r, &rRSS, "rsync -a, repetition \(rep + 1)", [rsync, b("-a"), source + b("/"), rm + b("/")])
                _ = verify(source, rm, "rsync -a, repetition \(rep + 1)", into: &r)
            }
            log("initial copy \(rep + 1)/\(options.repetitions): keepsync \(k.values.last.map { Unit.seconds.format($0) } ?? "-"), cp -a \(c.values.last.map { Unit.seconds.format($0) } ?? "-"), rsync -a \(r.values.last.map { Unit.seconds.format($0) } ?? "-")")
        }
        for rep in 0..<options.repetitions {
            let km = path("copy-keepsync-\(rep)"), ks = path("state-\(rep)"), rm = path("copy-rsync-\(rep)")
            record(&nk, "keepsync no-op sync, repetition \(rep + 1)") {
                try timed { try Spawn.run([keepsync, b("sync"), b("--source"), source, b("--mirror"), km, b("--state"), ks, b("--log-level"), b("warning")]) }
            }
            _ = verify(source, km, "keepsync no-op sync, repetition \(rep + 1)", into: &nk)
            if let rsync {
                record(&nr, "rsync -a no-op, repetition \(rep + 1)") { try timed { try Spawn.run([rsync, b("-a"), source + b("/"), rm + b("/")]) } }
                _ = verify(source, rm, "rsync -a no-op, repetition \(rep + 1)", into: &nr)
            }
            log("no-op rerun \(rep + 1)/\(options.repetitions): keepsync \(nk.values.last.map { Unit.milliseconds.format($0) } ?? "-"), rsync -a \(nr.values.last.map { Unit.milliseconds.format($0) } ?? "-")")
        }
        let temperature = cold ? "cold" : "warm"
        let size = "\(options.files / 1000)k files / \(bytes >> 20) MiB"
        return [
            Row(measure: "initial copy, \(size), \(temperature), durable", unit: .seconds,
                tools: [("keepsync", k), ("cp -a", c), ("rsync -a", r)], targets: [("cp -a", 1.0), ("rsync -a", 0.8)]),
            Row(measure: "no-op rerun, \(temperature)", unit: .milliseconds,
                tools: [("keepsync", nk), ("rsync -a", nr)], targets: [("rsync -a", 0.7)]),
            Row(measure: "peak RSS, initial copy", unit: .mebibytes,
                tools: [("keepsync", kRSS), ("rsync -a", rRSS)], targets: [("rsync -a", nil)]),
        ]
    }

    // MARK: Small files

    /// Issue 17: a tree of tiny files, where copy_file_range does not help: the initial
    /// copy (durable: rsync is timed with its `sync`), the no-op rerun, and the peak
    /// resident set of each first run.
    func smallFileMeasures() throws -> [Row] {
        let source = path("small")
        var builder = TreeBuilder(seed: options.seed ^ 0x5A11)
        let started = Clock.now()
        let bytes = try builder.buildSmall(source, files: options.smallFiles, directories: options.smallDirectories)
        log("small tree: \(options.smallFiles) files in \(options.smallDirectories) directories, \(bytes >> 20) MiB, built in \(Unit.seconds.format(Clock.now() - started))")
        var k = Samples(), r = Samples(), nk = Samples(), nr = Samples(), kRSS = Samples(), rRSS = Samples()
        for rep in 0..<options.repetitions {
            let km = path("small-keepsync-\(rep)"), ks = path("small-state-\(rep)"), rm = path("small-rsync-\(rep)")
            let sync = [keepsync, b("sync"), b("--source"), source, b("--mirror"), km, b("--state"), ks, b("--log-level"), b("warning")]
            recordMeasured(&k, &kRSS, "keepsync sync of small files, repetition \(rep + 1)", sync)
            _ = verify(source, km, "keepsync sync of small files, repetition \(rep + 1)", into: &k)
            if let rsync {
                recordMeasured(&r, &rRSS, "rsync -a of small files, repetition \(rep + 1)", [rsync, b("-a"), source + b("/"), rm + b("/")])
                _ = verify(source, rm, "rsync -a of small files, repetition \(rep + 1)", into: &r)
            }
            record(&nk, "keepsync no-op of small files, repetition \(rep + 1)") { try timed { try Spawn.run(sync) } }
            if let rsync {
                record(&nr, "rsync -a no-op of small files, repetition \(rep + 1)") {
                    try timed { try Spawn.run([rsync, b("-a"), source + b("/"), rm + b("/")]) }
                }
            }
            log("small files \(rep + 1)/\(options.repetitions): keepsync \(k.values.last.map { Unit.seconds.format($0) } ?? "-") (peak \(kRSS.values.last.map { Unit.mebibytes.format($0) } ?? "-")), rsync -a \(r.values.last.map { Unit.seconds.format($0) } ?? "-"); no-op \(nk.values.last.map { Unit.milliseconds.format($0) } ?? "-") vs \(nr.values.last.map { Unit.milliseconds.format($0) } ?? "-")")
        }
        let temperature = cold ? "cold" : "warm"
        let size = "\(options.smallFiles / 1000)k files of 0-4 KiB / \(options.smallDirectories / 1000)k dirs"
        return [
            Row(measure: "initial copy, \(size), \(temperature), durable", unit: .seconds,
                tools: [("keepsync", k), ("rsync -a", r)], targets: [("rsync -a", 0.7)]),
            Row(measure: "no-op rerun, small files, \(temperature)", unit: .milliseconds,
                tools: [("keepsync", nk), ("rsync -a", nr)], targets: [("rsync -a", 0.6)]),
            Row(measure: "peak RSS, initial copy of the small files", unit: .mebibytes,
                tools: [("keepsync", kRSS), ("rsync -a", rRSS)], targets: [("rsync -a", nil)], absolute: 40),
        ]
    }

    /// Seconds `body` takes, caches dropped before (when allowed) and `sync` after.
    func timed(_ body: () throws -> Double) throws -> Double {
        if cold { Machine.dropCaches() } else { Glibc.sync() }
        let start = Clock.now()
        _ = try body()
        Glibc.sync()
        return Clock.now() - start
    }

    func b(_ s: String) -> [UInt8] { Array(s.utf8) }

    // MARK: Agents

    /// A running `keepsync run` that said READY=1, and the seconds it took; `wrapper` runs
    /// it (a command that ends by exec'ing its arguments, keeping the pid); `extra` are
    /// more options (`--ssh` for a remote mirror).
    func startKeepsync(source: [UInt8], mirror: [UInt8], state: [UInt8], name: String,
                       wrapper: [[UInt8]] = [], extra: [[UInt8]] = []) throws -> (Spawn, Double) {
        try startRun([b("--source"), source, b("--mirror"), mirror, b("--state"), state, b("--log-level"), b("warning")] + extra,
                     name: name, wrapper: wrapper)
    }

    /// `keepsync run ARGUMENTS` (with `environment` added) once it said READY=1, and the
    /// seconds from its start until then; its output goes to `NAME.log`.
    func startRun(_ arguments: [[UInt8]], name: String, wrapper: [[UInt8]] = [],
                  environment: [String: String] = [:]) throws -> (Spawn, Double) {
        let socket = try NotifySocket(path("\(name).notify"))
        let start = Clock.now()
        let child = try Spawn(wrapper + [keepsync, b("run")] + arguments,
                              extra: environment.merging(["NOTIFY_SOCKET": Paths.display(socket.path)]) { $1 },
                              output: path("\(name).log"))
        guard let ready = socket.waitReady(timeout: 600, alive: { child.poll() == nil }) else {
            child.stop()
            throw BenchError("keepsync run never said READY=1 (see \(Paths.display(path("\(name).log"))))")
        }
        return (child, ready - start)
    }

    /// A running lsyncd (delay 0, default.rsync) whose startup sync is done, and the
    /// seconds from its start until that sync was. With `remote`: default.rsyncssh to
    /// `mirror` through that sshd (rsync and its ssh commands run `remote.sshWords`).
    func startLsyncd(source: [UInt8], mirror: [UInt8], name: String, remote: BenchSSHD? = nil) throws -> (Spawn, Double) {
        guard let lsyncd else { throw BenchError("lsyncd is not installed") }
        let config = path("\(name).lua")
        let marker = "lsyncd-started-\(rng.next())"
        try Paths.write(Paths.join(source, marker), Array("marker\n".utf8))
        let local = "sync { default.rsync, source = \"\(Paths.display(source))/\", target = \"\(Paths.display(mirror))/\", delay = 0 }"
        let syncBlock = remote.map { lsyncdRemoteSync(source: source, mirror: mirror, remote: $0) } ?? local
        let text = """
            settings { nodaemon = true, logfile = "\(Paths.display(path("\(name).log")))", insist = true }
            \(syncBlock)

            """
        try Paths.write(config, Array(text.utf8))
        try Paths.mkdirs(mirror)
        let start = Clock.now()
        let child = try Spawn([lsyncd, config], output: path("\(name).out"))
        let until = Clock.now() + 600
        // Done when its log says so: rsync copies the root's files first, so the marker
        // arrives long before a big tree's startup sync ends.
        func finished() -> Bool {
            guard Paths.exists(Paths.join(mirror, marker)), let log = Machine.read(Paths.display(path("\(name).log"))) else { return false }
            // default.rsync: `Startup of SRC -> DST finished.`; rsyncssh: `Startup of "SRC" finished: 0`.
            return log.split(separator: "\n").contains { $0.contains("Startup of ") && $0.contains(" finished") }
        }
        while !finished() {
            guard child.poll() == nil, Clock.now() < until else {
                child.stop()
                throw BenchError("lsyncd did not finish its startup sync (see \(Paths.display(path("\(name).log"))))")
            }
            usleep(10_000)
        }
        let ready = Clock.now() - start
        // Let its startup rsync exit before anything is timed.
        usleep(300_000)
        unlink(Paths.display(Paths.join(source, marker)))
        let gone = Clock.now() + 30
        while Paths.exists(Paths.join(mirror, marker)) && Clock.now() < gone { usleep(10_000) }
        return (child, ready)
    }

    /// lsyncd's default.rsyncssh to `remote`: rsync's `--rsh` and the ssh of its moves
    /// and deletes get the same words as keepsync's `--ssh` (`ssh._extra`, not the
    /// `ssh.options` table, which would leave `-F /dev/null` out); lsyncd's defaults
    /// otherwise (no multiplexing: a connection per command, as lsyncd does).
    func lsyncdRemoteSync(source: [UInt8], mirror: [UInt8], remote: BenchSSHD) -> String {
        let words = remote.sshWords
        let extra = words.dropFirst().map { "\"\($0)\"" }.joined(separator: ", ")
        return """
            sync { default.rsyncssh, source = "\(Paths.display(source))/", host = "\(remote.destination)",
                   targetdir = "\(Paths.display(mirror))/", delay = 0,
                   rsync = { rsh = "\(remote.sshCommand)" },
                   ssh = { binary = "\(words[0])", _extra = { \(extra) } } }
            """
    }
}
