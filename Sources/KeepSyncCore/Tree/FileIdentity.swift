/// Which object a path names, whatever it is called now: its device and inode.
public struct FileIdentity: Hashable, Sendable {
    /// Device number.
    public var device: UInt64
    /// Inode number.
    public var inode: UInt64

    /// An identity.
    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }
}
