/// The crash-safe home of the bookmark records.
public protocol BookmarkStorageProviding: Sendable {
    /// Loads everything; a damaged store yields what could be trusted and `wasDamaged`.
    func load() throws -> RecordSet
    /// Appends a batch of changes durably (fsynced before returning).
    func apply(_ changes: [RecordChange]) throws
    /// Rewrites the store atomically to hold exactly `set`.
    func compact(_ set: RecordSet) throws
}
