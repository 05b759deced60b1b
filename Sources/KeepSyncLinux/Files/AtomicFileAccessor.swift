import CKeepSyncShims
import Glibc
import KeepSyncCore
import Synchronization

/// The local mirror's steps on disk (`LocalMirror` runs them): every call relative to
/// the mirror root's descriptor, never following a symlink, files installed by temp file
/// + fsync + rename. Directory entries are made durable by the next `barrier` (syncfs),
/// which precedes every record append. Where `syncfs` does not reach the file system
/// (FUSE), `LocalMirror` runs these steps under `EntrySyncedSteps`, whose barriers are
/// `syncEntry` calls; there the access time is set with the mtime (`setsAccessTime`:
/// exfat-fuse ignores a time set with the access time omitted).
public final class AtomicFileAccessor: FileAccessorProviding {
    /// Read access to the same tree, through the same confined lookups.
    let tree: PosixFileSystem

    /// Set to make copies in progress give up (their temp files are removed).
    public let cancellation: CancellationFlag

    /// Cleared once FICLONE said the file system cannot clone: no more attempts.
    let cloneWorks = Atomic<Bool>(true)

    /// Temp files this process is writing, by name, each with the directory it was made
    /// in while it waits for its rename (nil: the root, or not staged). A sweep leaves
    /// them alone; a failed rename or a discard unlinks one through its own directory,
    /// wherever another process moved that directory meanwhile.
    let temporaries = Mutex<[[UInt8]: StagingDirectory?]>([:])
    /// The directories staged temp files wait in, open once for all of them (a group
    /// stages files of one directory back to back), with how many files use each.
    let stagingDirectories = Mutex<[RelativePath: (directory: StagingDirectory, files: Int)]>([:])

    /// Times are set with the access time (FUSE: see the type's comment).
    let setsAccessTime: Bool

    /// Opens the mirror root, which must exist; `setsAccessTime` on FUSE.
    public init(rootPath: [UInt8], cancellation: CancellationFlag = CancellationFlag(), setsAccessTime: Bool = false) throws {
        tree = try PosixFileSystem(rootPath: rootPath)
        self.cancellation = cancellation
        self.setsAccessTime = setsAccessTime
    }

    /// Chunk between cancellation checks.
    static let chunk = 16 << 20

    private func checkCancelled(_ path: RelativePath) throws {
        if cancellation.isSet { throw KeepSyncError(.io, "copy abandoned: stopping", path: path) }
    }



    /// `lstat` in the mirror, never following a link.
    public func stat(_ path: RelativePath) throws -> FileStat? { try tree.stat(path) }
    /// A mirror directory's entries.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] { try tree.list(directory) }
    /// A mirror symlink's target bytes.
    public func readLink(_ path: RelativePath) throws -> [UInt8] { try tree.readLink(path) }
    /// Opens a mirror file for reading.
    public func open(_ path: RelativePath) throws -> any SourceFile { try tree.open(path) }

    /// Writes the temp file (data, mode, mtime; fsynced when `durable`), without the rename.
    /// The directory it is made in stays open until `publish` or `discard`.
    public func stage(_ path: RelativePath, from source: any SourceFile, durable: Bool) throws -> StagedFile {
        let parentPath = path.parent!
        let directory: StagingDirectory?
        if parentPath.isRoot {
            directory = nil
        } else {
            do throws(Errno) { directory = try useStagingDirectory(parentPath) } catch {
                throw error.error("open parent directory", path: path)
            }
        }
        let parent = directory?.fd ?? tree.root
        var kept = false
        defer { if !kept { releaseStagingDirectory(parentPath, directory) } }
        let (temp, tempName) = try createTemporary(in: parent, path: path)
        defer {
            temp.close()
            if !kept { removeTemporary(tempName, in: parent) }
        }
        try checkCancelled(path)
        try copyData(from: source, to: temp, path: path)
        do throws(Errno) {
            try temp.setMode(source.stat.mode)
            try temp.setModificationTime(source.stat.mtime, withAccessTime: setsAccessTime)
            if durable { try temp.sync() }
        } catch { throw error.error("finish temp file", path: path) }
        kept = true
        temporaries.withLock { $0[tempName] = directory }
        return StagedFile(path: path, temporaryName: tempName, source: source.stat)
    }

