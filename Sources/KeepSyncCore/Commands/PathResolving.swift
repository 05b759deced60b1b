/// What resolving settings asks of the file system: absolute, link-free paths, whether
/// a file exists, its bytes.
public protocol PathResolving: Sendable {
    /// `path` made absolute with its links resolved (as far as it exists).
    func resolve(_ path: [UInt8]) -> [UInt8]
    /// True when something exists at `path`.
    func exists(_ path: [UInt8]) -> Bool
    /// The bytes of the file at `path`.
    func read(_ path: [UInt8]) throws -> [UInt8]
}
