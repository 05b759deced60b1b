/// What the source root's entry in status says, by meaning. The entry is one slot: the
/// latest meaning set wins, and each is cleared only by the event that ends it.
enum RootError: Equatable, Sendable {
    /// The source root vanished or was replaced (the agent stops).
    case rootLost(String)
    /// A full pass, or a step at the root, failed.
    case pass(String)
    /// The mirror is full or read-only: "the mirror is full: …".
    case mirrorBlocked(String)
    /// Record writes fail: "cannot write records: …".
    case records(String)

    /// The wording status shows.
    var message: String {
        switch self {
        case .rootLost(let m), .pass(let m), .mirrorBlocked(let m), .records(let m): m
        }
    }
}
