/// How much keepsync logs; each level includes the ones before it.
public enum LogLevel: Int, Comparable, Sendable, CaseIterable, CustomStringConvertible {
    /// Failures only.
    case error
    /// Failures and conditions worth a look.
    case warning
    /// Normal operation (the default).
    case info
    /// Everything, per path.
    case debug

    /// Parses `error`, `warning`, `info` or `debug` (exact, lower case).
    public init?(name: some StringProtocol) {
        switch name {
        case "error": self = .error
        case "warning": self = .warning
        case "info": self = .info
        case "debug": self = .debug
        default: return nil
        }
    }

    /// Parses the name from bytes.
    public init?(bytes: [UInt8]) {
        self.init(name: String(decoding: bytes, as: UTF8.self))
    }

    /// The name as written in configuration.
    public var name: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .info: "info"
        case .debug: "debug"
        }
    }

    /// The name.
    public var description: String { name }

    /// Less verbose levels order first: `error < warning < info < debug`.
    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}
