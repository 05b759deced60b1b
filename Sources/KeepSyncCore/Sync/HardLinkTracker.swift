/// Hard-linked source files whose other names must be looked at: a write through one name
/// changes them all, but inotify reports only the name written through. The manager
/// queues the other names of every file noted here in one walk of the records.
struct HardLinkTracker {

    /// Source files with more than one name, as the scans saw them (a full pass sees all).
    var known: Set<FileIdentity> = []
    /// For each linked file changed whose other names were not looked for yet: the name
    /// changed last.
    private(set) var changed: [FileIdentity: RelativePath] = [:]
    /// Since when the first of those waits.
    private(set) var since: Duration?

    /// Nothing noted.
    init() {}

    /// Notes a change of the linked file `key` through `path`.
    mutating func noteChange(_ key: FileIdentity, at path: RelativePath, now: Duration) {
        changed[key] = path
        if since == nil { since = now }
    }

    /// Takes the changed files out, for their other names to be queued.
    mutating func takeChanged() -> [FileIdentity: RelativePath] {
        defer {
            changed.removeAll()
            since = nil
        }
        return changed
    }
}
