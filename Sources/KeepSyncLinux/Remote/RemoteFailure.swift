import KeepSyncCore

/// Why a remote call failed, as the agent needs to tell it apart.
public struct RemoteFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The class of failure.
    public enum Kind: String, Sendable, Equatable {
        /// The host did not answer (refused, timed out, no route, or our own deadline).
        case unreachable
        /// ssh said `Permission denied`: retrying will not help.
        case authentication
        /// The connection worked; the remote command failed.
        case remoteCommand
    }

    /// The class.
    public var kind: Kind
    /// The host.
    public var host: String
    /// What happened, with ssh's or the command's own words.
    public var message: String

    /// A failure.
    public init(_ kind: Kind, host: String, _ message: String) {
        self.kind = kind
        self.host = host
        self.message = message
    }

    /// `HOST: unreachable: …`.
    public var description: String { "\(host): \(kind.rawValue): \(message)" }

    /// As keepsync's error: `.unreachable` when the host cannot be reached or refuses the
    /// login, `.io` when the remote command failed.
    public var error: KeepSyncError {
        switch kind {
        case .unreachable: KeepSyncError(.unreachable, "\(host) unreachable: \(message)")
        case .authentication: KeepSyncError(.unreachable, "\(host) refused the login (authentication failed): \(message)")
        case .remoteCommand: KeepSyncError(.io, "\(host): \(message)")
        }
    }
}
