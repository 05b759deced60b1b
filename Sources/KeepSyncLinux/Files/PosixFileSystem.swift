import CKeepSyncShims
import Glibc
import KeepSyncCore
import Synchronization

/// Read access to a real directory tree, every lookup relative to the root's descriptor
/// and never following a symlink (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or an
/// O_NOFOLLOW|O_DIRECTORY walk where the kernel lacks openat2).
public final class PosixFileSystem: FileSystemProviding {
    /// The root directory's descriptor, open for the life of this value.
    let root: FileDescriptor
    /// Whether openat2 is available.
    let hasOpenat2: Bool
    /// False once the file system answered that it keeps no inode generation.
    private let generationsAvailable = Atomic<Bool>(true)

    /// Opens the directory at an absolute or relative path.
    public init(rootPath: [UInt8]) throws {
        do throws(Errno) {
            root = try Sys.open(.currentDirectory, rootPath, O_RDONLY | O_DIRECTORY)
        } catch {
            throw KeepSyncError(error.code, "open: \(error.text)", path: nil, errno: error.rawValue)
        }
        hasOpenat2 = PosixFileSystem.confinedOpenWorks(root)
    }

    /// Whether openat2 with `resolveFlags` works below `dir` (Linux 5.6+).
    static func confinedOpenWorks(_ dir: FileDescriptor) -> Bool {
        guard let probe = try? Sys.open2(dir, [0x2E], O_RDONLY | O_DIRECTORY, resolve: resolveFlags) else { return false }
        probe.close()
        return true
    }

    deinit { root.close() }

    static let resolveFlags = ks_resolve_beneath() | ks_resolve_no_symlinks()

    /// Opens the directory at `path` (O_RDONLY), never crossing a symlink. Caller closes.
    func openDirectory(_ path: RelativePath) throws(Errno) -> FileDescriptor {
        if path.isRoot { return try Sys.open(root, [0x2E], O_RDONLY | O_DIRECTORY) }
        if hasOpenat2 {
            return try Sys.open2(root, path.bytes, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, resolve: PosixFileSystem.resolveFlags)
        }
        var current = try Sys.open(root, [0x2E], O_RDONLY | O_DIRECTORY)
        for component in path.components {
            let next: FileDescriptor
            do throws(Errno) { next = try Sys.open(current, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) } catch {
                current.close()
                throw error
            }
            current.close()
            current = next
        }
        return current
    }

    /// Runs `body` with the parent directory's descriptor and the final name.
    func withParent<R>(_ path: RelativePath, _ body: (FileDescriptor, [UInt8]) throws -> R) throws -> R {
        precondition(!path.isRoot, "the root has no parent")
        let parentPath = path.parent!
        // The root's own descriptor serves its entries: two syscalls fewer per call.
        if parentPath.isRoot { return try body(root, path.name) }
        let parent: FileDescriptor
        do throws(Errno) { parent = try openDirectory(parentPath) } catch { throw error.error("open parent directory", path: path) }
        defer { parent.close() }
        return try body(parent, path.name)
    }

    /// `lstat` of a path; nil when it or a parent does not exist.
    public func stat(_ path: RelativePath) throws -> FileStat? {
        if path.isRoot {
            do throws(Errno) { return withGeneration(try root.stat(), root) } catch { throw error.error("fstat", path: path) }
        }
        if path.parent!.isRoot {
            do throws(Errno) { return withGeneration(try Sys.lstat(root, path.name), root, path.name) } catch {
                throw error.error("fstatat", path: path)
            }
        }
        let parent: FileDescriptor
        do throws(Errno) { parent = try openDirectory(path.parent!) } catch {
            if error == .noSuchFileOrDirectory || error == .notDirectory || error == .tooManySymbolicLinks { return nil }
            throw error.error("open parent directory", path: path)
        }
        defer { parent.close() }
        do throws(Errno) { return withGeneration(try Sys.lstat(parent, path.name), parent, path.name) } catch {
            throw error.error("fstatat", path: path)
        }
    }

