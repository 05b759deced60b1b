/// The one table of keepsync's commands and options: the parser reads it, and `--help`,
/// the manual page (`keepsync help --man`) and the shell completions
/// (`keepsync help --completion bash`) are made from it, so none can drift from another.
public enum OptionTable {
    /// One option.
    public struct Option: Sendable {
        /// `--settle`, or `-v`.
        public let flag: String
        /// The value's name (`ms`), nil for a switch.
        public let value: String?
        /// One or two lines of help.
        public let help: String
        /// What it is when not given, if worth saying.
        public let fallback: String?
        /// How a shell completes the value: `file`, `directory`, a word list, or nothing.
        public let completion: Completion

        /// Completions for a value.
        public enum Completion: Sendable, Equatable {
            /// Nothing to offer.
            case none
            /// A file name.
            case file
            /// A directory name.
            case directory
            /// One of these words.
            case words([String])
        }
    }

    /// One command.
    public struct Command: Sendable {
        /// `run`, or `service install`.
        public let name: String
        /// One line.
        public let help: String
    }

    /// Every command.
    public static let commands: [Command] = [
        Command(name: "run", help: "Watch the source and mirror every change until stopped."),
        Command(name: "sync", help: "Run one full verify-and-repair pass, then exit."),
        Command(name: "check", help: "Compare the mirror with the source; change nothing."),
        Command(name: "status", help: "Show what the agent knows, from its state."),
        Command(name: "versions [PATH]", help: "List the kept versions of PATH (below the source root), newest first."),
        Command(name: "restore PATH", help: "Copy the newest version of PATH back into the source\n(also --at, --to, --force)."),
        Command(name: "service install", help: "Install the binary and a systemd user unit (also --name, --enable)."),
        Command(name: "service uninstall", help: "Remove the systemd user unit (also --name)."),
        Command(name: "help", help: "This text; --man: the manual page; --completion bash: completions."),
    ]

    /// Every option, in the order help lists them.
    public static let options: [Option] = [
        Option(flag: "--config", value: "file", help: "Configuration file.",
               fallback: "$XDG_CONFIG_HOME/keepsync/keepsync.conf if it exists", completion: .file),
        Option(flag: "--source", value: "dir", help: "The folder to watch.", fallback: "required", completion: .directory),
        Option(flag: "--mirror", value: "dir",
               help: "The mirror; receives the source's contents.\n[USER@]HOST:DIR: a directory on another machine, over ssh.\n"
                   + "Repeatable: several mirrors. NAME: that [mirror NAME]\nsection of the configuration file alone.",
               fallback: "required", completion: .directory),
        Option(flag: "--state", value: "dir", help: "Records, lock and status file.",
               fallback: "$XDG_STATE_HOME/keepsync/<hash of source and mirror>", completion: .directory),
        Option(flag: "--exclude", value: "glob", help: "Skip matching paths, gitignore-style (repeatable).",
               fallback: nil, completion: .none),
        Option(flag: "--settle", value: "ms", help: "Quiet time before a changed path is copied.",
               fallback: "\(Configuration.defaultSettleMilliseconds)", completion: .none),
        Option(flag: "--max-delay", value: "ms", help: "A busy path is still copied this often.",
               fallback: "\(Configuration.defaultMaxDelayMilliseconds)", completion: .none),
        Option(flag: "--no-delete", value: nil, help: "Never remove anything from the mirror.", fallback: nil, completion: .none),
        Option(flag: "--max-delete", value: "pct",
               help: "Hold a scan's deletions above this percentage of the\nmirror's entries; 100 turns the brake off.",
               fallback: "\(Configuration.defaultMaxDeletePercent)", completion: .none),
        Option(flag: "--allow-mass-delete", value: nil, help: "Lift the mass-delete brake for this invocation.",
               fallback: nil, completion: .none),
        Option(flag: "--accept-new-source", value: nil, help: "Accept a source root whose identity changed.",
               fallback: nil, completion: .none),
        Option(flag: "--accept-new-mirror", value: nil, help: "Accept a mirror root whose identity changed (a new disk).",
               fallback: nil, completion: .none),
        Option(flag: "--content", value: nil, help: "check, sync: also compare file contents byte by byte.",
               fallback: nil, completion: .none),
        Option(flag: "--keep-versions", value: "duration",
               help: "Keep what the source replaced or deleted this long:\n30d, 12h, 90s (s, m, h, d or w); 0 turns it off.",
               fallback: ConfigFileParser.durationText(Configuration.defaultKeepVersionsSeconds), completion: .none),
        Option(flag: "--versions-dir", value: "dir", help: "Where versions are kept: directly inside the mirror,\nor elsewhere on its file system.",
               fallback: "MIRROR/\(VersionSettings.defaultDirectoryName)", completion: .directory),
        Option(flag: "--verify-interval", value: "sec",
               help: "run: a full pass this often, repairing what changed in\nthe mirror behind its back; 0 turns it off.",
               fallback: "\(Configuration.defaultVerifyIntervalSeconds)", completion: .none),
        Option(flag: "--ssh", value: "command", help: "Remote mirrors: the ssh command line.", fallback: "ssh", completion: .none),
        Option(flag: "--rsync-path", value: "path", help: "Remote mirrors: the rsync program on the remote host.",
               fallback: "rsync", completion: .none),
        Option(flag: "--log-level", value: "level", help: "error, warning, info or debug.",
               fallback: "\(Configuration.defaultLogLevel)", completion: .words(["error", "warning", "info", "debug"])),
        Option(flag: "-v", value: nil, help: "Same as --log-level debug.", fallback: nil, completion: .none),
        Option(flag: "--foreground", value: nil, help: "Human-readable log lines.",
               fallback: "on when stderr is a terminal", completion: .none),
        Option(flag: "--json", value: nil, help: "status: print the status file as JSON;\nversions: the list as a JSON array.",
               fallback: nil, completion: .none),
        Option(flag: "--at", value: "time",
               help: "restore: the newest version at or before TIME:\n2026-12-07T01:30:00Z, '2026-12-07 01:30' (local), '2h ago'.",
               fallback: "the newest", completion: .none),
        Option(flag: "--to", value: "dir", help: "restore: into DIR (as DIR/NAME) instead of the source.",
               fallback: nil, completion: .directory),
        Option(flag: "--force", value: nil, help: "restore: replace a file or an empty directory in the way.",
               fallback: nil, completion: .none),
        Option(flag: "--name", value: "name", help: "service: the instance name (keepsync@<name>.service).",
               fallback: nil, completion: .none),
        Option(flag: "--enable", value: nil, help: "service install: also enable the unit.", fallback: nil, completion: .none),
        Option(flag: "--man", value: nil, help: "help: print the manual page (roff).", fallback: nil, completion: .none),
        Option(flag: "--completion", value: "shell", help: "help: print the completions for a shell.",
               fallback: nil, completion: .words(["bash"])),
        Option(flag: "--help", value: nil, help: "Show help information (also -h).", fallback: nil, completion: .none),
        Option(flag: "--version", value: nil, help: "Show the version.", fallback: nil, completion: .none),
    ]

    /// The option spelled `flag`, if any.
    public static func option(_ flag: String) -> Option? { options.first { $0.flag == flag } }
}
