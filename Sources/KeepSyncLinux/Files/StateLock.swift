import Glibc
import KeepSyncCore

/// The single-instance lock: `flock` on `lock` in the state directory, holding our PID.
public final class StateLock {
    private let fd: FileDescriptor

    /// Takes the lock or throws `.unsafe` naming the holder's PID.
    public init(stateDirectory: [UInt8]) throws {
        let path = stateDirectory + Array("/lock".utf8)
        do throws(Errno) { fd = try Sys.open(.currentDirectory, path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600) } catch {
            throw KeepSyncError(error.code, "cannot open lock \(HostPaths.display(path)): \(error.text)")
        }
        let locked: Bool
        do throws(Errno) { locked = try fd.tryLockExclusive() } catch {
            fd.close()
            throw KeepSyncError(error.code, "cannot lock \(HostPaths.display(path)): \(error.text)")
        }
        guard locked else {
            // The holder writes its PID right after locking: give it a moment.
            var pid = ""
            for _ in 0..<50 {
                try? fd.seek(to: 0)
                let text = (try? fd.readAll()).map { String(decoding: $0, as: UTF8.self) } ?? ""
                pid = String(text.filter { !$0.isWhitespace })
                if let n = Int32(pid), Sys.processExists(n) { break }
                pid = ""
                Sys.sleep(microseconds: 10_000)
            }
            fd.close()
            throw KeepSyncError(.unsafe, "another keepsync (pid \(pid.isEmpty ? "unknown" : pid)) holds the state directory \(HostPaths.display(stateDirectory))")
        }
        // Overwrite in place, then cut: the file is never seen empty by a loser.
        let text = Array("\(Sys.processID())\n".utf8)
        try? fd.write(text, at: 0)
        try? fd.truncate(UInt64(text.count))
    }

    /// Releases the lock.
    public func release() { fd.close() }
}
