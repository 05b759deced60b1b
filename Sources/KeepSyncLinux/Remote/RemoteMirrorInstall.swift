import Dispatch
import KeepSyncCore

/// A remote mirror's file installs: one rsync run per batch, the remote checked before
/// (ancestors, old inodes) and stat'ed after.
extension RemoteMirror {
    /// Installs a batch through one rsync run (more only for sources that changed during
    /// it). Before: the remote ancestors are checked (a symlink refuses the path) and the
    /// old remote inodes noted. After: the remote is stat'ed; a path counts as installed
    /// only when rsync exited 0, or, after a partial exit (23, 24), when the remote holds
    /// a new inode of the source's kind, size and mtime. Transport failures fail every path.
    public func install(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                        logger: Logger) -> [(path: RelativePath, result: Result<CopyResult?, any Error>)] {
        var results: [RelativePath: Result<CopyResult?, any Error>] = [:]
        var pending = paths
        var round = 0
        while !pending.isEmpty {
            round += 1
            let changed = installRound(pending, from: source, logger: logger, finalRound: round == 3, into: &results)
            pending = changed
        }
        return paths.map { ($0, results[$0] ?? .failure(KeepSyncError(.io, "not installed", path: $0))) }
    }

    /// `install`, run whole in the background from `commit` (`DeferredInstall`).
    public func beginInstall(_ paths: [RelativePath], from source: any FileSystemProviding, io: ParallelIO,
                             logger: Logger) -> any PendingInstall {
        DeferredInstall { [self] in install(paths, from: source, io: io, logger: logger) }
    }

