import KeepSyncCore

/// The remote side's fixed scripts. Each enters DIR (quoted once, `'…'` with `'\''`),
/// then hands its stdin, NUL-separated, to `xargs -0 sh -c 'BODY' sh`: paths only ever
/// travel as arguments of that inner shell, never inside command text. The inner body
/// answers per item with a NUL-terminated token: `0` done, `S` then a `find -printf`
/// record, `L` a symlink on the way (refused), `N` not there, `P` parent missing,
/// `E…` an error with its message.
enum RemoteScript {
    /// `find -printf`: kind, mode, size, mtime, ctime, device, inode, links; then the
    /// name (relative to the starting point) and the link target, each NUL-terminated.
    static let format = "%y %m %s %T@ %C@ %D %i %n\\0%P\\0%l\\0"
    /// `format` with the whole path as given (`%p`: the starting point and below).
    static let formatPath = "%y %m %s %T@ %C@ %D %i %n\\0%p\\0%l\\0"

    /// Helpers of every body. `chk P`: each proper ancestor of P below DIR is a real
    /// directory (2: a symlink, 3: missing or not a directory). `made P`: answers `S` and
    /// keeps P for `statMade`. `flush`: makes `makeDirectory`'s waiting run (`pn` paths of
    /// mode `pm`, referenced in `pa`) with one `mkdir`. `kv`: `keep`.
    static let prelude = """
        set -f; \
        chk() { r=$1; d=.; while :; do case $r in */*) d=$d/${r%%/*}; r=${r#*/}; \
        if [ -L "$d" ]; then return 2; fi; if [ ! -d "$d" ]; then return 3; fi;; *) return 0;; esac; done; }; \
        bad() { if [ $1 = 2 ]; then printf "L\\0"; else printf "P\\0"; fi; }; \
        ok() { printf "0\\0"; }; \
        err() { printf "E%s\\0" "$1"; }; \
        n=0; a=; made() { printf "S\\0"; n=$((n+1)); eval "q$n=\\$1"; a="$a \\"./\\${q$n}\\""; }; \
        pm=; pn=0; pa=; \
        flush() { if [ $pn = 0 ]; then return; fi; eval "set -- $pa"; pa=; pn=0; \
        if mkdir -m "$pm" -- "$@" 2>/dev/null; then for x do made "${x#./}"; done; \
        else for x do if [ -d "$x" ] && [ ! -L "$x" ]; then made "${x#./}"; \
        elif e=$(mkdir -m "$pm" -- "$x" 2>&1); then made "${x#./}"; else err "$e"; fi; done; fi; }; \
        \(keep)
        """
    /// `kv P MODE VDIR HEAD TAIL DHEAD`: keeps what is at P as a version in VDIR (made
    /// 0700 when missing) under the first free name of HEAD TAIL, HEAD-2 TAIL, … (a
    /// directory: DHEAD, DHEAD-2, …; only when MODE is `m`). MODE `l`: a file or symlink
    /// gets a second name (`ln -P`; moved when the file system has no hard links), for
    /// a replace; `m`: moved, for a removal. Nothing there, or something else: nothing.
    /// 1 with the message in `e` when it fails.
    static let keep = """
        kv() { if [ -L "./$1" ] || [ -f "./$1" ]; then h=$4; t=$5; elif [ $2 = m ] && [ -d "./$1" ]; then h=$6; t=; \
        else return 0; fi; if [ ! -d "./$3" ]; then umask 077; mkdir -p -- "./$3" 2>/dev/null; umask 022; fi; \
        v="./$3/$h$t"; k=2; while [ -e "$v" ] || [ -L "$v" ]; do v="./$3/$h-$k$t"; k=$((k+1)); done; \
        if [ $2 = l ] && ln -P -- "./$1" "$v" 2>/dev/null; then return 0; fi; \
        mv -fT -- "./$1" "$v" 2>/dev/null || { e=$(mv -fT -- "./$1" "$v" 2>&1); return 1; }; };
        """
    /// After a loop of `made` items: one `find` for all of them, named as given (`./PATH`),
    /// where each item's own `find` forked a process (440 for 440 directories). The paths
    /// are kept in variables and referenced (`"./${q7}"`), never parsed.
    static let statMade = """
        if [ -n "$a" ]; then eval "set -- $a"; exec find -P "$@" -maxdepth 0 -printf "\(formatPath)"; fi
        """

