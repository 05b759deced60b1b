/// Why the source root cannot be trusted now (vanished, replaced, emptied), from what
/// the host sees at its path.
public enum SourceRootCheck {
    /// The problem, or nil. `isEmpty` is asked only when records list entries.
    public static func problem(name: String, stat: FileStat?, identity: FileIdentity?, recordedEntries: Int,
                               isEmpty: () -> Bool) -> String? {
        guard let stat, stat.kind == .directory else {
            return "source \(name) is missing; nothing is deleted (is a disk unmounted?)"
        }
        if let identity, identity != FileIdentity(device: stat.device, inode: stat.inode) {
            return "source \(name) was replaced by a different directory; nothing is deleted"
        }
        if recordedEntries > 0, isEmpty() {
            return "source \(name) is empty but the records list \(recordedEntries) entries; nothing is deleted"
        }
        return nil
    }
}
