import Dispatch
import KeepSyncTestSupport
import Synchronization
import Testing
@testable import KeepSyncCore

/// An agent over a fake host, a recording notifier and status writer, a signal feed and
/// a manual clock. `until` moves the clock in steps while it waits (with a real-time
/// deadline) for a condition.
final class AgentHarness: Sendable {
    let clock: ManualClock
    /// The first mirror's host (it also watches the source), and every mirror's.
    let host: FakeAgentHost
    let hosts: [FakeAgentHost]
    let notifier: RecordingNotifier
    /// The first mirror's status.json, and every mirror's.
    let writer: RecordingStatusWriter
    let writers: [RecordingStatusWriter]
    let feed = SignalFeed()
    let agent: Agent<ManualClock>
    let outcome = Mutex<Result<ExitCode, any Error>?>(nil)
    /// Configuration reloads so far; `onReload` runs inside each.
    let reloads = Mutex(0)
    let onReload: @Sendable (AgentHarness) -> Void

    /// `after`: a restart on the machine (host and clock) of an agent that has stopped.
    /// `mirrors`: that many mirrors of the one source, at /mirror, /mirror2, ...
    init(watchdog: Duration? = nil, after previous: AgentHarness? = nil, mirrors: Int = 1,
         reloaded: @escaping @Sendable (inout Settings) -> Void = { _ in },
         onReload: @escaping @Sendable (AgentHarness) -> Void = { _ in }) {
        clock = previous?.clock ?? ManualClock()
        host = previous?.host ?? FakeAgentHost(clock: clock)
        let first = host
        hosts = previous?.hosts ?? [host] + (1..<max(mirrors, 1)).map { _ in FakeAgentHost(sharingSourceWith: first) }
        writers = hosts.map { _ in RecordingStatusWriter() }
        writer = writers[0]
        notifier = RecordingNotifier(watchdogInterval: watchdog)
        self.onReload = onReload
        let settings = hosts.indices.map { i in
            FakeAgentHost.settings(mirror: i == 0 ? "/mirror" : "/mirror\(i + 1)", state: i == 0 ? "/state" : "/state\(i + 1)")
        }
        let reloadBox = Mutex<(@Sendable () -> Void)?>(nil)
        agent = Agent(mirrors: settings, hosts: hosts, notifier: notifier, statusWriters: writers,
                      progress: SilentProgress(), clock: clock, logger: .silent,
                      reload: {
                          reloadBox.withLock { $0 }?()
                          return settings.map { s in
                              var fresh = s
                              reloaded(&fresh)
                              return fresh
                          }
                      })
        reloadBox.withLock { $0 = { [unowned self] in self.reloads.withLock { $0 += 1 }; self.onReload(self) } }
    }

    /// A source with three files, two directories deep.
    func populate() {
        host.source.writeFile(RelativePath("a"), Array("alpha".utf8))
        host.source.makeDirectory(RelativePath("dir"))
        host.source.writeFile(RelativePath("dir/b"), Array("bravo".utf8))
        host.source.writeFile(RelativePath("dir/c"), Array("charlie".utf8))
    }

    /// Starts the agent on a task of its own.
    func start() {
        Task {
            let result: Result<ExitCode, any Error>
            do { result = .success(try await agent.run(signals: feed.signals)) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
        }
    }

    /// True once `run` returned.
    var finished: Bool { outcome.withLock { $0 != nil } }

    /// Waits until `condition` holds, advancing the clock by `step` between looks (none
    /// when `step` is zero); fails after `timeout` of real time.
    func until(_ what: String, step: Duration = .milliseconds(250), timeout: Duration = .seconds(120),
               sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while await !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("timed out waiting for \(what); sent: \(notifier.messages)", sourceLocation: sourceLocation)
                throw CancellationError()
            }
            if step > .zero { clock.advance(by: step) }
            await Task.yield()
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    /// Waits for READY=1 (the initial sync done).
    func waitUntilReady(count: Int = 1) async throws {
        try await until("READY=1 #\(count)") { notifier.count("READY=1") >= count }
    }

    /// Sends SIGTERM and waits for `run` to return; returns its exit code.
    func stop(with signal: AgentSignal = .terminate) async throws -> ExitCode {
        feed.send(signal)
        try await until("run to return") { finished }
        return try #require(outcome.withLock { $0 }).get()
    }
}

/// No terminal.
struct SilentProgress: ProgressDisplay {
    var isActive: Bool { false }
    func update(_ line: String) {}
    func finish(_ summary: String?) {}
}