    /// Before an rsync run and for `stat`: per path a token (`S` there, or why not), then
    /// one `find` (not one per path) for the records of the paths there, named as given
    /// (`./PATH`): `RemoteMirror.statCall` pairs them up. The paths there are gathered as
    /// references (`"./${7}"`), set at once by `eval` (their bytes are never parsed):
    /// appending each to `"$@"` copied the list every time, 210 ms for 1,024 paths.
    static let stat = """
        i=0; a=; for p do i=$((i+1)); chk "$p"; c=$?; if [ $c != 0 ]; then bad $c; \
        elif [ -e "./$p" ] || [ -L "./$p" ]; then printf "S\\0"; a="$a \\"./\\${$i}\\""; \
        else printf "N\\0"; fi; done; \
        if [ -n "$a" ]; then eval "set -- $a"; exec find -P "$@" -maxdepth 0 -printf "\(formatPath)"; fi
        """
    /// One directory's entries (`S` then records), its own components checked too.
    static let list = """
        p=$1; chk "$p/x"; c=$?; if [ $c != 0 ]; then bad $c; elif [ -L "./$p" ]; then printf "L\\0"; \
        elif [ ! -d "./$p" ]; then printf "N\\0"; \
        else printf "S\\0"; find -P "./$p" -mindepth 1 -maxdepth 1 -printf "\(format)"; fi
        """
    /// PATH MODE. New directories of one mode wait in a run (kept as references, `"./${w3}"`)
    /// made by one `mkdir` (`flush`) when the mode changes, an item must answer at once, an
    /// ancestor is missing (it may be in the run) or the loop ends (`flushDirectories`): a `mkdir`
    /// per directory forked 440 processes for 440. When that `mkdir` fails, each directory
    /// of the run is there (it was not before: made) or made alone, or answers its error.
    static let makeDirectory = """
        p=$1; chk "$p"; c=$?; if [ $c = 3 ] && [ $pn -gt 0 ]; then flush; chk "$p"; c=$?; fi; \
        if [ $c != 0 ]; then flush; bad $c; \
        elif [ -e "./$p" ] || [ -L "./$p" ]; then flush; \
        if e=$(mkdir -m "$2" -- "./$p" 2>&1); then made "$p"; else err "$e"; fi; \
        else if [ "$2" != "$pm" ]; then flush; pm=$2; fi; pn=$((pn+1)); eval "w$pn=\\$p"; pa="$pa \\"./\\${w$pn}\\""; fi
        """
    /// After a loop of `makeDirectory` items: the last run made, then `statMade`.
    static let flushDirectories = "flush; " + statMade
    /// PATH TARGET @MTIME TEMP: where nothing is, made in place (two processes, not four
    /// forks: 50 links held the bench's first rsync back 380 ms); else, or when that fails,
    /// made under the temp name, then renamed over PATH.
    static let makeSymlink = """
        p=$1; chk "$p"; c=$?; if [ $c != 0 ]; then bad $c; \
        elif [ ! -e "./$p" ] && [ ! -L "./$p" ] && ln -s -- "$2" "./$p" 2>/dev/null && \
        touch -h -d "$3" -- "./$p" 2>/dev/null; then made "$p"; \
        elif e=$( { ln -s -- "$2" "./$4" && touch -h -d "$3" -- "./$4" && mv -fT -- "./$4" "./$p"; } 2>&1 ); \
        then made "$p"; else rm -f -- "./$4"; err "$e"; fi
        """
    /// PATH...: each removed with everything below; a missing path is done. Every path
    /// checked first, then one `rm -rf` for all of them (a subshell and an `rm` per path
    /// forked 2,000 processes to thin 1,000 versions), the paths passed as references
    /// (`"./${7}"`), never parsed; then each answers: gone, or removed alone (directories
    /// made writable first) for its own error.
    static let remove = """
        i=0; a=; for p do i=$((i+1)); chk "$p"; c=$?; eval "c$i=$c"; \
        if [ $c = 0 ]; then a="$a \\"./\\${$i}\\""; fi; done; \
        if [ -n "$a" ]; then eval "rm -rf -- $a" 2>/dev/null; fi; \
        i=0; for p do i=$((i+1)); eval "c=\\$c$i"; if [ $c != 0 ]; then bad $c; \
        elif [ ! -e "./$p" ] && [ ! -L "./$p" ]; then ok; \
        else find -P "./$p" -type d -exec chmod u+rwx -- {} + 2>/dev/null; \
        if e=$(rm -rf -- "./$p" 2>&1); then ok; else err "$e"; fi; fi; done
        """
    /// PATH VDIR HEAD TAIL DHEAD: each moved into the versions directory whole (`kv m`),
    /// what is left (a special file) removed.
    static let removeKeeping = """
        p=$1; chk "$p"; c=$?; if [ $c != 0 ]; then bad $c; elif ! kv "$p" m "$2" "$3" "$4" "$5"; then err "$e"; \
        elif [ ! -e "./$p" ] && [ ! -L "./$p" ]; then ok; elif e=$(rm -rf -- "./$p" 2>&1); then ok; else err "$e"; fi
        """
    /// STAGED VDIR HEAD TAIL: what rsync's `--backup-dir` put at STAGED moved to its
    /// version's name, answering `0` (moved), `-` (nothing there) or `E…`; by one `perl`
    /// where the remote has it (a `mv` per file forked 1,000 times for 1,000 files).
    static let keepStaged = """
        if command -v perl >/dev/null 2>&1; then exec perl -e "umask 077; \
        while (@ARGV >= 4) { my (\\$s, \\$d, \\$h, \\$t) = splice(@ARGV, 0, 4); \\$s = qq{./\\$s}; \
        if (!-e \\$s && !-l \\$s) { print qq{-\\0}; next; } \
        my \\$p = q{.}; for my \\$c (split m{/}, \\$d) { \\$p .= qq{/\\$c}; mkdir \\$p unless -d \\$p; } \
        my \\$v = qq{./\\$d/\\$h\\$t}; my \\$k = 2; while (-e \\$v || -l \\$v) { \\$v = qq{./\\$d/\\$h-\\$k\\$t}; \\$k++; } \
        if (rename(\\$s, \\$v)) { print qq{0\\0}; } else { print qq{E\\$!\\0}; } }" -- "$@"; fi; \
        while [ $# -ge 4 ]; do if [ ! -e "./$1" ] && [ ! -L "./$1" ]; then printf "%s\\0" -; \
        elif kv "$1" m "$2" "$3" "$4" "$3"; then ok; else err "$e"; fi; shift 4; done
        """
    /// FROM TO VDIR HEAD TAIL DHEAD: `rename`, a file or symlink at TO kept first (`kv l`).
    static let renameKeeping = """
        a=$1; b=$2; chk "$a"; c=$?; if [ $c = 0 ]; then chk "$b"; c=$?; fi; if [ $c != 0 ]; then bad $c; \
        elif [ ! -e "./$a" ] && [ ! -L "./$a" ]; then printf "N\\0"; \
        elif [ "$a" != "$b" ] && ! kv "$b" l "$3" "$4" "$5" "$6"; then err "$e"; \
        elif e=$(mv -fT -- "./$a" "./$b" 2>&1); then ok; else err "$e"; fi
        """
    /// PATH TARGET @MTIME TEMP VDIR HEAD TAIL DHEAD: `makeSymlink`, a file or symlink at
    /// PATH kept first (`kv l`).
    static let makeSymlinkKeeping = """
        p=$1; chk "$p"; c=$?; if [ $c != 0 ]; then bad $c; \
        elif [ ! -e "./$p" ] && [ ! -L "./$p" ] && ln -s -- "$2" "./$p" 2>/dev/null && \
        touch -h -d "$3" -- "./$p" 2>/dev/null; then made "$p"; \
        elif ! kv "$p" l "$5" "$6" "$7" "$8"; then err "$e"; \
        elif e=$( { ln -s -- "$2" "./$4" && touch -h -d "$3" -- "./$4" && mv -fT -- "./$4" "./$p"; } 2>&1 ); \
        then made "$p"; else rm -f -- "./$4"; err "$e"; fi
        """
    /// FROM TO.
    static let rename = """
        a=$1; b=$2; chk "$a"; c=$?; if [ $c = 0 ]; then chk "$b"; c=$?; fi; if [ $c != 0 ]; then bad $c; \
        elif [ ! -e "./$a" ] && [ ! -L "./$a" ]; then printf "N\\0"; \
        elif e=$(mv -fT -- "./$a" "./$b" 2>&1); then ok; else err "$e"; fi
        """
    /// PATH MODE|- @MTIME|-: never through a symlink. `chmod` and `touch` run as they are
    /// (a subshell to catch their words forked once more per directory); only when one
    /// fails do they run again, inside one, for the message.
    static let setAttributes = """
        p=$1; chk "$p"; c=$?; if [ $c != 0 ]; then bad $c; elif [ -L "./$p" ]; then printf "L\\0"; \
        elif [ ! -e "./$p" ]; then printf "N\\0"; \
        elif { [ "$2" = - ] || chmod -- "$2" "./$p" 2>/dev/null; } && \
        { [ "$3" = - ] || touch -c -d "$3" -- "./$p" 2>/dev/null; }; then ok; \
        elif e=$( { if [ "$2" != - ]; then chmod -- "$2" "./$p"; fi && \
        if [ "$3" != - ]; then touch -c -d "$3" -- "./$p"; fi; } 2>&1 ); then ok; else err "$e"; fi
        """
    /// PATH: removed when it is a regular file.
    static let removeLeftover = """
        p=$1; chk "$p"; c=$?; if [ $c != 0 ]; then bad $c; \
        elif [ -f "./$p" ] && [ ! -L "./$p" ]; then if e=$(rm -f -- "./$p" 2>&1); then ok; else err "$e"; fi; \
        else printf "N\\0"; fi
        """
    /// NAME: a small file written and removed in DIR.
    static let probe = """
        if e=$( { printf x > "./$1" && rm -f -- "./$1"; } 2>&1 ); then ok; else rm -f -- "./$1"; err "$e"; fi
        """
    /// PATH: `S` then the file's bytes.
    static let read = """
        p=$1; chk "$p"; c=$?; if [ $c != 0 ]; then bad $c; elif [ -L "./$p" ] || [ ! -f "./$p" ]; then printf "N\\0"; \
        else printf "S\\0"; cat -- "./$p"; fi
        """

