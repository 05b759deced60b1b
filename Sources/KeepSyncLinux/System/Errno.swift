import Glibc
import KeepSyncCore

/// An errno value with a Swift name for the ones keepsync acts on.
struct Errno: Error, Equatable, Sendable {
    /// The raw errno.
    var rawValue: Int32

    static let noSuchFileOrDirectory = Errno(rawValue: ENOENT)
    static let fileExists = Errno(rawValue: EEXIST)
    static let notDirectory = Errno(rawValue: ENOTDIR)
    static let isDirectory = Errno(rawValue: EISDIR)
    static let directoryNotEmpty = Errno(rawValue: ENOTEMPTY)
    static let interrupted = Errno(rawValue: EINTR)
    static let wouldBlock = Errno(rawValue: EWOULDBLOCK)
    static let tooManySymbolicLinks = Errno(rawValue: ELOOP)
    static let crossDevice = Errno(rawValue: EXDEV)
    static let noSystemCall = Errno(rawValue: ENOSYS)
    static let notATypewriter = Errno(rawValue: ENOTTY)
    static let notSupported = Errno(rawValue: EOPNOTSUPP)

    /// The current thread's errno.
    static var current: Errno { Errno(rawValue: errno) }

    /// The strerror text.
    var text: String { String(cString: strerror(rawValue)) }

    /// The keepsync error code for this errno (the one mapping table).
    var code: KeepSyncError.Code {
        switch rawValue {
        case ENOENT, ENOTDIR: return .notFound
        case EACCES, EPERM: return .permissionDenied
        case ENOSPC, EDQUOT: return .noSpace
        case EFBIG: return .tooLarge
        case EROFS: return .readOnly
        case EEXIST, EISDIR, ENOTEMPTY: return .conflict
        case ELOOP, EXDEV: return .unsafePath
        default: return .io
        }
    }

    /// A keepsync error naming the call and the path.
    func error(_ call: String, path: RelativePath? = nil) -> KeepSyncError {
        KeepSyncError(code, "\(call): \(text)", path: path, errno: rawValue)
    }
}

/// A call that failed, for helpers that make more than one.
struct FailedCall: Error {
    /// The call's name.
    let call: String
    /// Its errno.
    let errno: Errno
}

/// Runs a C call returning -1 on error; retries on EINTR when asked.
@inline(__always)
func valueOrErrno<T: FixedWidthInteger>(retryOnInterrupt: Bool = true, _ body: () -> T) throws(Errno) -> T {
    while true {
        let r = body()
        if r != -1 { return r }
        let e = Errno.current
        if retryOnInterrupt && e == .interrupted { continue }
        throw e
    }
}
