import Testing
@testable import KeepSyncCore

@Suite("SourceSafety")
struct SourceSafetyTests {
    enum Outcome: String, Sendable {
        case proceed, refuse, usage
    }

    static let rootDir = FileStat(kind: .directory, mode: 0o755, size: 4096,
                                  mtime: Timespec(seconds: 10, nanoseconds: 0), device: 8, inode: 100)
    static let sameRoot = FileIdentity(device: 8, inode: 100)
    static let otherRoot = FileIdentity(device: 8, inode: 200)
    static let file = FileRecord(path: RelativePath("a"), kind: .regular, device: 8, inode: 5, size: 1,
                                 mtime: Timespec(seconds: 1, nanoseconds: 0), mode: 0o644, mirrorInode: 9)
    static let rootRecord = FileRecord(path: .root, kind: .directory, device: 8, inode: 100, size: 0,
                                       mtime: Timespec(seconds: 1, nanoseconds: 0), mode: 0o755, mirrorInode: 2)

    enum Source: String, Sendable { case missing, directory, regularFile, symlink }
    enum Records: String, Sendable { case none, rootOnly, filesOnly, rootAndFiles, otherRootAndFiles, rootRecordOnly }

    struct Case: Sendable, CustomTestStringConvertible {
        let source: Source
        let empty: Bool
        let records: Records
        let accept: Bool
        let allow: Bool
        let outcome: Outcome
        /// Words the message must contain.
        let words: [String]

        init(_ source: Source, empty: Bool = false, _ records: Records, accept: Bool = false, allow: Bool = false,
             _ outcome: Outcome, _ words: [String] = []) {
            self.source = source
            self.empty = empty
            self.records = records
            self.accept = accept
            self.allow = allow
            self.outcome = outcome
            self.words = words
        }

        var testDescription: String {
            "\(source.rawValue)\(empty ? " (empty)" : ""), records \(records.rawValue)"
                + "\(accept ? ", --accept-new-source" : "")\(allow ? ", --allow-mass-delete" : ""): \(outcome.rawValue)"
        }

        var stat: FileStat? {
            switch source {
            case .missing: return nil
            case .directory: return SourceSafetyTests.rootDir
            case .regularFile:
                var s = SourceSafetyTests.rootDir
                s.kind = .regular
                return s
            case .symlink:
                var s = SourceSafetyTests.rootDir
                s.kind = .symlink
                return s
            }
        }

        var recordSet: RecordSet {
            let f = SourceSafetyTests.file
            switch records {
            case .none: return RecordSet()
            case .rootOnly: return RecordSet(root: SourceSafetyTests.sameRoot)
            case .filesOnly: return RecordSet(records: [f.path: f])
            case .rootAndFiles: return RecordSet(records: [f.path: f], root: SourceSafetyTests.sameRoot)
            case .otherRootAndFiles: return RecordSet(records: [f.path: f], root: SourceSafetyTests.otherRoot)
            case .rootRecordOnly:
                // Only the record of the root directory itself: not an entry.
                return RecordSet(records: [.root: SourceSafetyTests.rootRecord], root: SourceSafetyTests.sameRoot)
            }
        }
    }

    static let cases: [Case] = [
        // Missing source.
        Case(.missing, .none, .usage, ["/src", "does not exist"]),
        Case(.missing, .none, accept: true, .usage, ["does not exist"]),
        Case(.missing, .rootOnly, .refuse, ["/src", "missing", "nothing is deleted"]),
        Case(.missing, .filesOnly, .refuse, ["missing", "1 entries"]),
        Case(.missing, .rootAndFiles, .refuse, ["missing"]),
        Case(.missing, .rootAndFiles, accept: true, allow: true, .refuse, ["missing"]),
        // Not a directory.
        Case(.regularFile, .none, .usage, ["not a directory"]),
        Case(.symlink, .rootAndFiles, .usage, ["not a directory"]),
        // The recorded directory.
        Case(.directory, .none, .proceed),
        Case(.directory, empty: true, .none, .proceed),
        Case(.directory, .rootOnly, .proceed),
        Case(.directory, empty: true, .rootOnly, .proceed),
        Case(.directory, empty: true, .rootRecordOnly, .proceed),
        Case(.directory, .rootAndFiles, .proceed),
        Case(.directory, .filesOnly, .proceed),
        // Emptied while the records list files.
        Case(.directory, empty: true, .rootAndFiles, .refuse, ["empty", "1 entries", "--allow-mass-delete"]),
        Case(.directory, empty: true, .filesOnly, .refuse, ["empty"]),
        Case(.directory, empty: true, .rootAndFiles, allow: true, .proceed),
        Case(.directory, empty: true, .rootAndFiles, accept: true, .proceed),
        // Replaced by another directory.
        Case(.directory, .otherRootAndFiles, .refuse, ["different directory", "inode 200", "inode 100",
                                                        "--accept-new-source"]),
        Case(.directory, .otherRootAndFiles, allow: true, .refuse, ["different directory"]),
        Case(.directory, .otherRootAndFiles, accept: true, .proceed),
        Case(.directory, empty: true, .otherRootAndFiles, .refuse, ["different directory"]),
        Case(.directory, empty: true, .otherRootAndFiles, accept: true, .proceed),
    ]

    @Test("the verdict for each source and record state", arguments: cases)
    func verdict(c: Case) {
        let verdict = SourceSafety.evaluate(sourcePath: "/src", root: c.stat, rootIsEmpty: c.empty, records: c.recordSet,
                                            acceptNewSource: c.accept, allowMassDelete: c.allow)
        let message: String
        switch (verdict, c.outcome) {
        case (.proceed, .proceed):
            return
        case (.refuse(let m), .refuse), (.usage(let m), .usage):
            message = m
        default:
            Issue.record("expected \(c.outcome.rawValue), got \(verdict)")
            return
        }
        for word in c.words { #expect(message.contains(word), "\(message)") }
        #expect(!message.contains("\n"), "one line")
    }
}
