import Testing
@testable import KeepSyncCore

@Suite("Planner")
struct PlannerTests {
    // MARK: Fixtures

    static let path = RelativePath("dir/entry")
    static let t0 = Timespec(seconds: 1_700_000_000, nanoseconds: 100)
    static let t1 = Timespec(seconds: 1_700_000_100, nanoseconds: 200)
    static let target: [UInt8] = Array("../some/target".utf8)
    static let otherTarget: [UInt8] = Array("elsewhere".utf8)

    /// The source object of a kind (inode 10, device 1).
    static func source(_ kind: FileKind) -> FileStat {
        switch kind {
        case .regular: return FileStat(kind: .regular, mode: 0o640, size: 42, mtime: t1, device: 1, inode: 10)
        case .directory: return FileStat(kind: .directory, mode: 0o750, size: 4096, mtime: t1, device: 1, inode: 10)
        case .symlink: return FileStat(kind: .symlink, mode: 0o777, size: UInt64(target.count), mtime: t1, device: 1, inode: 10)
        case .special: return FileStat(kind: .special, mode: 0o644, size: 0, mtime: t1, device: 1, inode: 10)
        }
    }

    /// The mirror object of a kind (inode 500, device 2). A regular file holds the source's version.
    static func mirror(_ kind: FileKind) -> FileStat {
        var s = source(kind)
        s.device = 2
        s.inode = 500
        return s
    }

    /// What the record says.
    enum RecordVariant: String, Sendable, CaseIterable {
        /// No record.
        case none
        /// The record of the current source object and the current mirror inode.
        case matching
        /// The record of an older version: another source inode, size, mtime and mirror inode.
        case stale
    }

    /// Symbolic expected actions, turned into concrete ones per case.
    enum Expected: Sendable, Equatable, CustomStringConvertible {
        case copy, mkdir, link, remove, drop, update, skip

        var description: String {
            switch self {
            case .copy: "copy"
            case .mkdir: "mkdir"
            case .link: "link"
            case .remove: "remove"
            case .drop: "drop"
            case .update: "update"
            case .skip: "skip"
            }
        }
    }

    /// One row of the full table: source kind, mirror kind, record; expected actions with
    /// deletions enabled and disabled. A nil kind means absent.
    struct Row: Sendable, CustomTestStringConvertible {
        let source: FileKind?
        let mirror: FileKind?
        let record: RecordVariant
        let withDelete: [Expected]
        let withoutDelete: [Expected]

        init(_ source: FileKind?, _ mirror: FileKind?, _ record: RecordVariant, _ withDelete: [Expected],
             noDelete: [Expected]? = nil) {
            self.source = source
            self.mirror = mirror
            self.record = record
            self.withDelete = withDelete
            self.withoutDelete = noDelete ?? withDelete
        }

        var testDescription: String {
            "source \(source.map { "\($0)" } ?? "absent"), mirror \(mirror.map { "\($0)" } ?? "absent"), record \(record.rawValue)"
        }

        /// The state this row describes; symlinks in the mirror point at the source's target.
        var state: PathState {
            let s = source.map(PlannerTests.source)
            let m = mirror.map(PlannerTests.mirror)
            var r: FileRecord?
            // The record describes the last synced source object: the source's kind when there
            // is a source, otherwise what the mirror still holds.
            let recordKind = source ?? mirror ?? .regular
            let base = PlannerTests.source(recordKind)
            switch record {
            case .none:
                r = nil
            case .matching:
                r = FileRecord(path: PlannerTests.path, source: base,
                               linkTarget: recordKind == .symlink ? PlannerTests.target : nil,
                               mirrorInode: m?.inode ?? 500)
            case .stale:
                var old = base
                old.inode = 9
                old.size = 7
                old.mtime = PlannerTests.t0
                r = FileRecord(path: PlannerTests.path, source: old,
                               linkTarget: recordKind == .symlink ? PlannerTests.otherTarget : nil, mirrorInode: 499)
            }
            return PathState(path: PlannerTests.path, source: s,
                             sourceLink: source == .symlink ? PlannerTests.target : nil,
                             record: r, mirror: m,
                             mirrorLink: mirror == .symlink ? PlannerTests.target : nil)
        }

