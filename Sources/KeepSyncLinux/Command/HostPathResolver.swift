import KeepSyncCore

/// Settings' paths on this machine: realpath, stat and read through `HostPaths`.
struct HostPathResolver: PathResolving {
    func resolve(_ path: [UInt8]) -> [UInt8] { HostPaths.resolve(path) }
    func exists(_ path: [UInt8]) -> Bool { HostPaths.stat(path) != nil }
    func read(_ path: [UInt8]) throws -> [UInt8] { try HostPaths.read(path) }
}
