import Dispatch
import Glibc
import KeepSyncCore
import Synchronization

/// The warm rsync: an rsync spawned ahead of the next run, waiting for its list on stdin,
/// so that a change's transfer skips rsync's, ssh's and the login shell's start.
extension RemoteSession {
    /// From now on an rsync is spawned ahead, waiting for its list, whenever none waits:
    /// after a run that ended well or a remote command, while fewer than `warmBeside` other
    /// runs are open, once the remote rsync's version is known (`argv` gives its arguments
    /// for it). A live change's install then skips rsync's, ssh's and the login shell's
    /// start. One more ssh session while it waits (the first of several runs at once takes
    /// it), renewed every `timing.warm` while runs or commands came within
    /// `timing.warmWhileIdle`, ended by `closeMaster` and `close`.
    public func keepRsyncWarm(_ argv: @escaping @Sendable (RemoteRsyncVersion) -> [[UInt8]]?) {
        state.withLock { s in
            s.warm = true
            s.warmArgv = argv
        }
    }

    /// After a remote command: the warm rsync spawned when none waits.
    func refillAfterCommand() {
        let wanted = state.withLock { s -> (@Sendable (RemoteRsyncVersion) -> [[UInt8]]?, RemoteRsyncVersion)? in
            s.lastRun = .now
            guard s.warm, s.standby == nil, s.sessions < Self.warmBeside, !s.closed, let version = s.rsync,
                  let argv = s.warmArgv else { return nil }
            return (argv, version)
        }
        if let (argv, version) = wanted, let words = argv(version) { spawnStandby(words) }
    }

    /// rsync runs under way beside which a warm rsync is still started: changes that come
    /// while the last one's run ends find one, and so does a pass's next group; with six
    /// runs and the shell, sshd's `MaxSessions` of 10 holds them all.
    static let warmBeside = 5

    /// How long a warm rsync for `argv` may wait: `timing.warm`, at most half its `--timeout`.
    func warmAge(_ argv: [[UInt8]]) -> Duration {
        let key = Array("--timeout=".utf8)
        guard let word = argv.first(where: { $0.starts(with: key) }),
              let seconds = Int(String(decoding: word.dropFirst(key.count), as: UTF8.self)), seconds > 0 else { return timing.warm }
        return min(timing.warm, .milliseconds(seconds * 500))
    }

    /// Spawns the warm rsync for `argv` while the master runs. Its ssh gets
    /// `ControlMaster=no`: should the master end meanwhile, it never becomes one itself.
    func spawnStandby(_ argv: [[UInt8]]) {
        func ready(_ s: State) -> Bool {
            s.warm && !s.closed && s.masterOpen && s.standby == nil && s.sessions < Self.warmBeside
                && s.masterPid.map { Sys.canSignal($0) } ?? false
        }
        guard state.withLock({ ready($0) }) else { return }
        let shell = rsyncShell, noMaster = Self.shellWords(sshArguments.map {
            $0 == Array("ControlMaster=auto".utf8) ? Array("ControlMaster=no".utf8) : $0
        })
        guard let child = try? Sys.spawnCaptured(argv.map { $0 == shell ? noMaster : $0 }, stdin: nil) else { return }
        let number = state.withLock { s -> Int? in
            guard ready(s) else { return nil }
            s.standbys += 1
            s.standby = Standby(argv: argv, child: child, number: s.standbys)
            return s.standbys
        }
        guard let number else { return child.abandon() }
        let age = warmAge(argv)
        renewals.asyncAfter(deadline: .now() + .milliseconds(Int(age / .milliseconds(1)))) { [weak self] in
            self?.renewStandby(number)
        }
    }

    /// Standby `number`, still unused after its age: renewed while runs are recent, else
    /// ended.
    func renewStandby(_ number: Int) {
        let (old, renew) = state.withLock { s -> (Standby?, Bool) in
            guard let standby = s.standby, standby.number == number else { return (nil, false) }
            s.standby = nil
            let recent = s.lastRun.map { ContinuousClock.now - $0 < timing.warmWhileIdle } ?? false
            if !recent { s.endedIdle += 1 }
            return (standby, recent)
        }
        guard let old else { return }
        old.child.abandon()
        if renew { spawnStandby(old.argv) }
    }

    /// How many warm rsyncs were spawned, and how many ended unrenewed (no recent run).
    var warmRsyncsSpawned: Int { state.withLock { $0.standbys } }
    var warmRsyncsEndedIdle: Int { state.withLock { $0.endedIdle } }
}