    /// The open directory for a temp file in `path`: the one its staged neighbours wait
    /// in, or a new one.
    private func useStagingDirectory(_ path: RelativePath) throws(Errno) -> StagingDirectory {
        let known = stagingDirectories.withLock { table -> StagingDirectory? in
            guard let entry = table[path] else { return nil }
            table[path]!.files += 1
            return entry.directory
        }
        if let known { return known }
        let opened = StagingDirectory(try tree.openDirectory(path))
        return stagingDirectories.withLock { table in
            // Another thread may have opened it meanwhile: one serves both.
            let directory = table[path]?.directory ?? opened
            table[path] = (directory, (table[path]?.files ?? 0) + 1)
            return directory
        }
    }

    /// Opens directories at or below `path` anew for the next files staged in them (the
    /// ones open may be moved or removed now); files staged already keep theirs.
    func forgetStagingDirectories(within path: RelativePath) {
        stagingDirectories.withLock { table in
            for key in table.keys where key.isWithin(path) { table[key] = nil }
        }
    }

    /// One file less waits in `directory` (nil: the root); closed once none does.
    private func releaseStagingDirectory(_ path: RelativePath, _ directory: StagingDirectory?) {
        guard let directory else { return }
        stagingDirectories.withLock { table in
            guard let entry = table[path], entry.directory === directory else { return }
            if entry.files <= 1 { table[path] = nil } else { table[path]!.files -= 1 }
        }
    }

    /// Takes a staged temp file's directory out of the tables (nil: the root).
    private func takeStagedDirectory(_ staged: StagedFile) -> StagingDirectory? {
        let directory = temporaries.withLock { $0.removeValue(forKey: staged.temporaryName) ?? nil }
        releaseStagingDirectory(staged.path.parent!, directory)
        return directory
    }

    /// Unlinks a temp file of ours through the directory it was made in and forgets it.
    private func removeTemporary(_ name: [UInt8], in directory: FileDescriptor) {
        try? Sys.unlink(directory, name, directory: false)
        temporaries.withLock { _ = $0.removeValue(forKey: name) }
    }

    /// `syncfs` of the mirror's file system.
    public func barrier() throws {
        do throws(Errno) { try tree.root.syncFileSystem() } catch { throw error.error("syncfs") }
    }

    /// fsync of a file or directory by path (gone, or a symlink: nothing to do).
    public func syncEntry(_ path: RelativePath) throws {
        do throws(Errno) { try syncPath(path) } catch { throw error.error("fsync", path: path) }
    }

