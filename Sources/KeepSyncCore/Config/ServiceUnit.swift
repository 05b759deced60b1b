/// The systemd user units: one text, rendered for the repository's `systemd/` files and
/// by `keepsync service install` with the installed binary's path.
public enum ServiceUnit {
    /// `ExecStart` path used by the repository's unit files.
    public static let defaultExecutable = "%h/.local/bin/keepsync"

    /// The unit text. `template` renders `keepsync@.service` (instance NAME reads
    /// `$XDG_CONFIG_HOME/keepsync/NAME.conf`), otherwise `keepsync.service`.
    public static func render(executable: String = defaultExecutable, template: Bool) -> String {
        let description = template ? "keepsync mirror %i" : "keepsync mirror"
        let run = template ? "\(executable) run --config %E/keepsync/%i.conf" : "\(executable) run"
        return """
        [Unit]
        Description=\(description): keep a mirror folder identical to a source folder

        [Service]
        Type=notify
        NotifyAccess=main
        ExecStart=\(run)
        ExecReload=kill -HUP $MAINPID
        Restart=on-failure
        RestartSec=2s
        # keepsync pings the watchdog from its sync loop every WatchdogSec/2.
        WatchdogSec=60s
        # SIGTERM abandons the copy in flight and writes the records: seconds, not minutes.
        TimeoutStopSec=30s
        # Exit 2 (configuration) and 3 (refused for safety) need a person, not a restart.
        RestartPreventExitStatus=2 3
        # A background mirror yields to interactive work.
        Nice=5
        IOSchedulingClass=best-effort
        IOSchedulingPriority=6
        # Hardening that works in user units.
        NoNewPrivileges=yes
        LockPersonality=yes
        RestrictRealtime=yes
        RestrictSUIDSGID=yes
        RestrictNamespaces=yes
        SystemCallArchitectures=native
        MemoryDenyWriteExecute=yes

        [Install]
        WantedBy=default.target

        """
    }
}
