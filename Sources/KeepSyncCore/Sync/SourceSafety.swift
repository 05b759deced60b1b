/// The vanished-or-replaced-source rules: when a pass may touch the mirror at all.
public enum SourceSafety {
    /// The verdict for a pass.
    public enum Verdict: Equatable, Sendable {
        /// Go ahead.
        case proceed
        /// Refuse with this message (exit 3); the mirror stays untouched.
        case refuse(String)
        /// A usage problem (exit 2), e.g. the source is missing on a first run.
        case usage(String)
    }

    /// `evaluate` for a command's settings: returns when the pass may go ahead, throws a
    /// configuration error or (after telling `refused`) an `.unsafe` one.
    public static func require(_ settings: Settings, root: FileStat?, rootIsEmpty: Bool, records: RecordSet,
                               refused: (RecordSet, String) -> Void) throws {
        switch evaluate(sourcePath: settings.sourceName, root: root, rootIsEmpty: rootIsEmpty, records: records,
                        acceptNewSource: settings.invocation.acceptNewSource,
                        allowMassDelete: settings.invocation.allowMassDelete) {
        case .proceed: return
        case .usage(let message): throw KeepSyncError(.configuration, message)
        case .refuse(let message):
            refused(records, message)
            throw KeepSyncError(.unsafe, message)
        }
    }

    /// Decides from the source root's stat (nil when missing), whether it is empty,
    /// and the records.
    public static func evaluate(sourcePath: String, root: FileStat?, rootIsEmpty: Bool, records: RecordSet,
                                acceptNewSource: Bool, allowMassDelete: Bool) -> Verdict {
        let recordedEntries = records.table.count - (records.table[.root] == nil ? 0 : 1)
        let known = records.root != nil || recordedEntries > 0
        guard let root else {
            if known {
                return .refuse("source \(sourcePath) is missing; the records list \(recordedEntries) entries, so nothing is deleted (is a disk unmounted?)")
            }
            return .usage("source \(sourcePath) does not exist")
        }
        guard root.kind == .directory else { return .usage("source \(sourcePath) is not a directory") }
        if let recorded = records.root, recorded != FileIdentity(device: root.device, inode: root.inode), !acceptNewSource {
            return .refuse("source \(sourcePath) is a different directory than recorded (device \(recorded.device) inode \(recorded.inode), now device \(root.device) inode \(root.inode)); nothing is deleted; use --accept-new-source to adopt it")
        }
        if rootIsEmpty, recordedEntries > 0, !allowMassDelete, !acceptNewSource {
            return .refuse("source \(sourcePath) is empty but the records list \(recordedEntries) entries; nothing is deleted; use --allow-mass-delete if it was emptied on purpose")
        }
        return .proceed
    }
}
