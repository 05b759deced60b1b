/// What resolving settings asks of the file system: absolute, link-free paths, whether
/// a file exists, its bytes, which file system holds a path.
public protocol PathResolving: Sendable {
    /// `path` made absolute with its links resolved (as far as it exists).
    func resolve(_ path: [UInt8]) -> [UInt8]
    /// True when something exists at `path`.
    func exists(_ path: [UInt8]) -> Bool
    /// The bytes of the file at `path`.
    func read(_ path: [UInt8]) throws -> [UInt8]
    /// The device number (`st_dev`) of the file system holding `path`, or its nearest
    /// existing ancestor when it does not exist yet; nil when none can be read.
    func fileSystem(_ path: [UInt8]) -> UInt64?
}
