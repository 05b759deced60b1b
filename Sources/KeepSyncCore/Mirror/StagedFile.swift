/// A copy written to a temp file, waiting for a barrier and its rename.
public struct StagedFile: Sendable, Equatable {
    /// Where it goes.
    public var path: RelativePath
    /// The temp file's name in the same directory.
    public var temporaryName: [UInt8]
    /// The source's stat when it was opened (the version copied).
    public var source: FileStat

    /// A staged file.
    public init(path: RelativePath, temporaryName: [UInt8], source: FileStat) {
        self.path = path
        self.temporaryName = temporaryName
        self.source = source
    }
}
