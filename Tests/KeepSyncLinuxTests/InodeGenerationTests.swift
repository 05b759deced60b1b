import Glibc
import KeepSyncCore
@testable import KeepSyncLinux
import KeepSyncTestSupport
import Testing

/// The inode generation (`FS_IOC_GETVERSION`), which stands in for the birth time where a
/// file system reports none, on the real file system under /tmp.
@Suite("Inode generation")
struct InodeGenerationTests {
    @Test("the ioctl answers for a file and a directory, the same value each time")
    func ioctlAnswers() throws {
        let dir = try ScratchDirectory.make(prefix: "keepsync-generation")
        defer { try? ScratchDirectory.removeTree(dir) }
        let fd = try Sys.open(.currentDirectory, dir + Array("/f".utf8), O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
        fd.close()
        let root = try Sys.open(.currentDirectory, dir, O_RDONLY | O_DIRECTORY)
        defer { root.close() }
        let first: UInt32
        do throws(Errno) {
            first = try root.generation()
        } catch {
            try #require(error == .notATypewriter || error == .notSupported, "ioctl: \(error.text)")
            try Test.cancel("the file system under /tmp keeps no inode generation (\(error.text))")
        }
        #expect(try root.generation() == first)
        let opened = try Sys.open(root, Array("f".utf8), O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        defer { opened.close() }
        let fileGeneration = try opened.generation()
        #expect(try opened.generation() == fileGeneration)
    }

    @Test("a stat without a birth time gets the generation, by name and by descriptor; a symlink's does not")
    func statWithoutBirthTimeGetsGeneration() throws {
        let dir = try ScratchDirectory.make(prefix: "keepsync-generation")
        defer { try? ScratchDirectory.removeTree(dir) }
        let created = try Sys.open(.currentDirectory, dir + Array("/f".utf8), O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
        created.close()
        try Sys.makeSymlink(target: Array("f".utf8), .currentDirectory, dir + Array("/l".utf8))
        let fs = try PosixFileSystem(rootPath: dir)
        let root = try Sys.open(.currentDirectory, dir, O_RDONLY | O_DIRECTORY)
        defer { root.close() }
        do throws(Errno) { _ = try root.generation() } catch {
            try Test.cancel("the file system under /tmp keeps no inode generation (\(error.text))")
        }
        // As a file system without birth times reports it.
        var plain = try #require(try fs.stat(RelativePath("f")))
        plain.birthTime = nil
        plain.generation = nil
        let byName = try #require(fs.withGeneration(plain, root, Array("f".utf8)))
        let generation = try #require(byName.generation)
        #expect(byName.identityStamp == Timespec.generationStamp(generation))
        let opened = try Sys.open(root, Array("f".utf8), O_RDONLY)
        defer { opened.close() }
        #expect(fs.withGeneration(plain, opened)?.generation == generation)

        var link = try #require(try fs.stat(RelativePath("l")))
        link.birthTime = nil
        #expect(fs.withGeneration(link, root, Array("l".utf8))?.generation == nil)
    }
}