    /// `'bytes'`, each `'` written `'\''`: one word for the remote shell.
    static func quoted(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x27]
        for b in bytes {
            if b == 0x27 { out += Array("'\\''".utf8) } else { out.append(b) }
        }
        out.append(0x27)
        return out
    }

    /// `LC_ALL=C`, then into DIR (the login directory when empty), 97 when that fails.
    static func enter(_ directory: [UInt8]) -> [UInt8] {
        Array("LC_ALL=C; export LC_ALL; umask 022; cd -- ".utf8) + quoted(directory.isEmpty ? [0x2E] : directory)
            + Array(" || exit 97; ".utf8)
    }

    /// The command line: enter DIR, then `xargs -0 -r sh -c 'PRELUDE BODY' sh`. A body of
    /// `perCall` words per item runs in a loop over `items` of them per shell (a shell per
    /// item cost 440 forks for 440 directories): `-n` keeps the items whole, `-x` makes
    /// xargs stop rather than split one if the line would not fit (`call` sizes `items`).
    /// `looping` false: the body takes its shell's items whole (`keepStaged`).
    static func batch(_ directory: [UInt8], _ body: String, perCall: Int? = nil, items: Int = 1, after: String? = nil,
                      looping: Bool = true) -> [UInt8] {
        precondition(!body.contains("'") && !prelude.contains("'"), "an inner script is single-quoted once")
        guard let perCall else {
            return enter(directory) + Array("exec xargs -0 -r sh -c '\(prelude) \(body)' sh".utf8)
        }
        let loop = (looping ? "while [ $# -ge \(perCall) ]; do \(body); shift \(perCall); done" : body)
            + (after.map { "; " + $0 } ?? "")
        return enter(directory) + Array("exec xargs -0 -r -x -n \(perCall * max(1, items)) sh -c '\(prelude) \(loop)' sh".utf8)
    }

    /// The bytes of command line `xargs` is asked to fill at most (GNU's default buffer is
    /// 128 KiB, POSIX promises 4 KiB; a path is at most 4 KiB).
    static let lineBudget = 48 << 10

    /// Enter DIR, then `tail` (a fixed command, no data).
    static func plain(_ directory: [UInt8], _ tail: String) -> [UInt8] {
        enter(directory) + Array(tail.utf8)
    }

    /// `items`, each NUL-terminated.
    static func input(_ items: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(items.reduce(0) { $0 + $1.count + 1 })
        for item in items {
            out += item
            out.append(0)
        }
        return out
    }
}

