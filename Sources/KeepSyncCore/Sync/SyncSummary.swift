/// The outcome of a pass.
public struct SyncSummary: Sendable, Equatable {
    /// Files copied.
    public var copiedFiles = 0
    /// Bytes copied.
    public var copiedBytes: UInt64 = 0
    /// Directories created.
    public var createdDirectories = 0
    /// Files renamed in the mirror instead of copied.
    public var renamed = 0
    /// Symlinks created or replaced.
    public var createdLinks = 0
    /// Mirror entries removed.
    public var removedEntries = 0
    /// Deletions held by the brake.
    public var heldDeletes = 0
    /// The same, by the directory whose entries they are.
    public var heldByDirectory: [RelativePath: Int] = [:]
    /// Special files skipped.
    public var skippedSpecial = 0
    /// Paths the mirror's file system cannot hold, skipped.
    public var skippedUnholdable = 0
    /// Paths that failed, with the reason.
    public var errors: [KeepSyncError] = []
    /// Copies left to the caller (`apply(_:deferCopies:)`).
    public var deferredCopies: [RelativePath] = []
    /// Directories whose finish waits for those copies (the caller's `fixDirectories`).
    public var deferredFinishes: [RelativePath] = []
    /// Mode or mtime changes made in the mirror.
    public var attributesSet = 0
    /// Leftover temp files removed.
    public var removedTemporaries = 0

    /// Changes the pass made (or left to the caller) in the mirror.
    public var mirrorChanges: Int {
        copiedFiles + deferredCopies.count + createdDirectories + renamed + createdLinks + removedEntries
            + attributesSet + removedTemporaries
    }

    /// The changes, e.g. `2 files copied, 1 entry removed`; empty when none.
    public var changeList: String {
        func item(_ n: Int, _ one: String, _ many: String) -> String? { n == 0 ? nil : "\(n) \(n == 1 ? one : many)" }
        return [item(copiedFiles, "file copied", "files copied"),
                item(deferredCopies.count, "file to copy", "files to copy"),
                item(renamed, "rename", "renames"),
                item(createdDirectories, "directory created", "directories created"),
                item(createdLinks, "symlink made", "symlinks made"),
                item(removedEntries, "entry removed", "entries removed"),
                item(attributesSet, "mode or mtime set", "modes or mtimes set"),
                item(removedTemporaries, "temp file removed", "temp files removed")]
            .compactMap { $0 }.joined(separator: ", ")
    }

    /// A summary.
    public init() {}
}
