import Foundation
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
            let text = (try? fd.readAll()).map { String(decoding: $0, as: UTF8.self) } ?? ""
            let pid = text.trimmingCharacters(in: .whitespacesAndNewlines)
            fd.close()
            throw KeepSyncError(.unsafe, "another keepsync (pid \(pid.isEmpty ? "unknown" : pid)) holds the state directory \(HostPaths.display(stateDirectory))")
        }
        try? fd.truncate(0)
        try? fd.writeAll(Array("\(getpid())\n".utf8))
    }

    /// Releases the lock.
    public func release() { fd.close() }
}
