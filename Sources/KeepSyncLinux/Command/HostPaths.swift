import Glibc
import KeepSyncCore

/// Absolute-path helpers for the command layer (not the sync path): resolution,
/// creating directories, reading and atomically writing small files.
public enum HostPaths {
    /// The current directory.
    public static func currentDirectory() -> [UInt8] { Sys.currentDirectory() ?? [0x2F] }

    /// Makes `path` absolute and drops `.`, `..` and repeated slashes lexically.
    public static func absolute(_ path: [UInt8]) -> [UInt8] {
        let full = path.first == 0x2F ? path : currentDirectory() + [0x2F] + path
        var parts: [[UInt8]] = []
        for c in full.split(separator: 0x2F) {
            if c.elementsEqual([0x2E]) { continue }
            if c.elementsEqual([0x2E, 0x2E]) { _ = parts.popLast(); continue }
            parts.append(Array(c))
        }
        return parts.isEmpty ? [0x2F] : parts.reduce(into: [UInt8]()) { $0 += [0x2F] + $1 }
    }

    /// `realpath` of the longest existing prefix, with the rest appended: a path that
    /// need not exist yet, resolved as far as it does.
    public static func resolve(_ path: [UInt8]) -> [UInt8] {
        let abs = absolute(path)
        if let real = try? Sys.realPath(abs) { return real }
        var parts = abs.split(separator: 0x2F).map(Array.init)
        var rest: [[UInt8]] = []
        while let last = parts.popLast() {
            rest.insert(last, at: 0)
            let prefix = parts.isEmpty ? [0x2F] : parts.reduce(into: [UInt8]()) { $0 += [0x2F] + $1 }
            if let real = try? Sys.realPath(prefix) {
                let base = real == [0x2F] ? [] : real
                return rest.reduce(base) { $0 + [0x2F] + $1 }
            }
        }
        return abs
    }

    /// `lstat` of an absolute path; nil when missing.
    public static func stat(_ path: [UInt8]) -> FileStat? {
        try? Sys.lstat(.currentDirectory, path)
    }

    /// `st_dev` of the file system holding `path`, or its nearest existing ancestor (what a
    /// directory made there would be on); nil when not even `/` can be read.
    public static func fileSystem(_ path: [UInt8]) -> UInt64? {
        var parts = absolute(path).split(separator: 0x2F).map(Array.init)
        while true {
            let prefix = parts.reduce(into: [UInt8]()) { $0 += [0x2F] + $1 }
            if let st = stat(prefix.isEmpty ? [0x2F] : prefix) { return st.device }
            if parts.popLast() == nil { return nil }
        }
    }

    /// `mkdir -p` with `mode` for the directories it creates.
    public static func makeDirectories(_ path: [UInt8], mode: UInt32) throws {
        let abs = absolute(path)
        var current: [UInt8] = []
        for part in abs.split(separator: 0x2F) {
            current += [0x2F] + part
            do throws(Errno) { try Sys.makeDirectory(.currentDirectory, current, mode: mode) } catch {
                if error == .fileExists, stat(current)?.kind == .directory || (try? Sys.realPath(current)) != nil { continue }
                throw KeepSyncError(error.code, "cannot create directory \(display(current)): \(error.text)", errno: error.rawValue)
            }
        }
    }

    /// Reads a whole file.
    public static func read(_ path: [UInt8]) throws -> [UInt8] {
        do throws(Errno) {
            let fd = try Sys.open(.currentDirectory, path, O_RDONLY)
            defer { fd.close() }
            return try fd.readAll()
        } catch {
            throw KeepSyncError(error.code, "cannot read \(display(path)): \(error.text)", errno: error.rawValue)
        }
    }

    /// Writes a file atomically: temp in the same directory, fsync, rename.
    public static func writeAtomically(_ path: [UInt8], _ bytes: [UInt8], mode: UInt32 = 0o644) throws {
        let temp = path + Array(".tmp".utf8)
        do throws(Errno) {
            let fd = try Sys.open(.currentDirectory, temp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: mode)
            defer { fd.close() }
            try fd.writeAll(bytes)
            try fd.sync()
            try Sys.rename(.currentDirectory, temp, .currentDirectory, path)
        } catch {
            try? Sys.unlink(.currentDirectory, temp, directory: false)
            throw KeepSyncError(error.code, "cannot write \(display(path)): \(error.text)", errno: error.rawValue)
        }
    }

    /// Removes a file; a missing one is fine.
    public static func removeFile(_ path: [UInt8]) {
        try? Sys.unlink(.currentDirectory, path, directory: false)
    }

    /// The names in directory `path` (without `.` and `..`).
    public static func list(_ path: [UInt8]) throws -> [[UInt8]] { try Sys.readDirectoryPath(path) }

    /// Bytes as text for messages (invalid UTF-8 repaired).
    public static func display(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }
}