        func actions(_ expected: [Expected]) -> [SyncAction] {
            let p = PlannerTests.path
            let st = state
            return expected.map { e in
                switch e {
                case .copy: return .copyFile(p)
                case .mkdir: return .makeDirectory(p, mode: st.source!.mode)
                case .link: return .makeSymlink(p, target: PlannerTests.target)
                case .remove: return .remove(p)
                case .drop: return .dropRecord(p)
                case .skip: return .skipSpecial(p)
                case .update:
                    return .updateRecord(FileRecord(path: p, source: st.source!, linkTarget: st.sourceLink,
                                                    mirrorInode: st.mirror!.inode))
                }
            }
        }
    }

    /// Every (source kind × mirror kind × record) combination. Type changes remove first when
    /// deletions are on; under --no-delete the new object replaces a file or link by rename and
    /// a directory in the way makes the later write fail (nothing is removed).
    static let table: [Row] = {
        var rows: [Row] = []
        let kinds: [FileKind] = [.regular, .directory, .symlink, .special]
        for r in RecordVariant.allCases {
            let drop: [Expected] = r == .none ? [] : [.drop]
            // Source absent.
            rows.append(Row(nil, nil, r, drop))
            for m in kinds { rows.append(Row(nil, m, r, [.remove] + drop, noDelete: drop)) }
            // Source special: skipped (never removes what the mirror holds), record forgotten.
            rows.append(Row(.special, nil, r, [.skip] + drop))
            for m in kinds { rows.append(Row(.special, m, r, [.skip] + drop)) }
            // Source directory: attributes and record come later from finishDirectory.
            rows.append(Row(.directory, nil, r, [.mkdir]))
            rows.append(Row(.directory, .directory, r, []))
            for m in [FileKind.regular, .symlink, .special] {
                rows.append(Row(.directory, m, r, [.remove, .mkdir], noDelete: [.mkdir]))
            }
            // Source symlink.
            rows.append(Row(.symlink, nil, r, [.link]))
            rows.append(Row(.symlink, .symlink, r, r == .matching ? [] : [.update]))
            for m in [FileKind.regular, .directory, .special] {
                rows.append(Row(.symlink, m, r, [.remove, .link], noDelete: [.link]))
            }
            // Source regular file; the mirror file has the source's size and mtime.
            rows.append(Row(.regular, nil, r, [.copy]))
            switch r {
            case .none: rows.append(Row(.regular, .regular, r, [.update]))    // quick check adopts
            case .matching: rows.append(Row(.regular, .regular, r, []))
            case .stale: rows.append(Row(.regular, .regular, r, [.copy]))     // another source object
            }
            for m in [FileKind.directory, .symlink, .special] {
                rows.append(Row(.regular, m, r, [.remove, .copy], noDelete: [.copy]))
            }
        }
        return rows
    }()

    @Test("every source × mirror × record combination plans the expected actions", arguments: table)
    func everyCombination(row: Row) {
        let withDelete = Planner(deleteEnabled: true).plan(row.state)
        #expect(withDelete == row.actions(row.withDelete), "delete enabled")
        let withoutDelete = Planner(deleteEnabled: false).plan(row.state)
        #expect(withoutDelete == row.actions(row.withoutDelete), "--no-delete")
        #expect(!withoutDelete.contains { $0.isDeletion }, "--no-delete never removes")
    }

    @Test("the table covers all 75 source × mirror × record combinations once")
    func tableIsComplete() {
        #expect(Self.table.count == 5 * 5 * 3)
        var seen = Set<String>()
        for row in Self.table { seen.insert(row.testDescription) }
        #expect(seen.count == Self.table.count)
    }

    // MARK: What counts as changed (regular files)

    /// A regular-file case: how the source, mirror and record differ from the synced state.
    struct FileCase: Sendable, CustomTestStringConvertible {
        let name: String
        let source: FileStat
        let mirror: FileStat
        let record: FileRecord?
        let contentEqual: Bool?
        let expected: [SyncAction]
        var testDescription: String { name }
    }

    static let syncedSource = FileStat(kind: .regular, mode: 0o644, size: 1000, mtime: t1,
                                       ctime: t1, device: 1, inode: 10)
    static let syncedMirror = FileStat(kind: .regular, mode: 0o644, size: 1000, mtime: t1,
                                       ctime: t0, device: 2, inode: 500)
    static let syncedRecord = FileRecord(path: path, source: syncedSource, mirrorInode: 500)

    static func changed(_ s: FileStat, _ body: (inout FileStat) -> Void) -> FileStat {
        var c = s
        body(&c)
        return c
    }

