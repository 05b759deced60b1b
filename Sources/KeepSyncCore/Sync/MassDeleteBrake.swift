/// The mass-delete brake of one pass: it holds the pass's deletions when more than a
/// share of the mirror's entries would go. Deletions of `exempt` paths (seen live by
/// inotify) are neither counted nor held.
public struct MassDeleteBrake: Sendable, Equatable {
    /// The threshold, percent of the mirror's entries (100 = off).
    public var maxDeletePercent: Int
    /// Lifted for this pass: nothing is held.
    public var lifted: Bool
    /// Paths whose deletions pass the brake.
    public var exempt: Set<RelativePath>

    /// A brake at `maxDeletePercent`, lifted or not, passing `exempt`.
    public init(maxDeletePercent: Int, lifted: Bool = false, exempt: Set<RelativePath> = []) {
        self.maxDeletePercent = maxDeletePercent
        self.lifted = lifted
        self.exempt = exempt
    }

    /// The brake the options set (lifted by `allowMassDelete`).
    public init(_ options: SyncOptions, exempt: Set<RelativePath> = []) {
        self.init(maxDeletePercent: options.maxDeletePercent, lifted: options.allowMassDelete, exempt: exempt)
    }

    /// True when the brake holds `scan`'s deletions: more than 10, and more than the
    /// threshold's share of the mirror's entries, counting none of the exempt paths'.
    public func holds(_ scan: SyncScan) -> Bool {
        var deletions = scan.deletions
        if !exempt.isEmpty {
            for step in scan.steps {
                if case .path(let state, let actions, let removed) = step, exempt.contains(state.path),
                   actions.contains(where: \.isDeletion) { deletions -= removed }
            }
        }
        guard !lifted, maxDeletePercent < 100, deletions > 10 else { return false }
        return deletions * 100 > maxDeletePercent * max(scan.mirrorEntries, 1)
    }

    /// True when a held pass keeps this step's deletion.
    func holds(_ path: RelativePath, actions: [SyncAction]) -> Bool {
        actions.contains(where: \.isDeletion) && !exempt.contains(path)
    }
}
