import Glibc
import KeepSyncCore

/// A failed system call in a test helper.
struct FSError: Error, CustomStringConvertible {
    var call: String
    var path: [UInt8]
    var code: Int32
    var description: String { "\(call)(\(ByteEscaping.escape(path))): \(String(cString: strerror(code)))" }
}