    private func syncPath(_ path: RelativePath) throws(Errno) {
        if path.isRoot { return try tree.root.sync() }
        let parentPath = path.parent!
        do throws(Errno) {
            let parent = parentPath.isRoot ? tree.root : try tree.openDirectory(parentPath)
            defer { if !parentPath.isRoot { parent.close() } }
            let fd = try Sys.open(parent, path.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
            defer { fd.close() }
            try fd.sync()
        } catch {
            if error == .noSuchFileOrDirectory || error == .tooManySymbolicLinks || error == .notDirectory { return }
            throw error
        }
    }

    /// Creates a temp file in the mirror root, writes 64 KiB into it and removes it.
    public func probe() throws {
        let (fd, name) = try createTemporary(in: tree.root, path: .root)
        defer {
            fd.close()
            removeTemporary(name, in: tree.root)
        }
        do throws(Errno) { try fd.writeAll([UInt8](repeating: 0, count: 64 << 10)) } catch { throw error.error("write", path: .root) }
    }

    /// Renames a staged temp file into place, in the directory the path names now (the
    /// rename succeeds only where the temp file is: the directory it was made in). When it
    /// cannot (that directory moved or was swapped for a link, or the rename failed), the
    /// temp file is unlinked through the directory it was made in.
    public func publish(_ staged: StagedFile) throws -> FileStat { try publishAll([staged])[0].get() }

    /// `publish` of each, in order, opening each directory once for the files of it that
    /// follow one another.
    public func publishAll(_ staged: [StagedFile]) -> [Result<FileStat, any Error>] {
        var parentPath: RelativePath?
        var parent: Result<FileDescriptor, Errno> = .success(tree.root)
        defer { if case .success(let fd) = parent, fd != tree.root { fd.close() } }
        return staged.map { staged in
            let path = staged.path.parent!
            if path != parentPath {
                if case .success(let fd) = parent, fd != tree.root { fd.close() }
                parentPath = path
                parent = path.isRoot ? .success(tree.root) : Result { () throws(Errno) in try tree.openDirectory(path) }
            }
            return Result { try publish(staged, in: parent) }
        }
    }

    private func publish(_ staged: StagedFile, in parentDirectory: Result<FileDescriptor, Errno>) throws -> FileStat {
        let made = takeStagedDirectory(staged)
        let parent: FileDescriptor
        do throws(Errno) { parent = try parentDirectory.get() } catch {
            withExtendedLifetime(made) { try? Sys.unlink(made?.fd ?? tree.root, staged.temporaryName, directory: false) }
            throw error.error("open parent directory", path: staged.path)
        }
        do throws(Errno) {
            try Sys.rename(parent, staged.temporaryName, parent, staged.path.name)
            guard let st = try Sys.lstat(parent, staged.path.name) else { throw Errno.noSuchFileOrDirectory }
            return st
        } catch {
            withExtendedLifetime(made) { try? Sys.unlink(made?.fd ?? tree.root, staged.temporaryName, directory: false) }
            throw error.error("renameat", path: staged.path)
        }
    }

    /// Removes a staged temp file, through the directory it was made in.
    public func discard(_ staged: StagedFile) {
        let made = takeStagedDirectory(staged)
        withExtendedLifetime(made) { try? Sys.unlink(made?.fd ?? tree.root, staged.temporaryName, directory: false) }
    }

    /// Removes a temp file no copy of this process is writing (a killed process's, or one
    /// a lost race left); false when one is.
    public func removeLeftoverTemporary(_ path: RelativePath) throws -> Bool {
        if temporaries.withLock({ $0.keys.contains(path.name) }) { return false }
        try remove(path)
        return true
    }

    /// Creates `.keepsync-tmp-<16 hex>` with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600.
    /// The name is in `temporaries` (without a directory) from before it exists.
    func createTemporary(in parent: FileDescriptor, path: RelativePath) throws -> (FileDescriptor, [UInt8]) {
        while true {
            let name = TemporaryName.prefix + Sys.randomHex16()
            temporaries.withLock { $0[name] = .some(nil) }
            do throws(Errno) {
                let fd = try Sys.open(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
                return (fd, name)
            } catch {
                temporaries.withLock { _ = $0.removeValue(forKey: name) }
                if error == .fileExists { continue }
                throw error.error("create temp file", path: path)
            }
        }
    }

    /// FICLONE, then copy_file_range, then read/write; copies to end of file.
    func copyData(from source: any SourceFile, to dest: FileDescriptor, path: RelativePath) throws {
        guard let posix = source as? PosixSourceFile, let src = posix.fd else {
            while true {
                let chunk = try source.read(upTo: 1 << 20)
                if chunk.isEmpty { return }
                do throws(Errno) { try dest.writeAll(chunk) } catch { throw error.error("write", path: path) }
            }
        }
        let size = Int(source.stat.size)
        if size > 0 && cloneWorks.load(ordering: .relaxed) {
            do throws(Errno) {
                try Sys.cloneFile(to: dest, from: src)
                return
            } catch {
                if error.code == .noSpace || error.code == .io && error.rawValue == EIO { throw error.error("ioctl FICLONE", path: path) }
                if [EOPNOTSUPP, ENOTTY, EINVAL, EXDEV, ENOSYS].contains(error.rawValue) { cloneWorks.store(false, ordering: .relaxed) }
            }
        }
        var useRange = true
        var copied = 0
        // The size at open: a file that grows meanwhile fails the unchanged check and is
        // copied again, so no call is spent on finding the end.
        while useRange && copied < size {
            try checkCancelled(path)
            do throws(Errno) {
                let n = try Sys.copyRange(from: src, to: dest, count: min(AtomicFileAccessor.chunk, size - copied))
                if n == 0 { return }
                copied += n
            } catch {
                switch error.rawValue {
                case EXDEV, ENOSYS, EINVAL, EOPNOTSUPP, EBADF: useRange = false
                default: throw error.error("copy_file_range", path: path)
                }
            }
        }
        if useRange { return }
        do throws(FailedCall) { try src.copyToEnd(to: dest) } catch { throw error.errno.error(error.call, path: path) }
    }

    /// Creates a directory with mode 0700 (its real mode is set after its entries).
    public func makeDirectory(_ path: RelativePath, mode: UInt32) throws -> FileStat {
        return try tree.withParent(path) { parent, name in
            do throws(Errno) {
                try Sys.makeDirectory(parent, name, mode: 0o700)
                guard let st = try Sys.lstat(parent, name) else { throw Errno.noSuchFileOrDirectory }
                return st
            } catch { throw error.error("mkdirat", path: path) }
        }
    }

    /// Creates a symlink under a temp name, sets its mtime, renames it into place.
    public func makeSymlink(_ path: RelativePath, target: [UInt8], mtime: Timespec) throws -> FileStat {
        return try tree.withParent(path) { parent, name in
            var tempName: [UInt8] = []
            while true {
                tempName = TemporaryName.prefix + Sys.randomHex16()
                do throws(Errno) {
                    try Sys.makeSymlink(target: target, parent, tempName)
                    break
                } catch {
                    if error == .fileExists { continue }
                    throw error.error("symlinkat", path: path)
                }
            }
            do throws(Errno) {
                try? Sys.setModificationTime(parent, tempName, mtime, withAccessTime: setsAccessTime)
                try Sys.rename(parent, tempName, parent, name)
                guard let st = try Sys.lstat(parent, name) else { throw Errno.noSuchFileOrDirectory }
                return st
            } catch {
                try? Sys.unlink(parent, tempName, directory: false)
                throw error.error("renameat symlink", path: path)
            }
        }
    }

    /// Removes a path; a directory with everything below it.
    public func remove(_ path: RelativePath) throws {
        forgetStagingDirectories(within: path)
        precondition(!path.isRoot, "the mirror root is never removed")
        try tree.withParent(path) { parent, name in
            do throws(Errno) {
                guard let st = try Sys.lstat(parent, name) else { return }
                if st.kind == .directory {
                    try removeContents(parent, name)
                    try Sys.unlink(parent, name, directory: true)
                } else {
                    try Sys.unlink(parent, name, directory: false)
                }
            } catch { throw error.error("remove", path: path) }
        }
    }

    /// Empties the directory `name` inside `parent`, never following links.
    private func removeContents(_ parent: FileDescriptor, _ name: [UInt8]) throws(Errno) {
        let dir = try Sys.open(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        defer { dir.close() }
        try? dir.setMode(0o700)
        for child in try Sys.readDirectory(dir) {
            guard let st = try Sys.lstat(dir, child) else { continue }
            if st.kind == .directory {
                try removeContents(dir, child)
                try Sys.unlink(dir, child, directory: true)
            } else {
                try Sys.unlink(dir, child, directory: false)
            }
        }
    }

    /// Renames within the mirror (durable at the next barrier).
    public func rename(_ from: RelativePath, to: RelativePath) throws {
        forgetStagingDirectories(within: from)
        forgetStagingDirectories(within: to)
        try tree.withParent(from) { fromParent, fromName in
            try tree.withParent(to) { toParent, toName in
                do throws(Errno) {
                    try Sys.rename(fromParent, fromName, toParent, toName)
                } catch { throw error.error("renameat", path: from) }
            }
        }
    }

    /// A hard link at `to` of what is at `from` (a symlink itself, never followed; durable
    /// at the next barrier). Where the file system takes none (EPERM, EOPNOTSUPP, EMLINK):
    /// `.unsupported`.
    public func link(_ from: RelativePath, to: RelativePath) throws {
        try link(from, in: self, to: to)
    }

    /// Sets permission bits and/or the modification time, never through a symlink.
    public func setAttributes(_ path: RelativePath, mode: UInt32?, mtime: Timespec?) throws {
        if path.isRoot {
            do throws(Errno) {
                let fd = try tree.openDirectory(.root)
                defer { fd.close() }
                if let mode { try fd.setMode(mode) }
                if let mtime { try fd.setModificationTime(mtime, withAccessTime: setsAccessTime) }
            } catch { throw error.error("set attributes", path: path) }
            return
        }
        try tree.withParent(path) { parent, name in
            do throws(Errno) {
                if let mode { try Sys.setMode(parent, name, mode) }
                if let mtime { try Sys.setModificationTime(parent, name, mtime, withAccessTime: setsAccessTime) }
            } catch { throw error.error("set attributes", path: path) }
        }
    }
}

/// A directory open for the temp files staged in it; closed when the last lets go.
final class StagingDirectory: Sendable {
    let fd: FileDescriptor

    init(_ fd: FileDescriptor) { self.fd = fd }

    deinit { fd.close() }
}
