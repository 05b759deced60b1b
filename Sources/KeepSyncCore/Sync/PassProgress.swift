/// How far the copies of a pass are: made, and planned so far (final once the pass has
/// walked everything; a streamed pass plans while it copies).
public struct PassProgress: Sendable, Equatable {
    /// Files copied and their bytes.
    public var copied: (files: Int, bytes: UInt64) = (0, 0)
    /// Files planned for copying and their bytes.
    public var planned: (files: Int, bytes: UInt64) = (0, 0)
    /// True once `planned` is final.
    public var planComplete = false

    /// A pass's progress.
    public init(planned: (files: Int, bytes: UInt64) = (0, 0), planComplete: Bool = false) {
        self.planned = planned
        self.planComplete = planComplete
    }

    /// Same counts.
    public static func == (a: PassProgress, b: PassProgress) -> Bool {
        a.copied == b.copied && a.planned == b.planned && a.planComplete == b.planComplete
    }
}
