import Glibc

/// What `keepsync-bench` was asked to do.
struct BenchOptions {
    /// About a minute: small trees, one repetition of the slow measures.
    var quick = false
    /// Files of the main tree (initial copy, no-op rerun).
    var files = 20_000
    /// The small-file tree: tiny files, many directories.
    var smallFiles = 100_000
    var smallDirectories = 5_000
    /// Files and directories of the watched tree (RSS, startup).
    var watchedFiles = 100_000
    var watchedDirectories = 5_000
    /// Files of the burst.
    var burstFiles = 20_000
    /// Single-file writes of the latency measure.
    var latencyWrites = 200
    /// Repetitions of each timed measure (tools interleaved in each).
    var repetitions = 3
    /// Where the trees go (a fresh directory below it).
    var work: [UInt8] = Array("/tmp".utf8)
    /// The keepsync binary (default: next to this one).
    var keepsync: [UInt8]?
    var seed: UInt64 = 20_261_203
    /// Measures to run (all when empty): copy, noop, latency, burst, watch.
    var only: Set<String> = []
    /// Keep the work directory afterwards.
    var keep = false

    static let usage = """
        usage: keepsync-bench [--quick] [--reps N] [--files N] [--work DIR] [--keepsync PATH]
                              [--seed N] [--only copy,small,latency,burst,watch] [--keep]

        Measures keepsync against cp -a, rsync -a and lsyncd in the same run, tools
        interleaved in every repetition, and prints medians [min-max] and ratios of medians.

        """

    /// Parses the command line; exits 2 with a one-line error on bad input.
    static func parse(_ arguments: [String]) -> BenchOptions {
        var o = BenchOptions()
        var i = 0
        func value(_ flag: String) -> String {
            i += 1
            guard i < arguments.count else { fail("\(flag) needs a value") }
            return arguments[i]
        }
        func number(_ flag: String) -> Int {
            let text = value(flag)
            guard let n = Int(text), n > 0 else { fail("\(flag): '\(text)' is not a positive number") }
            return n
        }
        while i < arguments.count {
            let a = arguments[i]
            switch a {
            case "--quick": o.quick = true
            case "--reps": o.repetitions = number(a)
            case "--files": o.files = number(a)
            case "--work": o.work = Array(value(a).utf8)
            case "--keepsync": o.keepsync = Array(value(a).utf8)
            case "--seed": o.seed = UInt64(number(a))
            case "--only": o.only = Set(value(a).split(separator: ",").map(String.init))
            case "--keep": o.keep = true
            case "-h", "--help":
                print(usage, terminator: "")
                exit(0)
            default: fail("unknown flag \(a) (see --help)")
            }
            i += 1
        }
        if o.quick {
            o.files = min(o.files, 4_000)
            o.smallFiles = 20_000
            o.smallDirectories = 1_000
            o.watchedFiles = 20_000
            o.watchedDirectories = 1_000
            o.burstFiles = 4_000
            o.latencyWrites = 50
            o.repetitions = 1
        }
        return o
    }

    func wants(_ measure: String) -> Bool { only.isEmpty || only.contains(measure) }

    /// One-line error, exit 2.
    static func fail(_ message: String) -> Never {
        FileHandleOut.error("keepsync-bench: error: \(message)")
        exit(2)
    }
}
