import Dispatch
import Glibc
import KeepSyncCore

/// Signals as Dispatch sources. Dispositions are set to SIG_IGN first (so a signal
/// arriving early cannot kill the process), then the sources are created, and `init`
/// returns only once every source is registered. The disposition is never touched again.
// @unchecked: the sources are created in init and only cancelled after; Dispatch
// sources are thread-safe but not annotated Sendable.
public final class SignalSource: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]

    /// Every signal the agent handles, plus SIGPIPE (ignored only).
    public static let handled: [Int32] = [SIGHUP, SIGUSR1, SIGTERM, SIGINT]

    /// Ignores `SIGPIPE` and the handled signals; call first thing in `run`.
    public static func ignoreAll() {
        for s in handled + [SIGPIPE] { ProcessEnvironment.ignoreSignal(s) }
    }

    /// Installs sources calling `handler` with the signal number on a private queue.
    public init(_ signals: [Int32] = SignalSource.handled, handler: @escaping @Sendable (Int32) -> Void) {
        let queue = DispatchQueue(label: "keepsync.signals")
        let group = DispatchGroup()
        sources = signals.map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            group.enter()
            source.setRegistrationHandler { group.leave() }
            source.setEventHandler { handler(number) }
            source.resume()
            return source
        }
        group.wait()
    }

    /// Ignores the handled signals, then installs sources feeding the returned stream (it
    /// buffers what arrives before it is read) and the sources, to cancel when done.
    public static func stream() -> (signals: AsyncStream<AgentSignal>, source: SignalSource) {
        ignoreAll()
        let (stream, continuation) = AsyncStream.makeStream(of: AgentSignal.self)
        let source = SignalSource { number in
            switch number {
            case SIGHUP: continuation.yield(.hangup)
            case SIGUSR1: continuation.yield(.resync)
            case SIGTERM: continuation.yield(.terminate)
            case SIGINT: continuation.yield(.interrupt)
            default: break
            }
        }
        return (stream, source)
    }

    /// Stops delivering signals (dispositions stay ignored).
    public func cancel() { for s in sources { s.cancel() } }
}
