/// `--help`, the manual page and the shell completions, each made from `OptionTable`.
public enum HelpText {
    /// The `--help` text.
    public static var usage: String {
        var out = """
            OVERVIEW: Keep a mirror directory identical to a source directory, continuously.

            USAGE: keepsync <command> [<options>]

            COMMANDS:

            """
        for c in OptionTable.commands { out += column("  " + c.name, c.help.split(separator: "\n").map(String.init)) }
        out += "\nOPTIONS:\n"
        for o in OptionTable.options {
            var lines = o.help.split(separator: "\n").map(String.init)
            if let fallback = o.fallback {
                let note = fallback == "required" ? "(required)" : "(default: \(fallback))"
                if (lines.last ?? "").count + note.count + 1 <= 54 { lines[lines.count - 1] += " " + note } else { lines.append(note) }
            }
            out += column("  " + o.flag + (o.value.map { " <\($0)>" } ?? ""), lines)
        }
        out += "\nSEVERAL MIRRORS:\n" + severalMirrors.map { $0.isEmpty ? "\n" : "  \($0)\n" }.joined()
        out += "\nA flag overrides the configuration file. man keepsync: the manual.\n"
        return out
    }

    /// Several mirrors in the configuration file: what `--help` and the manual say.
    static let severalMirrors = [
        "Give --mirror more than once, or write one [mirror NAME] section per mirror in",
        "the configuration file. Keys before the first section apply to every mirror; a",
        "section takes path (required), state, delete, max_delete_percent,",
        "verify_interval, ssh_command, rsync_path, keep_versions and versions_dir.",
        "",
        "    source = ~/Documents",
        "    exclude = *.tmp",
        "    [mirror usb]",
        "    path = /media/usb/Documents",
        "    keep_versions = 30d",
        "    [mirror nas]",
        "    path = backup@nas:/srv/Documents",
        "    ssh_command = ssh -p 2222",
        "",
        "sync and check handle every mirror; status shows each; --mirror usb acts on",
        "that one alone.",
    ]

    /// A left column of 26, the help beside it.
    private static func column(_ left: String, _ lines: [String]) -> String {
        let width = 26
        var out = left.count < width ? left + String(repeating: " ", count: width - left.count) : left + "\n" + String(repeating: " ", count: width)
        out += (lines.first ?? "") + "\n"
        for line in lines.dropFirst() { out += String(repeating: " ", count: width) + line + "\n" }
        return out
    }

