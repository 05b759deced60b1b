/// What an install did: the source version copied and the installed mirror file.
public struct CopyResult: Sendable, Equatable {
    /// The path.
    public var path: RelativePath
    /// The source's stat when it was opened (the version copied).
    public var source: FileStat
    /// The mirror file's stat once in place (its inode goes into the record).
    public var installed: FileStat

    /// A result.
    public init(path: RelativePath, source: FileStat, installed: FileStat) {
        self.path = path
        self.source = source
        self.installed = installed
    }
}
