import Glibc

/// The benchmark's entry: options, the measures, the table.
enum BenchMain {
    static func run() -> Never {
        let options = BenchOptions.parse(Array(CommandLine.arguments.dropFirst()))
        let keepsyncBinary: [UInt8] = options.keepsync ?? {
            var exe = [UInt8](repeating: 0, count: 4096)
            let n = exe.withUnsafeMutableBufferPointer { readlink("/proc/self/exe", UnsafeMutableRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 4095) }
            let me = n > 0 ? Array(exe[..<n]) : []
            let dir = me.lastIndex(of: 0x2F).map { Array(me[..<$0]) } ?? Array(".".utf8)
            return Paths.join(dir, "keepsync")
        }()
        guard Paths.with(keepsyncBinary, { access($0, X_OK) }) == 0 else {
            BenchOptions.fail("no keepsync binary at \(Paths.display(keepsyncBinary)) (build it with swift build -c release, or pass --keepsync)")
        }
        var template = Paths.join(options.work, "keepsync-bench-XXXXXX") + [0]
        let made = template.withUnsafeMutableBufferPointer { $0.withMemoryRebound(to: CChar.self) { mkdtemp($0.baseAddress!) } }
        guard made != nil else { BenchOptions.fail("cannot create a directory in \(Paths.display(options.work)): \(String(cString: strerror(errno)))") }
        let work = Array(template.dropLast())

        let bench = Bench(options: options, work: work, keepsync: keepsyncBinary)
        var now = time(nil)
        var tm = tm()
        gmtime_r(&now, &tm)
        let date = "\(1900 + Int(tm.tm_year))-\(String(format2: Int(tm.tm_mon) + 1))-\(String(format2: Int(tm.tm_mday))) \(String(format2: Int(tm.tm_hour))):\(String(format2: Int(tm.tm_min))) UTC"
        FileHandleOut.line("keepsync-bench \(date)\(options.quick ? " (--quick)" : "")\(options.scale ? " (--scale)" : "")")
        FileHandleOut.line(Machine.describe(work: work))
        FileHandleOut.line("tools: keepsync \(Paths.display(keepsyncBinary)); \(bench.cp.map(Paths.display) ?? "no cp"); \(bench.rsync.map(Paths.display) ?? "no rsync"); \(bench.lsyncd.map(Paths.display) ?? "no lsyncd (its columns stay empty)")")
        FileHandleOut.line("\(options.repetitions) repetition(s), tools interleaved in each; caches \(bench.cold ? "dropped before each cold run" : "NOT dropped (no permission): cold rows are warm"); seed \(options.seed)")

        var rows: [Row] = []
        func phase(_ name: String, _ body: () throws -> [Row]) {
            guard options.wants(name) else { return }
            FileHandleOut.error("\(name)...")
            do { rows += try body() } catch {
                bench.failures.append("\(name): \(error)")
            }
        }
        phase("copy") { try bench.copyMeasures() }
        phase("small") { try bench.smallFileMeasures() }
        phase("latency") { try bench.latencyMeasures() }
        phase("burst") { try bench.burstMeasures() }
        phase("watch") { try bench.watchMeasures() }
        phase("remote") { try bench.remoteMeasures() }
        phase("versions") { try bench.versionMeasures() }
        phase("several") { try bench.severalMeasures() }
        phase("scale") { try bench.scaleMeasures() }

        FileHandleOut.line("")
        for line in Table.render(rows) { FileHandleOut.line(line) }
        for row in rows where !row.note.isEmpty { FileHandleOut.line("(\(row.measure): \(row.note))") }
        if !bench.failures.isEmpty {
            FileHandleOut.line("")
            for f in bench.failures { FileHandleOut.line("FAILED: \(f)") }
        }
        if !options.keep {
            let started = Clock.now()
            Paths.removeInParallel(work)
            if options.scale { FileHandleOut.error("  work directory removed in \(Unit.seconds.format(Clock.now() - started))") }
        } else { FileHandleOut.line("work directory kept: \(Paths.display(work))") }
        exit(bench.failures.isEmpty ? 0 : 1)
    }
}

extension String {
    init(format2 n: Int) { self = n < 10 ? "0\(n)" : "\(n)" }
}
