/// A tree that does not exist: what `check` compares against when the mirror is missing.
public struct AbsentTree: FileSystemProviding {
    /// The absent tree.
    public init() {}
    /// Always nil.
    public func stat(_ path: RelativePath) throws -> FileStat? { nil }
    /// Always fails.
    public func list(_ directory: RelativePath) throws -> [DirectoryEntry] {
        throw KeepSyncError(.notFound, "no such directory", path: directory)
    }
    /// Always fails.
    public func readLink(_ path: RelativePath) throws -> [UInt8] { throw KeepSyncError(.notFound, "no such link", path: path) }
    /// Always fails.
    public func open(_ path: RelativePath) throws -> any SourceFile { throw KeepSyncError(.notFound, "no such file", path: path) }
}
