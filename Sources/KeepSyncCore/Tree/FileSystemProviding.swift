/// Read-only access to a tree, relative to its root, never following a symlink.
public protocol FileSystemProviding: Sendable {
    /// `lstat` of a path; nil when it does not exist.
    func stat(_ path: RelativePath) throws -> FileStat?
    /// The entries of a directory with their `lstat`, in no particular order.
    func list(_ directory: RelativePath) throws -> [DirectoryEntry]
    /// The target bytes of a symlink.
    func readLink(_ path: RelativePath) throws -> [UInt8]
    /// Opens a regular file for reading.
    func open(_ path: RelativePath) throws -> any SourceFile
    /// The stat at `path`, for telling whether a file changed since a stat (may be
    /// cheaper than `stat`, and need not be confined: a wrong answer only differs).
    func currentVersion(_ path: RelativePath) throws -> FileStat?
    /// A full pass begins reading the tree (`SharedListingTree`: its listings are shared
    /// with the other mirrors' passes until `endListingPass`).
    func beginListingPass()
    /// The full pass's reading ended (or what was listed so far is not its own: its manager
    /// changed the mirror from an event, or lost events, before it ran).
    func endListingPass()
}

extension FileSystemProviding {
    /// `stat`, unless the tree has a cheaper way.
    public func currentVersion(_ path: RelativePath) throws -> FileStat? { try stat(path) }
    /// Nothing to share.
    public func beginListingPass() {}
    /// Nothing to share.
    public func endListingPass() {}
}
