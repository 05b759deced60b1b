/// Options of a full pass.
public struct SyncOptions: Sendable {
    /// Whether deletions propagate.
    public var deleteEnabled: Bool
    /// Compare file bytes as well as metadata.
    public var compareContent: Bool
    /// The mass-delete brake's threshold, percent of the mirror's entries (100 = off).
    public var maxDeletePercent: Int
    /// Lift the brake for this pass.
    public var allowMassDelete: Bool
    /// Paths never compared, copied or deleted.
    public var excludes: ExcludeMatcher

    /// Options.
    public init(deleteEnabled: Bool = true, compareContent: Bool = false, maxDeletePercent: Int = 50,
                allowMassDelete: Bool = false, excludes: ExcludeMatcher = .none) {
        self.deleteEnabled = deleteEnabled
        self.compareContent = compareContent
        self.maxDeletePercent = maxDeletePercent
        self.allowMassDelete = allowMassDelete
        self.excludes = excludes
    }
}