/// Reads a reply: NUL-terminated fields, in order.
struct ReplyReader {
    let bytes: [UInt8]
    var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// True when nothing is left.
    var atEnd: Bool { offset >= bytes.count }

    /// The next field (without its NUL); nil at the end or on a field cut short.
    mutating func field() -> [UInt8]? {
        guard offset < bytes.count, let end = bytes[offset...].firstIndex(of: 0) else { return nil }
        defer { offset = end + 1 }
        return Array(bytes[offset..<end])
    }

    /// The rest, unsplit.
    mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return offset < bytes.count ? Array(bytes[offset...]) : []
    }

    /// A `find -printf` record: name, stat and link target.
    mutating func record() -> (name: [UInt8], stat: FileStat, target: [UInt8])? {
        guard let header = field() else { return nil }
        return record(header: header)
    }

    /// The rest of a record whose header field was read.
    mutating func record(header: [UInt8]) -> (name: [UInt8], stat: FileStat, target: [UInt8])? {
        guard let name = field(), let target = field(), let stat = Self.parse(header) else { return nil }
        return (name, stat, target)
    }

    /// True for a record's header (`f 644 …`: a kind letter, then a space), not a token.
    static func isHeader(_ field: [UInt8]) -> Bool { field.count > 2 && field[1] == 0x20 }

    /// `f 644 12 1700000000.1234567890 1700000000.1234567890 65024 123 1` -> a stat.
    static func parse(_ header: [UInt8]) -> FileStat? {
        let words = header.split(separator: 0x20).map { String(decoding: $0, as: UTF8.self) }
        guard words.count == 8, let mode = UInt32(words[1], radix: 8), let size = UInt64(words[2]),
              let mtime = timespec(words[3]), let ctime = timespec(words[4]), let device = UInt64(words[5]),
              let inode = UInt64(words[6]), let links = UInt32(words[7]) else { return nil }
        let kind: FileKind
        switch words[0] {
        case "f": kind = .regular
        case "d": kind = .directory
        case "l": kind = .symlink
        default: kind = .special
        }
        var stat = FileStat(kind: kind, mode: mode & 0o7777, size: size, mtime: mtime, ctime: ctime, device: device, inode: inode)
        stat.links = links
        return stat
    }

    /// `SECONDS.FRACTION` (find prints 10 digits) -> seconds and nanoseconds.
    static func timespec(_ text: String) -> Timespec? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard let seconds = Int64(parts[0]) else { return nil }
        guard parts.count > 1 else { return Timespec(seconds: seconds, nanoseconds: 0) }
        let digits = String((parts[1] + "000000000").prefix(9))
        guard let nanoseconds = Int64(digits) else { return nil }
        // A time before 1970: -1.25 is -2 s + 0.75 s.
        if parts[0].hasPrefix("-"), nanoseconds > 0 {
            return Timespec(seconds: seconds - 1, nanoseconds: 1_000_000_000 - nanoseconds)
        }
        return Timespec(seconds: seconds, nanoseconds: nanoseconds)
    }
}