    static let fileCases: [FileCase] = {
        let p = path
        let s = syncedSource, m = syncedMirror, r = syncedRecord
        let bigger = changed(s) { $0.size = 1001 }
        let oneNanoLater = changed(s) { $0.mtime.nanoseconds += 1 }
        let chmodded = changed(s) { $0.mode = 0o600; $0.ctime = t1 }
        let newInode = changed(s) { $0.inode = 11 }
        let newDevice = changed(s) { $0.device = 7 }
        let ctimeOnly = changed(s) { $0.ctime = Timespec(seconds: t1.seconds + 50, nanoseconds: 0) }
        return [
            FileCase(name: "unchanged: nothing to do", source: s, mirror: m, record: r, contentEqual: nil, expected: []),
            FileCase(name: "size changed: copy", source: bigger, mirror: m, record: r, contentEqual: nil,
                     expected: [.copyFile(p)]),
            FileCase(name: "mtime changed by one nanosecond: copy", source: oneNanoLater, mirror: m, record: r,
                     contentEqual: nil, expected: [.copyFile(p)]),
            FileCase(name: "mode only: set attributes and record, no copy", source: chmodded, mirror: m, record: r,
                     contentEqual: nil,
                     expected: [.setAttributes(p, mode: 0o600, mtime: nil),
                                .updateRecord(FileRecord(path: p, source: chmodded, mirrorInode: 500))]),
            FileCase(name: "mirror mode changed behind our back: set mode only", source: s,
                     mirror: changed(m) { $0.mode = 0o777 }, record: r, contentEqual: nil,
                     expected: [.setAttributes(p, mode: 0o644, mtime: nil)]),
            FileCase(name: "ctime only (e.g. a touch of xattrs): nothing to do", source: ctimeOnly, mirror: m, record: r,
                     contentEqual: nil, expected: []),
            FileCase(name: "source inode changed with same size and mtime: copy", source: newInode, mirror: m,
                     record: r, contentEqual: nil, expected: [.copyFile(p)]),
            FileCase(name: "source device changed: copy", source: newDevice, mirror: m, record: r,
                     contentEqual: nil, expected: [.copyFile(p)]),
            FileCase(name: "mirror inode differs from the record: copy", source: s, mirror: changed(m) { $0.inode = 501 },
                     record: r, contentEqual: nil, expected: [.copyFile(p)]),
            FileCase(name: "mirror size differs: copy", source: s, mirror: changed(m) { $0.size = 999 }, record: r,
                     contentEqual: nil, expected: [.copyFile(p)]),
            FileCase(name: "mirror mtime differs: copy", source: s,
                     mirror: changed(m) { $0.mtime = t0 }, record: r, contentEqual: nil, expected: [.copyFile(p)]),
            FileCase(name: "no record and quick check matches: adopt with a record", source: s, mirror: m, record: nil,
                     contentEqual: nil, expected: [.updateRecord(r)]),
            FileCase(name: "no record, quick check matches, mode differs: set mode and adopt", source: s,
                     mirror: changed(m) { $0.mode = 0o600 }, record: nil, contentEqual: nil,
                     expected: [.setAttributes(p, mode: 0o644, mtime: nil), .updateRecord(r)]),
            FileCase(name: "no record and size differs: copy", source: bigger, mirror: m, record: nil, contentEqual: nil,
                     expected: [.copyFile(p)]),
            FileCase(name: "no record and mtime differs: copy", source: oneNanoLater, mirror: m, record: nil,
                     contentEqual: nil, expected: [.copyFile(p)]),
            FileCase(name: "record of a symlink, mirror already holds the file: adopt", source: s, mirror: m,
                     record: FileRecord(path: p, kind: .symlink, device: 1, inode: 3, size: 4, mtime: t0, mode: 0o777,
                                        linkTarget: Array("abcd".utf8), mirrorInode: 77),
                     contentEqual: nil, expected: [.updateRecord(r)]),
            FileCase(name: "content differs (--content): copy", source: s, mirror: m, record: r, contentEqual: false,
                     expected: [.copyFile(p)]),
            FileCase(name: "content differs without a record: copy, no adoption", source: s, mirror: m, record: nil,
                     contentEqual: false, expected: [.copyFile(p)]),
            FileCase(name: "content equal (--content): nothing to do", source: s, mirror: m, record: r, contentEqual: true,
                     expected: []),
        ]
    }()

