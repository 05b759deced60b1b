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
    /// Measures to run (all when empty): copy, small, latency, burst, watch, remote,
    /// versions, several; `several-latency`, `several-burst`, `several-startup`: a part.
    var only: Set<String> = []
    /// Keep the work directory afterwards.
    var keep = false
    /// Remote rows: let the login shell of sshd's sessions read ~/.bashrc (by default the
    /// loopback sshd sets SHLVL=1, which makes bash skip it).
    var remoteBashrc = false
    /// --scale: only the big-tree measures (issue 17), run by hand.
    var scale = false
    /// Files and leaf directories of the --scale tree.
    var scaleFiles = 1_000_000
    var scaleDirectories = 200_000
    /// 4 KiB writes into watched directories per agent (a fifth as many, at least 5, into
    /// unwatched ones).
    var scaleWrites = 100
    /// Seconds the quiet agent's CPU is counted over.
    var scaleQuiet = 30
    /// keepsync's rows in a user namespace whose inotify watch limit is this (testing at
    /// small sizes: nothing else on the machine sees it); nil: the machine's limit.
    var scaleWatchLimit: Int?
    /// fs.inotify.max_user_watches for lsyncd's rows (raised, never lowered; nil: enough
    /// for the tree).
    var scaleLsyncdWatches: Int?

    static let usage = """
        usage: keepsync-bench [--quick] [--reps N] [--files N] [--work DIR] [--keepsync PATH]
                              [--seed N] [--only copy,small,latency,burst,watch,remote,versions,several]
                              [--keep] [--remote-bashrc]
               keepsync-bench --scale [--scale-files N] [--scale-dirs N] [--scale-writes N]
                              [--scale-quiet SECONDS] [--scale-watch-limit N]
                              [--scale-lsyncd-watches N] [--reps N] [--work DIR] [--keep]

        Measures keepsync against cp -a, rsync -a and lsyncd in the same run, tools
        interleaved in every repetition, and prints medians [min-max] and ratios of medians.

        remote: keepsync --mirror USER@127.0.0.1:DIR against rsync -a --fsync -e SSH and
        lsyncd's default.rsyncssh through loopback sshds the bench starts (keys and config
        in the work directory; needs sshd, ssh, ssh-keygen and rsync, else the rows say why
        they were skipped): one with an empty profile, one whose login shell sleeps 0.25 s
        first (BASH_ENV). Sessions get SHLVL=1 (sshd SetEnv), so a bash login shell skips
        ~/.bashrc, for both tools; --remote-bashrc leaves that out.

        several: one agent with two mirrors against one with a single mirror, interleaved:
        4 KiB latency to a local mirror while the other (remote, over a loopback sshd
        stopped after a first sync) is unreachable; a burst to two local mirrors; a cold
        start to READY=1 on the watched tree and its peak RSS. --only several-latency,
        several-burst or several-startup runs one part.

        --scale measures only a tree of 1,000,000 files of 0-4 KiB in 200,000 directories
        (more than the default inotify watch limit): initial copy, no-op rerun, run until
        READY=1, resident size, 4 KiB latency in watched and unwatched directories and the
        quiet agent's CPU, against rsync -a and lsyncd. 2 repetitions unless --reps; about
        25-30 minutes (estimated from 100k-file runs), run by hand, never in CI. It raises fs.inotify.max_user_watches for lsyncd's rows (root) and
        puts it back. --scale-watch-limit N runs keepsync's rows in a user namespace with
        that watch limit (to leave directories unwatched in a small tree).

        """

    /// Parses the command line; exits 2 with a one-line error on bad input.
    static func parse(_ arguments: [String]) -> BenchOptions {
        var o = BenchOptions()
        var i = 0
        var repetitionsGiven = false
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
            case "--reps":
                o.repetitions = number(a)
                repetitionsGiven = true
            case "--files": o.files = number(a)
            case "--work": o.work = Array(value(a).utf8)
            case "--keepsync": o.keepsync = Array(value(a).utf8)
            case "--seed": o.seed = UInt64(number(a))
            case "--only": o.only = Set(value(a).split(separator: ",").map(String.init))
            case "--keep": o.keep = true
            case "--remote-bashrc": o.remoteBashrc = true
            case "--scale": o.scale = true
            case "--scale-files": o.scaleFiles = number(a)
            case "--scale-dirs": o.scaleDirectories = number(a)
            case "--scale-writes": o.scaleWrites = number(a)
            case "--scale-quiet": o.scaleQuiet = number(a)
            case "--scale-watch-limit": o.scaleWatchLimit = number(a)
            case "--scale-lsyncd-watches": o.scaleLsyncdWatches = number(a)
            case "-h", "--help":
                print(usage, terminator: "")
                exit(0)
            default: fail("unknown flag \(a) (see --help)")
            }
            i += 1
        }
        // A repetition at full scale takes about 6 minutes (copies and no-ops, cold).
        if o.scale && !repetitionsGiven { o.repetitions = 2 }
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

    /// Whether phase `measure` runs: --scale runs only "scale", never part of a plain run.
    func wants(_ measure: String) -> Bool {
        if scale || measure == "scale" { return scale && measure == "scale" }
        return only.isEmpty || only.contains(measure) || only.contains { $0.hasPrefix(measure + "-") }
    }

    /// Whether part `part` of phase `measure` runs: all of a phase that runs, or only the
    /// parts named `MEASURE-PART` when some are (`--only several-burst`).
    func wants(_ measure: String, part: String) -> Bool {
        guard wants(measure) else { return false }
        let parts = only.filter { $0.hasPrefix(measure + "-") }
        return parts.isEmpty || only.contains(measure) || parts.contains("\(measure)-\(part)")
    }

    /// One-line error, exit 2.
    static func fail(_ message: String) -> Never {
        FileHandleOut.error("keepsync-bench: error: \(message)")
        exit(2)
    }
}