    /// The manual page, keepsync(1), in roff (man(7) macros).
    public static var manual: String {
        func roff(_ text: String) -> String {
            text.replacingAll("\\", with: "\\e").replacingAll("-", with: "\\-")
                .split(separator: "\n", omittingEmptySubsequences: false)
                .map { $0.hasPrefix(".") || $0.hasPrefix("'") ? "\\&" + $0 : String($0) }.joined(separator: "\n")
        }
        var out = """
            .TH KEEPSYNC 1 "" "keepsync \(KeepSyncVersion.current)" "User Commands"
            .SH NAME
            keepsync \\- keep a mirror directory identical to a source directory, continuously
            .SH SYNOPSIS
            .B keepsync
            .I command
            [\\fIoptions\\fR]
            .SH DESCRIPTION
            keepsync watches the source with inotify and copies each change into the mirror
            within milliseconds, atomically (a reader never sees half a file) and durably.
            It remembers what the mirror holds in records in its state directory, so a
            restart or a full pass touches only what differs. A mirror may be a local
            folder, a USB disk (exFAT, NTFS through FUSE) or a directory on another host
            (\\fB[USER@]HOST:DIR\\fR, rsync over ssh). It never deletes the mirror's contents
            because the source vanished or a disk was unplugged, and holds mass deletions.
            .SH COMMANDS

            """
        for c in OptionTable.commands { out += ".TP\n.B \(roff(c.name))\n\(roff(c.help))\n" }
        out += ".SH OPTIONS\nA flag overrides the configuration file.\n"
        for o in OptionTable.options {
            out += ".TP\n.B \(roff(o.flag))" + (o.value.map { " \\fI\($0)\\fR" } ?? "") + "\n"
            out += roff(o.help.split(separator: "\n").joined(separator: " "))
            if let fallback = o.fallback { out += fallback == "required" ? " Required." : " Default: \(roff(fallback))." }
            out += "\n"
        }
        out += """
            .SH SEVERAL MIRRORS
            \(roff(severalMirrors.prefix(4).joined(separator: "\n")))
            .PP
            .nf
            \(roff(severalMirrors.dropFirst(5).prefix(8).map { $0.trimmingPrefix("    ") }.joined(separator: "\n")))
            .fi
            .PP
            \(roff(severalMirrors.suffix(2).joined(separator: "\n")))
            .SH SIGNALS
            .TP
            .B SIGUSR1
            full resync: compare source, records and mirror, fix every difference
            .TP
            .B SIGHUP
            re\\-read the configuration file, then a full resync
            .TP
            .BR SIGTERM ", " SIGINT
            stop watching, finish or abandon the copy in flight, write the records, exit 0
            .SH EXIT STATUS
            .TP
            .B 0
            success
            .TP
            .B 1
            sync: items failed; check: differences found; status: no status file;
            restore: no such version, or something in the way (see \\-\\-force)
            .TP
            .B 2
            usage or configuration error
            .TP
            .B 3
            refused for safety: vanished or replaced source or mirror, deletions held, or
            another keepsync holds the state directory
            .SH ENVIRONMENT
            .TP
            .B HOME
            where ~ and the XDG defaults point
            .TP
            .B XDG_CONFIG_HOME
            the configuration (default ~/.config)
            .TP
            .B XDG_STATE_HOME
            the state directories (default ~/.local/state)
            .TP
            .B XDG_DATA_HOME
            where service install puts this page and the completions (default ~/.local/share)
            .TP
            .BR NOTIFY_SOCKET ", " WATCHDOG_USEC ", " WATCHDOG_PID
            systemd's notify protocol and watchdog
            .TP
            .B JOURNAL_STREAM
            stderr is the journal: lines carry <N> priorities
            .SH FILES
            .TP
            .I $XDG_CONFIG_HOME/keepsync/keepsync.conf
            the default configuration (NAME.conf for the instance keepsync@NAME)
            .TP
            .I $XDG_STATE_HOME/keepsync/<hash>/
            records.snapshot, records.log, status.json and the lock of one pair
            .TP
            .I ~/.config/systemd/user/keepsync.service
            the unit service install writes; the binary goes to ~/.local/bin/keepsync
            .SH SEE ALSO
            .BR rsync (1),
            .BR systemctl (1),
            .BR journalctl (1)

            """
        return out
    }

    /// A bash completion script: the commands, the options, and values where a shell can
    /// offer them (files, directories, words).
    public static var bashCompletion: String {
        let commands = OptionTable.commands.map { $0.name.split(separator: " ").first.map(String.init)! }
        var seen: Set<String> = []
        let words = commands.filter { seen.insert($0).inserted }.joined(separator: " ")
        let flags = (OptionTable.options.map(\.flag) + ["-h"]).joined(separator: " ")
        var cases = ""
        for o in OptionTable.options where o.value != nil {
            switch o.completion {
            case .none: cases += "        \(o.flag)) return ;;\n"
            case .file: cases += "        \(o.flag)) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
            case .directory: cases += "        \(o.flag)) COMPREPLY=($(compgen -d -- \"$cur\")); return ;;\n"
            case .words(let list): cases += "        \(o.flag)) COMPREPLY=($(compgen -W \"\(list.joined(separator: " "))\" -- \"$cur\")); return ;;\n"
            }
        }
        return """
            # bash completion for keepsync (made by keepsync help --completion bash)
            _keepsync() {
                local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
                case "$prev" in
            \(cases)        service) COMPREPLY=($(compgen -W "install uninstall" -- "$cur")); return ;;
                esac
                if [[ "$cur" == -* ]]; then
                    COMPREPLY=($(compgen -W "\(flags)" -- "$cur"))
                elif [[ $COMP_CWORD -eq 1 ]]; then
                    COMPREPLY=($(compgen -W "\(words)" -- "$cur"))
                fi
            }
            complete -F _keepsync keepsync

            """
    }
}

extension String {
    /// Every `target` replaced by `replacement` (no Foundation in this module).
    func replacingAll(_ target: String, with replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var out = "", rest = self[...]
        while let range = rest.firstRange(of: target) {
            out += rest[..<range.lowerBound] + replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }
}