    /// The entries of a directory with their `lstat`; names that vanish meanwhile are left out.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
        let fd: FileDescriptor
        do throws(Errno) { fd = try openDirectory(directory) } catch { throw error.error("open directory", path: directory) }
        defer { fd.close() }
        let names: [[UInt8]]
        do throws(Errno) { names = try Sys.readDirectory(fd) } catch { throw error.error("readdir", path: directory) }
        var entries: [DirectoryEntry] = []
        entries.reserveCapacity(names.count)
        for name in names {
            do throws(Errno) {
                if let st = withGeneration(try Sys.lstat(fd, name), fd, name) { entries.append(DirectoryEntry(name: name, stat: st)) }
            } catch {
                throw error.error("fstatat", path: directory.appending(name))
            }
        }
        return entries
    }

    /// The target of a symlink.
    public func readLink(_ path: RelativePath) throws -> [UInt8] {
        try withParent(path) { parent, name in
            do throws(Errno) { return try Sys.readLink(parent, name) } catch { throw error.error("readlinkat", path: path) }
        }
    }

    /// The stat at `path` for change detection (one statx from the root; an intermediate
    /// link is followed, which can only make it differ).
    public func currentVersion(_ path: RelativePath) throws -> FileStat? {
        if path.isRoot { return try stat(path) }
        do throws(Errno) { return withGeneration(try Sys.lstatPath(root, path.bytes), root, path.bytes) } catch {
            if error == .tooManySymbolicLinks { return nil }
            throw error.error("statx", path: path)
        }
    }

    /// Opens a regular file for reading without following a symlink or blocking on a FIFO.
    public func open(_ path: RelativePath) throws -> any SourceFile {
        if hasOpenat2 && !path.isRoot {
            // One call, confined: no parent directory to open and close.
            let fd: FileDescriptor
            do throws(Errno) {
                fd = try Sys.open2(root, path.bytes, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, resolve: PosixFileSystem.resolveFlags)
            } catch {
                throw error.error("open", path: path)
            }
            return try sourceFile(fd, path)
        }
        return try withParent(path) { parent, name in
            let fd: FileDescriptor
            do throws(Errno) { fd = try Sys.open(parent, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) } catch {
                throw error.error("open", path: path)
            }
            return try self.sourceFile(fd, path)
        }
    }

    /// Wraps an opened descriptor after checking it is a regular file.
    func sourceFile(_ fd: FileDescriptor, _ path: RelativePath) throws -> PosixSourceFile {
        let st: FileStat
        do throws(Errno) { st = withGeneration(try fd.stat(), fd)! } catch {
            fd.close()
            throw error.error("fstat", path: path)
        }
        guard st.kind == .regular else {
            fd.close()
            throw KeepSyncError(.conflict, "open: not a regular file", path: path)
        }
        return PosixSourceFile(fd: fd, stat: st, path: path)
    }

    /// `st` with its inode generation where it has no birth time (the SPEC pairs a path
    /// with a vanished record by either): read from `fd`, or from `name` below it opened
    /// for the call. Regular files and directories only; left nil where unsupported.
    func withGeneration(_ st: FileStat?, _ fd: FileDescriptor, _ name: [UInt8]? = nil) -> FileStat? {
        guard var st, st.birthTime == nil, st.kind == .regular || st.kind == .directory,
              generationsAvailable.load(ordering: .relaxed) else { return st }
        do throws(Errno) {
            if let name {
                let opened = try Sys.open(fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
                defer { opened.close() }
                st.generation = try opened.generation()
            } else {
                st.generation = try fd.generation()
            }
        } catch {
            if error == .notATypewriter || error == .notSupported { generationsAvailable.store(false, ordering: .relaxed) }
        }
        return st
    }
}

/// An open regular file of a `PosixFileSystem`.
public final class PosixSourceFile: SourceFile {
    /// The descriptor (closed by `close` or on deinit).
    private(set) var fd: FileDescriptor?
    /// The stat taken at open time.
    public let stat: FileStat
    let path: RelativePath

    init(fd: FileDescriptor, stat: FileStat, path: RelativePath) {
        self.fd = fd
        self.stat = stat
        self.path = path
    }

    deinit { fd?.close() }

    /// Reads up to `count` bytes.
    public func read(upTo count: Int) throws -> [UInt8] {
        guard let fd else { throw KeepSyncError(.io, "read: file is closed", path: path) }
        do throws(Errno) { return try fd.read(upTo: count) } catch { throw error.error("read", path: path) }
    }

    /// A fresh `fstat` (no generation: it serves to see whether the file changed).
    public func currentStat() throws -> FileStat {
        guard let fd else { throw KeepSyncError(.io, "fstat: file is closed", path: path) }
        do throws(Errno) { return try fd.stat() } catch { throw error.error("fstat", path: path) }
    }

    /// The most of a file asked for ahead of its copy: a small file whole, a big one's
    /// start (its copy reads ahead on its own).
    static let readAhead = 256 << 10

    /// Starts reading the file's first bytes into the page cache in the background.
    public func willRead() {
        guard stat.size > 0 else { return }
        fd?.willRead(Int(min(stat.size, UInt64(Self.readAhead))))
    }

    /// Closes the file.
    public func close() {
        fd?.close()
        fd = nil
    }
}
