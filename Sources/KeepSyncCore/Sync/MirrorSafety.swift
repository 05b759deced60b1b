/// The vanished-or-replaced-mirror rule (SPEC Safety): while records exist, nothing is
/// written to a mirror root that is missing or is not the recorded one (a USB disk not
/// plugged in leaves an empty mount point; the disk below it must not be filled).
public enum MirrorSafety {
    /// How every reason `problem` gives begins.
    public static let unavailable = "mirror unavailable: "

    /// Whether a root problem (the agent's check of both roots) is the mirror's.
    public static func isMirrorProblem(_ reason: String) -> Bool { reason.hasPrefix(unavailable) }

    /// Why the mirror at `name` must not be written now, or nil. `recorded` is the root the
    /// records hold (nil for records written before mirror roots were kept: then the root
    /// directory's record, `rootRecordInode`, is compared where inodes are stable);
    /// `current` is what is at the mirror's path now (nil: nothing).
    public static func problem(name: String, recorded: MirrorRoot?, recordedEntries: Int, rootRecordInode: UInt64?,
                               current: MirrorRoot?) -> String? {
        guard recordedEntries > 0 else { return nil }
        guard let current else {
            return unavailable + "\(name) is missing; nothing is written there until it is back (is the disk unplugged?)"
        }
        if let recorded {
            if !recorded.isSameRoot(as: current) {
                return unavailable + "\(name) is not the recorded mirror (a different directory or disk: \(String(decoding: current.fileSystem, as: UTF8.self)), recorded \(String(decoding: recorded.fileSystem, as: UTF8.self))); nothing is written there; use --accept-new-mirror to adopt it"
            }
        } else if let inode = rootRecordInode, inode != 0, current.limits.stableInodes, current.identity.inode != inode {
            return unavailable + "\(name) is not the recorded mirror (inode \(current.identity.inode), recorded \(inode)); nothing is written there; use --accept-new-mirror to adopt it"
        }
        return nil
    }

    /// `problem` for a command's settings: returns when the mirror may be written, throws an
    /// `.unsafe` error (after telling `refused`) when not.
    public static func require(_ settings: Settings, records: RecordSet, current: MirrorRoot?,
                               refused: (RecordSet, String) -> Void) throws {
        guard let problem = problem(settings, records: records, current: current) else { return }
        refused(records, problem)
        throw KeepSyncError(.unsafe, problem)
    }

    /// `problem` for a command's settings and records; nil when `--accept-new-mirror` was given.
    public static func problem(_ settings: Settings, records: RecordSet, current: MirrorRoot?) -> String? {
        if settings.invocation.acceptNewMirror { return nil }
        let entries = records.table.count - (records.table[.root] == nil ? 0 : 1)
        return problem(name: settings.mirrorName, recorded: records.mirror, recordedEntries: entries,
                       rootRecordInode: records.table[.root]?.mirrorInode, current: current)
    }
}
