/// What `lstat` says about a path, reduced to what the tests compare.
struct FileInfo: Equatable {
    enum Kind: Equatable { case regular, directory, symlink, fifo, other }
    var kind: Kind
    var permissions: UInt32
    var size: Int
    var device: UInt64
    var inode: UInt64
    var mtimeSeconds: Int
    var mtimeNanoseconds: Int
    var ctimeSeconds: Int
    var ctimeNanoseconds: Int
}

extension FileInfo {
    /// The ctime in nanoseconds since the epoch.
    var ctimeNanosecondsTotal: Int { ctimeSeconds * 1_000_000_000 + ctimeNanoseconds }
}
