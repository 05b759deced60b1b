/// The live progress line of a foreground run (a terminal's), or nothing.
public protocol ProgressDisplay: Sendable {
    /// True when a progress line may be drawn.
    var isActive: Bool { get }
    /// Replaces the progress line.
    func update(_ line: String)
    /// Removes the progress line, leaving `summary` (if any) as an ordinary line.
    func finish(_ summary: String?)
}