    @Test("what counts as a change of a regular file", arguments: fileCases)
    func regularFileChanges(c: FileCase) {
        for deleteEnabled in [true, false] {
            let state = PathState(path: Self.path, source: c.source, record: c.record, mirror: c.mirror,
                                  contentEqual: c.contentEqual)
            #expect(Planner(deleteEnabled: deleteEnabled).plan(state) == c.expected, "deleteEnabled \(deleteEnabled)")
        }
    }

    // MARK: Symlinks

    @Test("a changed link target replaces the link without removing it first")
    func changedLinkTarget() {
        let s = Self.source(.symlink)
        let m = Self.mirror(.symlink)
        let r = FileRecord(path: Self.path, source: s, linkTarget: Self.otherTarget, mirrorInode: m.inode)
        let state = PathState(path: Self.path, source: s, sourceLink: Self.target, record: r, mirror: m,
                              mirrorLink: Self.otherTarget)
        #expect(Planner().plan(state) == [.makeSymlink(Self.path, target: Self.target)])
    }

    @Test("a link whose source object changed but target did not gets the new mtime and record, no new link")
    func relinkedSameTarget() {
        var s = Self.source(.symlink)
        let m = Self.mirror(.symlink)
        let old = FileRecord(path: Self.path, source: s, linkTarget: Self.target, mirrorInode: m.inode)
        s.inode = 77
        s.mtime = Self.t0
        let state = PathState(path: Self.path, source: s, sourceLink: Self.target, record: old, mirror: m,
                              mirrorLink: Self.target)
        let expected: [SyncAction] = [.setAttributes(Self.path, mode: nil, mtime: Self.t0),
                                      .updateRecord(FileRecord(path: Self.path, source: s, linkTarget: Self.target,
                                                               mirrorInode: m.inode))]
        #expect(Planner().plan(state) == expected)
    }

    @Test("link targets are compared as bytes, including non-UTF-8 ones")
    func nonUTF8LinkTarget() {
        let s = Self.source(.symlink)
        let m = Self.mirror(.symlink)
        let a: [UInt8] = [0x61, 0xE9]
        let b: [UInt8] = [0x61, 0xC3, 0xA9]   // "aé" in UTF-8: a different byte string
        let state = PathState(path: Self.path, source: s, sourceLink: a, record: nil, mirror: m, mirrorLink: b)
        #expect(Planner().plan(state) == [.makeSymlink(Self.path, target: a)])
    }

    @Test("a link whose target could not be read (gone or replaced since it was listed) is left to its events, never made with an empty target")
    func unreadLinkTarget() {
        let s = Self.source(.symlink)
        for m in [nil, Self.mirror(.symlink), Self.mirror(.regular)] {
            let state = PathState(path: Self.path, source: s, sourceLink: nil, record: nil, mirror: m)
            #expect(Planner().plan(state) == [], "mirror: \(m.map { "\($0.kind)" } ?? "nothing")")
        }
    }

    // MARK: The root

    @Test("the root is never removed, whatever the source and deletion setting", arguments: [true, false])
    func rootNeverRemoved(deleteEnabled: Bool) {
        let planner = Planner(deleteEnabled: deleteEnabled)
        let rootDir = Self.mirror(.directory)
        let record = FileRecord(path: .root, source: Self.source(.directory), mirrorInode: rootDir.inode)
        for r in [nil, record] {
            // Source root missing.
            let gone = planner.plan(PathState(path: .root, source: nil, record: r, mirror: rootDir))
            #expect(!gone.contains { $0.isDeletion })
            #expect(gone == [])
            // Something else than a directory at the mirror root.
            for k in [FileKind.regular, .symlink, .special] {
                let actions = planner.plan(PathState(path: .root, source: Self.source(.directory), record: r,
                                                     mirror: Self.mirror(k)))
                #expect(!actions.contains { $0.isDeletion }, "mirror root is \(k)")
            }
            // Unchanged root directory: nothing now (attributes come from finishDirectory).
            #expect(planner.plan(PathState(path: .root, source: Self.source(.directory), record: r, mirror: rootDir)) == [])
        }
    }

