import Glibc
import KeepSyncCore

extension AtomicFileAccessor {
    /// `linkat` from the directory of `from` below `origin`'s root to that of `to` below
    /// this one: a second name on the same file system, no byte copied (a symlink itself,
    /// never followed; durable at the next barrier). `.unsupported` where the file system
    /// takes no hard link, or `origin` is not steps on disk.
    public func link(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        let origin = try onDisk(origin, from)
        forgetStagingDirectories(within: to)
        try origin.tree.withParent(from) { fromParent, fromName in
            try tree.withParent(to) { toParent, toName in
                do throws(Errno) {
                    try Sys.link(fromParent, fromName, toParent, toName)
                } catch {
                    if [EPERM, EOPNOTSUPP, EMLINK, ENOSYS].contains(error.rawValue) {
                        throw KeepSyncError(.unsupported, "linkat: \(error.text)", path: from, errno: error.rawValue)
                    }
                    throw error.error("linkat", path: from)
                }
            }
        }
    }

    /// `renameat` from the directory of `from` below `origin`'s root to that of `to` below
    /// this one (a directory moves with its tree; durable at the next barrier).
    public func rename(_ from: RelativePath, in origin: any FileAccessorProviding, to: RelativePath) throws {
        let origin = try onDisk(origin, from)
        origin.forgetStagingDirectories(within: from)
        forgetStagingDirectories(within: to)
        try origin.tree.withParent(from) { fromParent, fromName in
            try tree.withParent(to) { toParent, toName in
                do throws(Errno) {
                    try Sys.rename(fromParent, fromName, toParent, toName)
                } catch { throw error.error("renameat", path: from) }
            }
        }
    }

    /// `origin`'s steps on disk, under its decorators.
    private func onDisk(_ origin: any FileAccessorProviding, _ from: RelativePath) throws -> AtomicFileAccessor {
        guard let steps = origin.innermost as? AtomicFileAccessor else {
            throw KeepSyncError(.unsupported, "no root on disk to link or move from", path: from)
        }
        return steps
    }
}