    /// One rsync run over `paths`; fills `results`, returns the paths whose source
    /// changed during it (to go again unless `finalRound`).
    private func installRound(_ paths: [RelativePath], from source: any FileSystemProviding, logger: Logger,
                              finalRound: Bool, into results: inout [RelativePath: Result<CopyResult?, any Error>]) -> [RelativePath] {
        // The versions copied; a vanished source is nil, not an error.
        var before: [RelativePath: FileStat] = [:]
        var send: [RelativePath] = []
        for path in paths {
            do {
                guard let stat = try source.stat(path) else {
                    results[path] = .success(nil)
                    continue
                }
                guard stat.kind == .regular else {
                    results[path] = .failure(KeepSyncError(.conflict, "install: not a regular file in the source", path: path))
                    continue
                }
                before[path] = stat
                send.append(path)
            } catch { results[path] = .failure(error) }
        }
        guard !send.isEmpty else { return [] }

        // Remote ancestors checked, old inodes noted, in one round trip, unless a read just
        // saw every directory whole (`checkedFor`).
        let clock = ContinuousClock(), t0 = clock.now
        let justChecked = state.withLock { s in
            send.allSatisfy { path in s.checked[path.parent ?? .root].map { t0 - $0 < Self.checkedFor } ?? false }
        }
        let old: [Result<FileStat, KeepSyncError>?]
        if justChecked {
            old = []
        } else {
            do { old = try statAllForInstall(send) } catch {
                for path in send { results[path] = .failure(Self.naming(error, path)) }
                return []
            }
            state.withLock { s in
                s.noteChecked(zip(send, old).compactMap { path, reply in
                    if case .failure = reply { return nil }
                    return path.parent ?? .root
                }, at: t0)
            }
        }
        var allowed: [RelativePath] = justChecked ? send : []
        var oldInode: [RelativePath: UInt64] = [:]
        for (path, reply) in zip(send, old) {
            switch reply {
            case .failure(let error): results[path] = .failure(error)
            case .success(let stat): oldInode[path] = stat.inode; allowed.append(path)
            case nil: allowed.append(path)
            }
        }
        guard !allowed.isEmpty else { return [] }

        changing(allowed)
        do { try moveStaged(of: allowed) } catch {
            for path in allowed { results[path] = .failure(Self.naming(error, path)) }
            return []
        }
        let outcome: RemoteOutput
        let t1 = clock.now
        do { outcome = try runRsync(allowed) } catch {
            for path in allowed { results[path] = .failure(Self.naming(error, path)) }
            return []
        }
        // What rsync replaced, it linked aside: moved to the versions' names by the next
        // barrier, whatever the outcome (`RemoteMirror+Versions`).
        if versions != nil { state.withLock { $0.staged.formUnion(allowed) } }
        let partial = outcome.status == 23 || outcome.status == 24
        let rsyncMessage = String(decoding: outcome.stderr, as: UTF8.self).trimmingNewlines
        if outcome.status != 0 && !partial {
            let failure = KeepSyncError(.io, "rsync exited \(outcome.status): \(rsyncMessage)")
            for path in allowed { results[path] = .failure(KeepSyncError(failure.code, failure.message, path: path)) }
            // A remote rsync killed mid-file leaves its temp file: swept now, not at the next pass.
            sweepLeftovers(of: allowed)
            return []
        }
        if partial { logger.warning("rsync to \(session.host) exited \(outcome.status): \(rsyncMessage)") }

        let after: [Result<FileStat, KeepSyncError>?]
        let t2 = clock.now
        defer {
            let ms = { (d: Duration) in Int(d / .milliseconds(1)) }
            logger.debug("rsync of \(allowed.count) to \(session.host): check \(ms(t1 - t0)) ms, transfer \(ms(t2 - t1)) ms\(outcome.warm ? " (started ahead)" : ""), stat \(ms(clock.now - t2)) ms")
        }
        do { after = try remoteStatAll(allowed) } catch {
            for path in allowed { results[path] = .failure(Self.naming(error, path)) }
            return []
        }
        var again: [RelativePath] = []
        for (path, reply) in zip(allowed, after) {
            let copied = before[path]!
            let now: FileStat?
            do { now = try source.currentVersion(path) } catch { now = nil }
            guard let now else {
                // Gone from the source meanwhile: whatever arrived is not recorded.
                results[path] = .success(nil)
                continue
            }
            guard case .success(let remote) = reply else {
                results[path] = .failure(reply.flatMap { r -> KeepSyncError? in if case .failure(let e) = r { return e }; return nil }
                                         ?? KeepSyncError(.io, "rsync: not on \(session.host) after the transfer\(partial ? " (exit \(outcome.status): \(rsyncMessage))" : "")", path: path))
                continue
            }
            // After a partial exit, a new inode says rsync put it there (unknown without the
            // check: then it did not arrive, and goes again).
            let arrived = remote.kind == .regular && remote.size == copied.size && remote.mtime == copied.mtime
                && (!partial || (!justChecked && oldInode[path] != remote.inode))
            guard arrived else {
                results[path] = .failure(KeepSyncError(.io, "rsync exited \(outcome.status); \(path.escaped) did not arrive: \(rsyncMessage)", path: path))
                continue
            }
            if !now.sameVersion(as: copied) && !finalRound {
                again.append(path)
                continue
            }
            if !now.sameVersion(as: copied) {
                results[path] = .failure(KeepSyncError(.sourceChanged, "changed during every transfer", path: path))
                continue
            }
            results[path] = .success(CopyResult(path: path, source: copied, installed: remote))
        }
        return again
    }

    /// Removes rsync's temp files (`.NAME.XXXXXX`) for `paths` that a failed run left in
    /// their directories: a listing per directory, a removal per leftover (failures only).
    func sweepLeftovers(of paths: [RelativePath]) {
        for (parent, files) in Dictionary(grouping: paths, by: { $0.parent ?? .root }) {
            guard let entries = try? list(parent) else { continue }
            let names = Set(files.map(\.name))
            for e in entries where e.stat.kind == .regular && Self.isRsyncTemporary(e.name)
                && names.contains(Array(e.name[1..<(e.name.count - 7)])) {
                _ = try? removeLeftoverTemporary(parent.appending(e.name))
            }
        }
    }

    /// The pre-transfer stat, always asked of the remote (it checks the ancestors): like
    /// `statAll`, but a missing parent is an error.
    private func statAllForInstall(_ paths: [RelativePath]) throws -> [Result<FileStat, KeepSyncError>?] {
        let replies = try statCall(paths)
        return zip(paths, replies).map { path, reply in
            switch reply.token {
            case "S": return reply.stat.map { .success($0) } ?? .failure(KeepSyncError(.io, "unreadable remote listing", path: path))
            case "N": return nil
            case "P": return .failure(KeepSyncError(.notFound, "install: the parent directory is not on \(session.host)", path: path))
            default: return .failure(reply.error(path, "install"))
            }
        }
    }

