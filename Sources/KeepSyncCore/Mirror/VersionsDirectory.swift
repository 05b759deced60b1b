/// Where a local mirror keeps its versions (SPEC "Versions"): a directory of the mirror,
/// or one elsewhere on the mirror's file system, through steps rooted at it.
public enum VersionsDirectory: Sendable {
    /// A directory below the mirror root (default `.keepsync-versions`).
    case inMirror(RelativePath)
    /// The root of these steps, on the mirror's file system.
    case elsewhere(any FileAccessorProviding)
}
