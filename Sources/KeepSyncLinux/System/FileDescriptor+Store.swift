import CKeepSyncShims
import Glibc

/// Opens used by the record store: whole-file reads, appends and private temp files,
/// never following a final symlink.
extension Sys {
    /// Opens a directory (absolute, or relative to `dir`) for use as a dirfd and for `fsync`.
    static func openDirectory(_ path: [UInt8], relativeTo dir: FileDescriptor = .currentDirectory) throws(Errno) -> FileDescriptor {
        try open(dir, path, O_RDONLY | ks_o_directory())
    }

    /// Opens an existing file read-only; nil when it does not exist.
    static func openForReading(_ dir: FileDescriptor, _ name: [UInt8]) throws(Errno) -> FileDescriptor? {
        try openIfPresent(dir, name, O_RDONLY | ks_o_nofollow())
    }

    /// Opens an existing file for reading from the start and appending at the end; nil
    /// when it does not exist.
    static func openForAppending(_ dir: FileDescriptor, _ name: [UInt8]) throws(Errno) -> FileDescriptor? {
        try openIfPresent(dir, name, O_RDWR | O_APPEND | ks_o_nofollow())
    }

    /// Creates a file with mode 0600, or empties an existing one, open for reading and appending.
    static func createForAppending(_ dir: FileDescriptor, _ name: [UInt8]) throws(Errno) -> FileDescriptor {
        try open(dir, name, O_RDWR | O_APPEND | O_CREAT | O_TRUNC | ks_o_nofollow(), mode: 0o600)
    }

    /// `unlinkat` of a file; a missing name is not an error.
    static func removeFileIfPresent(_ dir: FileDescriptor, _ name: [UInt8]) throws(Errno) {
        do {
            try unlink(dir, name, directory: false)
        } catch {
            if error != .noSuchFileOrDirectory { throw error }
        }
    }

    private static func openIfPresent(_ dir: FileDescriptor, _ name: [UInt8], _ flags: Int32) throws(Errno) -> FileDescriptor? {
        do {
            return try open(dir, name, flags)
        } catch {
            if error == .noSuchFileOrDirectory { return nil }
            throw error
        }
    }
}