    /// Keeps an rsync for the next batch started ahead (`RemoteSession.keepRsyncWarm`).
    public func keepRsyncWarm() {
        let (target, sourceRoot, rsync, timeout, versions) = (target, sourceRoot, rsync, rsyncIOTimeout, versions)
        session.keepRsyncWarm { [weak session] version in
            guard let session else { return nil }
            return RemoteMirror(session: session, target: target, sourceRoot: sourceRoot, rsync: rsync, rsyncIOTimeout: timeout,
                                versions: versions)
                .rsyncArguments(fsync: version.hasFsync)
        }
    }

    /// The rsync argv for a batch (the list itself goes on stdin).
    public func rsyncArguments(fsync: Bool) -> [[UInt8]] {
        var argv: [[UInt8]] = [rsync]
        let options = ["--protect-args", "--files-from=-", "--from0", "--no-implied-dirs", "--perms", "--times",
                       "--ignore-times", "--timeout=\(rsyncIOTimeout)"] + (fsync ? ["--fsync"] : [])
        argv += options.map { Array($0.utf8) } + backupArguments
        argv.append(Array("--rsync-path=".utf8) + session.rsyncPath)
        argv.append(Array("-e".utf8))
        argv.append(session.rsyncShell)
        argv.append(sourceRoot + (sourceRoot.last == 0x2F ? [] : [0x2F]))
        let host = target.host.contains(":") ? "[\(target.host)]" : target.host
        let login = Array((target.user.map { "\($0)@\(host)" } ?? host).utf8)
        let dir = target.directory.isEmpty || target.directory == [0x2F] ? target.directory : target.directory + [0x2F]
        argv.append(login + [0x3A] + dir)
        return argv
    }

    /// One rsync run; its ssh failing (a `RemoteFailure`, or exit 255) is `.unreachable`.
    private func runRsync(_ paths: [RelativePath]) throws(KeepSyncError) -> RemoteOutput {
        let version: RemoteRsyncVersion
        do { version = try session.rsyncVersion() } catch { throw error.error }
        state.withLock { s in for p in paths { s.inFlight[p, default: 0] += 1 } }
        defer {
            state.withLock { s in
                for p in paths {
                    s.inFlight[p, default: 1] -= 1
                    if s.inFlight[p] == 0 { s.inFlight[p] = nil }
                }
            }
        }
        // Our own deadline only bounds a stuck rsync; its --timeout notices a silent remote.
        let output: RemoteOutput
        do {
            output = try session.runRsync(rsyncArguments(fsync: version.hasFsync), input: RemoteScript.input(paths.map(\.bytes)),
                                          timeout: .seconds(Int64(rsyncIOTimeout) * 60))
        } catch { throw error.error }
        // 255: ssh itself failed (rsync's own errors are below 255).
        if output.status == 255 {
            let text = String(decoding: output.stderr, as: UTF8.self).trimmingNewlines
            throw RemoteFailure(.unreachable, host: session.host, "rsync exited 255: \(text)").error
        }
        return output
    }

    /// `error` with `path` when it names none (a transport failure, for each path it failed).
    static func naming(_ error: any Error, _ path: RelativePath) -> any Error {
        guard var e = error as? KeepSyncError, e.path == nil else { return error }
        e.path = path
        return e
    }
}

/// A pending install that runs the whole install on a thread of its own from `commit`
/// (rsync puts files in place as it goes: there is no earlier step to split off), so a
/// pass's walk and its next group go on meanwhile; `finish` waits for it. Never committed,
/// it runs at `finish`.
final class DeferredInstall: PendingInstall, @unchecked Sendable {
    typealias Results = [(path: RelativePath, result: Result<CopyResult?, any Error>)]
    private let work: () -> Results
    private let done = DispatchSemaphore(value: 0)
    // Written by the worker before `done` is signalled, read by `finish` after it waited.
    private var results: Results?
    private var started = false

    init(_ work: @escaping () -> Results) { self.work = work }

    /// Starts the install on a thread of its own: a queue of its own gets one at once, where
    /// the global queue ran two (one per core) and the mirror's other groups waited.
    func commit() {
        guard !started else { return }
        started = true
        DispatchQueue(label: "keepsync.remote.install").async { [self] in
            results = work()
            done.signal()
        }
    }

    /// Waits for the install (runs it here when never committed).
    func finish() -> Results {
        guard started else { return work() }
        done.wait()
        return results ?? []
    }
}
