import KeepSyncCore

/// A remote command's result: exit status and output (the connection worked).
public struct RemoteOutput: Sendable {
    /// The remote command's exit status.
    public var status: Int32
    /// What it wrote to stdout.
    public var stdout: [UInt8]
    /// What it wrote to stderr.
    public var stderr: [UInt8]
    /// How long the call took.
    public var elapsed: Duration
    /// An rsync run that went to an rsync started ahead (`RemoteSession.keepRsyncWarm`).
    public var warm = false
}