    @Test("a missing mirror root is created")
    func missingMirrorRoot() {
        let s = Self.source(.directory)
        #expect(Planner().plan(PathState(path: .root, source: s, record: nil, mirror: nil))
            == [.makeDirectory(.root, mode: s.mode)])
    }

    // MARK: finishDirectory

    struct FinishCase: Sendable, CustomTestStringConvertible {
        let name: String
        let path: RelativePath
        let mirrorMode: UInt32
        let mirrorMtime: Timespec
        let record: RecordVariant
        let entriesChanged: Bool
        let expectedMode: UInt32?
        let expectedMtime: Timespec?
        let expectsRecord: Bool
        var testDescription: String { name }
    }

    static let finishCases: [FinishCase] = [
        FinishCase(name: "in sync: nothing", path: RelativePath("d"), mirrorMode: 0o750, mirrorMtime: t1, record: .matching,
                   entriesChanged: false, expectedMode: nil, expectedMtime: nil, expectsRecord: false),
        FinishCase(name: "mode differs: mode only", path: RelativePath("d"), mirrorMode: 0o700, mirrorMtime: t1, record: .matching,
                   entriesChanged: false, expectedMode: 0o750, expectedMtime: nil, expectsRecord: false),
        FinishCase(name: "mtime differs: mtime only", path: RelativePath("d"), mirrorMode: 0o750, mirrorMtime: t0, record: .matching,
                   entriesChanged: false, expectedMode: nil, expectedMtime: t1, expectsRecord: false),
        FinishCase(name: "entries changed: mtime set again although it looks equal", path: RelativePath("d"), mirrorMode: 0o750,
                   mirrorMtime: t1, record: .matching, entriesChanged: true, expectedMode: nil, expectedMtime: t1,
                   expectsRecord: false),
        FinishCase(name: "new directory: mode, mtime and record", path: RelativePath("d"), mirrorMode: 0o700, mirrorMtime: t0,
                   record: .none, entriesChanged: true, expectedMode: 0o750, expectedMtime: t1, expectsRecord: true),
        FinishCase(name: "no record but in sync: record only", path: RelativePath("d"), mirrorMode: 0o750, mirrorMtime: t1,
                   record: .none, entriesChanged: false, expectedMode: nil, expectedMtime: nil, expectsRecord: true),
        FinishCase(name: "stale record: record replaced", path: RelativePath("d"), mirrorMode: 0o750, mirrorMtime: t1,
                   record: .stale, entriesChanged: false, expectedMode: nil, expectedMtime: nil, expectsRecord: true),
        FinishCase(name: "the root like any directory", path: .root, mirrorMode: 0o755, mirrorMtime: t0,
                   record: .none, entriesChanged: true, expectedMode: 0o750, expectedMtime: t1, expectsRecord: true),
    ]

    @Test("finishDirectory sets mode and mtime after the entries, then records the directory", arguments: finishCases)
    func finishDirectory(c: FinishCase) {
        let source = Self.source(.directory)   // mode 0o750, mtime t1
        let mirror = FileStat(kind: .directory, mode: c.mirrorMode, size: 4096, mtime: c.mirrorMtime, device: 2, inode: 500)
        let matching = FileRecord(path: c.path, source: source, mirrorInode: 500)
        let record: FileRecord? = switch c.record {
        case .none: nil
        case .matching: matching
        case .stale: FileRecord(path: c.path, source: source, mirrorInode: 499)
        }
        for deleteEnabled in [true, false] {
            let actions = Planner(deleteEnabled: deleteEnabled).finishDirectory(
                path: c.path, source: source, mirror: mirror, record: record, entriesChanged: c.entriesChanged)
            var expected: [SyncAction] = []
            if c.expectedMode != nil || c.expectedMtime != nil {
                expected.append(.setAttributes(c.path, mode: c.expectedMode, mtime: c.expectedMtime))
            }
            if c.expectsRecord { expected.append(.updateRecord(matching)) }
            #expect(actions == expected)
        }
    }

    // MARK: Action properties

    @Test("which actions change mirror entries and which are deletions")
    func actionProperties() {
        let p = Self.path
        let cases: [(SyncAction, entries: Bool, deletion: Bool)] = [
            (.copyFile(p), true, false),
            (.makeDirectory(p, mode: 0o755), true, false),
            (.makeSymlink(p, target: Self.target), true, false),
            (.remove(p), true, true),
            (.setAttributes(p, mode: 0o644, mtime: nil), false, false),
            (.updateRecord(Self.syncedRecord), false, false),
            (.dropRecord(p), false, false),
            (.skipSpecial(p), false, false),
        ]
        for (action, entries, deletion) in cases {
            #expect(action.changesMirrorEntries == entries, "\(action)")
            #expect(action.isDeletion == deletion, "\(action)")
        }
    }
}
