import Foundation
import Glibc
import KeepSyncTestSupport
import Testing

/// A group's source files are asked for ahead (`POSIX_FADV_WILLNEED`) before the first
/// of them is copied, so that a cold disk reads a group's small files together instead
/// of one after another (a cold copy of 100,000 small files spent about 1 ms in each
/// `copy_file_range`, waiting for its read). Read from the built binary's syscalls.
@Suite(.serialized, .offThePool)
struct CopyReadAheadTests {
    /// A first `sync` of 320 small files in 8 directories under `strace -f -y` of `calls`.
    static func firstSync(tracing calls: String) throws -> (Sandbox, [TraceCall]) {
        let strace = try SyscallCrashTests.requireProgram("strace", package: "strace")
        let sandbox = try Sandbox()
        for d in 0..<8 {
            try FS.mkdirs(sandbox.source / "d\(d)")
            for f in 0..<40 { try FS.writeFile(sandbox.source / "d\(d)/f\(f)", "file \(d)/\(f)\n") }
        }
        let log = sandbox.root / "trace"
        let arguments = ["-f", "-y", "-xx", "-qq", "-o", String(decoding: log, as: UTF8.self), "-e", "trace=" + calls,
                         String(decoding: sandbox.binary, as: UTF8.self), "sync"]
            .map { Array($0.utf8) } + sandbox.paths.map(\.argumentBytes)
        let result = try ChildProcess.run(strace, arguments: arguments, environment: sandbox.environment, timeout: .seconds(120))
        try #require(result.status == 0, "\(result)")
        return (sandbox, TraceCall.calls(in: try FS.readFile(log)))
    }

    @Test func eachGroupAsksForItsFilesBeforeCopyingThem() throws {
        let (sandbox, calls) = try Self.firstSync(tracing: "fadvise64,copy_file_range")

        let source = String(decoding: sandbox.source, as: UTF8.self) + "/"
        var hinted: Set<String> = [], waiting: Set<String> = []
        var copies = 0, copiesHinted = 0, mostWaiting = 0
        for call in calls {
            guard let fd = call.arguments.first.flatMap(TraceCall.fdPath) else { continue }
            let path = String(decoding: fd, as: UTF8.self)
            guard path.hasPrefix(source) else { continue }
            switch call.name {
            case "fadvise64":
                hinted.insert(path)
                waiting.insert(path)
                mostWaiting = max(mostWaiting, waiting.count)
            case "copy_file_range":
                copies += 1
                if hinted.contains(path) { copiesHinted += 1 }
                waiting.remove(path)
            default:
                break
            }
        }
        print("CopyReadAheadTests: \(copies) copies, \(copiesHinted) asked for before, at most \(mostWaiting) asked for and not yet copied")
        #expect(copies == 320)
        #expect(copiesHinted == copies, "every copied file was asked for first")
        // A group's files are asked for together (the first group: 256), all before the
        // first of them is copied.
        #expect(mostWaiting >= 64)
    }

    /// Staged files of one directory share one open descriptor of it, and its renames
    /// another: a group opened each file's directory twice (one `openat2` and one `close`
    /// for staging, the same for the rename).
    @Test func aGroupOpensEachDirectoryOnceToStageAndOnceToRename() throws {
        let (sandbox, calls) = try Self.firstSync(tracing: "openat,openat2,rename,renameat,renameat2")

        let mirror = String(decoding: sandbox.mirror, as: UTF8.self) + "/"
        var directoryOpens = 0, renames = 0
        for call in calls {
            if call.name.hasPrefix("rename"), call.arguments.compactMap(TraceCall.fdPath).first.map({ String(decoding: $0, as: UTF8.self).hasPrefix(mirror) }) == true {
                renames += 1
            }
            guard call.name.hasPrefix("openat"), let opened = call.returnedPath,
                  String(decoding: opened, as: UTF8.self).hasPrefix(mirror),
                  call.arguments.contains(where: { String(decoding: $0, as: UTF8.self).contains("O_DIRECTORY") }) else { continue }
            directoryOpens += 1
        }
        print("CopyReadAheadTests: \(renames) renames in the mirror's directories, \(directoryOpens) opens of them")
        #expect(renames == 320)
        // Two groups (256 and 64 files) over 8 directories, each opened to stage and to
        // rename, and for each directory's finish: a few dozen, not one per file.
        #expect(directoryOpens <= 64, "\(directoryOpens) opens of mirror directories for 320 files")
    }
}
