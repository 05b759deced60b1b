import Glibc
import KeepSyncCore

/// The built `keepsync` executable, next to the test bundle.
enum KeepsyncBinary {
    /// Where we looked, for the failure message.
    static let candidates: [[UInt8]] = {
        var list: [[UInt8]] = []
        if let override = getenv("KEEPSYNC_BINARY") {
            list.append(Array(String(cString: override).utf8))
        }
        var dir = FS.realpath(Array("/proc/self/exe".utf8))
        for _ in 0..<4 {
            dir = FS.dirname(dir)
            list.append(dir / "keepsync")
            if dir == [0x2F] { break }
        }
        return list
    }()

    /// The first candidate that is an executable regular file.
    static let path: [UInt8]? = candidates.first { candidate in
        guard let st = FS.lstatFollowing(candidate), st.kind == .regular else { return false }
        return FS.withCPath(candidate) { access($0, X_OK) } == 0
    }

    static var searchedDescription: String {
        candidates.map { ByteEscaping.escape($0) }.joined(separator: ", ")
    }
}
