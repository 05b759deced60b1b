import CKeepSyncShims
import Glibc
import KeepSyncCore

extension AtomicFileAccessor: NoReplaceRenaming {
    /// `renameat2` with `RENAME_NOREPLACE`, never through a symlink; where the file system
    /// has no such flag (EINVAL), a check then a plain rename.
    public func renameNoReplace(_ from: RelativePath, to: RelativePath) throws {
        let done = try tree.withParent(from) { fromParent, fromName in
            try tree.withParent(to) { toParent, toName -> Bool in
                do throws(Errno) {
                    _ = try withCPath(fromName) { (f) throws(Errno) -> Int32 in
                        try withCPath(toName) { (t) throws(Errno) -> Int32 in
                            try valueOrErrno { ks_renameat2(fromParent.rawValue, f, toParent.rawValue, t, ks_rename_noreplace()) }
                        }
                    }
                    return true
                } catch {
                    if error.rawValue == EINVAL || error.rawValue == ENOSYS { return false }
                    throw error.error("renameat2", path: to)
                }
            }
        }
        if done { return }
        if try stat(to) != nil { throw Errno.fileExists.error("renameat2", path: to) }
        try rename(from, to: to)
    }
}
