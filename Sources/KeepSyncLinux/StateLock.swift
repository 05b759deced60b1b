import Glibc
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
                _ = lseek(fd.rawValue, 0, SEEK_SET)
                let text = (try? fd.readAll()).map { String(decoding: $0, as: UTF8.self) } ?? ""
                pid = String(text.filter { !$0.isWhitespace })
                if let n = Int32(pid), kill(n, 0) == 0 || errno == EPERM { break }
                pid = ""
                usleep(10_000)
            }
            fd.close()
            throw KeepSyncError(.unsafe, "another keepsync (pid \(pid.isEmpty ? "unknown" : pid)) holds the state directory \(HostPaths.display(stateDirectory))")
        }
        // Overwrite in place, then cut: the file is never seen empty by a loser.
        let text = Array("\(getpid())\n".utf8)
        _ = text.withUnsafeBytes { pwrite(fd.rawValue, $0.baseAddress, $0.count, 0) }
        try? fd.truncate(UInt64(text.count))
    }

    /// Releases the lock.
    public func release() { fd.close() }
}
