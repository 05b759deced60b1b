import Glibc
import KeepSyncCore

/// The remote mirror's root directory as `sync` and `run` check it before writing (the
/// vanished-or-replaced rule): its identity on the remote, made on a first run.
public struct RemoteRoot: Sendable {
    /// The connection.
    public let session: RemoteSession
    /// Where the mirror is.
    public let target: RemoteTarget

    /// The root of `target` over `session`.
    public init(session: RemoteSession, target: RemoteTarget) {
        self.session = session
        self.target = target
    }

    /// What the remote holds, as a mirror root's limits: a POSIX file system, named after
    /// the host (the remote's own limits are not probed).
    public var limits: MirrorLimits { MirrorLimits(fileSystem: "ssh \(target.host)") }

    /// The remote directory now (DIR itself followed, as `cd` does); nil when it is not
    /// there. Throws `.unreachable` when the host cannot be asked.
    public func current() throws -> MirrorRoot? {
        let output = try transported {
            try session.run(RemoteScript.plain(target.directory, "exec find -P . -maxdepth 0 -printf '\(RemoteScript.format)'"))
        }
        if output.status == 97 { return nil }
        var reader = ReplyReader(output.stdout)
        guard output.status == 0, let record = reader.record() else {
            throw KeepSyncError(.io, "cannot read the mirror directory on \(target.host): exit \(output.status): \(String(decoding: output.stderr, as: UTF8.self).trimmingNewlines)")
        }
        guard record.stat.kind == FileKind.directory else {
            throw KeepSyncError(.configuration, "--mirror \(String(decoding: target.normalized, as: UTF8.self)): not a directory on \(target.host)")
        }
        return MirrorRoot(identity: FileIdentity(device: record.stat.device, inode: record.stat.inode),
                          fileSystem: Array("ssh \(target.host)".utf8), limits: limits)
    }

    /// `mkdir -p DIR` on the remote.
    public func make() throws {
        let output = try transported {
            try session.run(Array("mkdir -p -- ".utf8) + RemoteScript.quoted(target.directory.isEmpty ? [0x2E] : target.directory))
        }
        guard output.status == 0 else {
            throw KeepSyncError(.io, "cannot make the mirror directory on \(target.host): \(String(decoding: output.stderr, as: UTF8.self).trimmingNewlines)")
        }
    }

    /// The remote rsync's version; one warning when it cannot fsync (before 3.2.4).
    public func checkRsync(logger: Logger) throws {
        let version = try transported { try session.rsyncVersion() }
        if !version.hasFsync {
            logger.warning("the rsync on \(target.host) is older than 3.2.4 (\(version.line)): files are not fsynced there, remote durability is not guaranteed")
        }
    }

    /// `body`, its transport failure as a `KeepSyncError` naming the host.
    func transported<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as RemoteFailure { throw error.error }
    }

    /// The mirror at this root for `settings`' source, keeping versions when they are on:
    /// every caller builds it here, so the rsync runs' arguments (a warm rsync is used only
    /// for the same ones) and the listings (which skip the versions directory) agree.
    public func mirror(_ settings: Settings) -> RemoteMirror {
        RemoteMirror(session: session, target: target, sourceRoot: settings.source,
                     versions: settings.versions.map { v in
                         RemoteMirror.VersionKeeping(directory: v.directory, now: { Int64(Glibc.time(nil)) })
                     })
    }
}
