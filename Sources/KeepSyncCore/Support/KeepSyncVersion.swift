/// The version string.
public enum KeepSyncVersion {
    /// The current version.
    public static let current = "0.1.0"
}
