import KeepSyncCore

/// Settings' paths on this machine: realpath, stat and read through `HostPaths`.
public struct HostPathResolver: PathResolving {
    /// A resolver.
    public init() {}
    /// `realpath`, or the path made absolute when it does not exist.
    public func resolve(_ path: [UInt8]) -> [UInt8] { HostPaths.resolve(path) }
    /// True when `path` exists.
    public func exists(_ path: [UInt8]) -> Bool { HostPaths.stat(path) != nil }
    /// The file's bytes.
    public func read(_ path: [UInt8]) throws -> [UInt8] { try HostPaths.read(path) }
    /// `st_dev` of `path`, or of its nearest existing ancestor.
    public func fileSystem(_ path: [UInt8]) -> UInt64? { HostPaths.fileSystem(path) }
}
