import Foundation
import Glibc
import Testing
import KeepSyncTestSupport
import KeepSyncCore

/// `keepsync run` speaking sd_notify to a datagram socket the test binds (a path or an
/// abstract `@name`), as systemd's `$NOTIFY_SOCKET`: READY=1 only after the initial
/// sync, RELOADING=1 + MONOTONIC_USEC= then READY=1 on SIGHUP, STOPPING=1 on SIGTERM,
/// WATCHDOG=1 every half of WATCHDOG_USEC, and nothing that breaks without a socket.
@Suite(.serialized, .offThePool)
struct SdNotifyTests {
    /// The keys keepsync may send (SPEC "systemd").
    static let knownKeys: Set<String> = ["READY", "STATUS", "RELOADING", "MONOTONIC_USEC", "STOPPING", "WATCHDOG"]

    /// The messages that change the service state: READY, RELOADING, STOPPING.
    static func lifecycle(_ messages: [NotifySocket.Message]) -> [String] {
        messages.compactMap { m in
            if m.has("READY") { return "READY=1" }
            if m.has("RELOADING") { return "RELOADING=1" }
            if m.has("STOPPING") { return "STOPPING=1" }
            return nil
        }
    }

    /// 12,345 style, as in the issue's "watching 12,345 files, 0 pending".
    static func grouped(_ n: Int) -> String {
        let digits = Array(String(n))
        var out = ""
        for (i, d) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(d)
        }
        return out
    }

    /// Every datagram: known keys only, sent by the agent's own (main) PID.
    static func expectWellFormed(_ socket: NotifySocket, from agent: BackgroundChild,
                                 sourceLocation: SourceLocation = #_sourceLocation) {
        for m in socket.messages {
            let unknown = m.fields.map(\.key).filter { !knownKeys.contains($0) }
            #expect(unknown.isEmpty, "unexpected keys \(unknown) in \(m)", sourceLocation: sourceLocation)
            #expect(m.senderPID == agent.pid, "datagram \(m) sent by PID \(m.senderPID.map(String.init) ?? "?"), not the main PID \(agent.pid)",
                    sourceLocation: sourceLocation)
        }
    }

    // MARK: Cases

    @Test(arguments: NotifySocket.Kind.allCases)
    func readyComesAfterTheInitialSyncThenReloadingAndReadyOnSighupThenStoppingOnSigterm(_ kind: NotifySocket.Kind) async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        // Enough files that a READY=1 sent before the initial sync ends is caught in the act.
        try sandbox.writeManyFiles(1200)
        let files = try sandbox.sourceRegularFileCount()
        let socket = try NotifySocket(kind, directory: sandbox.root)
        let agent = try sandbox.spawnRun(environment: ["NOTIFY_SOCKET": socket.address])

        // Start: the first READY=1, and the mirror already complete when it arrives.
        let readyIndex = await socket.waitFor(.seconds(60)) { $0.has("READY") }
        let mirroredAtReady = sandbox.mirroredManyFiles()
        let r = try #require(readyIndex, "no READY=1 on \(kind) socket \(socket.address)\n\(socket.transcript)\n\(agent.diagnostics)")
        #expect(mirroredAtReady == 1200,
                "READY=1 arrived before the initial sync was done: the mirror held \(mirroredAtReady) of the 1200 files of many/\n\(socket.transcript)")
        #expect(sandbox.differencesFromSource().isEmpty, "\(sandbox.differencesFromSourceSummary())")
        #expect(socket.messages[r].value("STATUS") == "watching \(Self.grouped(files)) files, 0 pending",
                "READY=1 should carry the watching status: \(socket.messages[r])")
        #expect(socket.messages[..<r].allSatisfy { !$0.has("READY") })
        #expect(agent.poll() == nil, "the agent ended\n\(agent.diagnostics)")

        // SIGHUP: RELOADING=1 with MONOTONIC_USEC= read from CLOCK_MONOTONIC now, then READY=1.
        let before = monotonicMicroseconds()
        agent.send(SIGHUP)
        let reloadIndex = await socket.waitFor(.seconds(10), from: r + 1) { $0.has("RELOADING") }
        let after = monotonicMicroseconds()
        let h = try #require(reloadIndex, "no RELOADING=1 after SIGHUP\n\(socket.transcript)\n\(agent.diagnostics)")
        let stamp = socket.messages[h].value("MONOTONIC_USEC")
        #expect(stamp.map { !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) } == true,
                "RELOADING=1 must come with MONOTONIC_USEC=<digits> in the same datagram: \(socket.messages[h])")
        if let value = stamp.flatMap(UInt64.init) {
            #expect(value >= before && value <= after,
                    "MONOTONIC_USEC=\(value) is not CLOCK_MONOTONIC at the reload (between \(before) and \(after))")
        }
        let readyAgain = await socket.waitFor(.seconds(10), from: h + 1) { $0.has("READY") }
        #expect(readyAgain != nil, "no READY=1 after RELOADING=1: `systemctl reload` would hang\n\(socket.transcript)")
        // SIGTERM: STOPPING=1, then exit 0.
        let beforeStop = socket.messages.count
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none: still running 10 s after SIGTERM")\n\(agent.diagnostics)")
        #expect(socket.messages[beforeStop...].contains { $0.has("STOPPING") }, "no STOPPING=1 after SIGTERM\n\(socket.transcript)")

        #expect(Self.lifecycle(socket.messages) == ["READY=1", "RELOADING=1", "READY=1", "STOPPING=1"],
                "the lifecycle messages are not exactly start, reload, stop:\n\(socket.transcript)")
        #expect(!socket.messages.contains { $0.has("WATCHDOG") }, "WATCHDOG=1 without WATCHDOG_USEC\n\(socket.transcript)")
        Self.expectWellFormed(socket, from: agent)
    }

    /// `WATCHDOG_PID` unset, or naming the agent itself (set by a shell that then execs it).
    @Test(arguments: ["unset", "the agent's own PID"])
    func withWatchdogUsec400000TheAgentPingsAtLeastTwiceASecondFromStart(_ watchdogPID: String) async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let socket = try NotifySocket(.path, directory: sandbox.root)
        var env = sandbox.environment
        env["NOTIFY_SOCKET"] = socket.address
        env["WATCHDOG_USEC"] = "400000"
        let clock = ContinuousClock()
        let spawned = clock.now
        let spawnedAt = realtimeSeconds()
        let agent: BackgroundChild
        if watchdogPID == "unset" {
            agent = try BackgroundChild(sandbox.binary, arguments: (["run"] + sandbox.paths).map(\.argumentBytes),
                                        environment: env, output: .files(base: sandbox.root / "agent"))
        } else {
            // `$$` is the shell's PID, which exec hands to keepsync.
            let command = "WATCHDOG_PID=$$; export WATCHDOG_PID; exec \"$0\" run --source \"$1\" --mirror \"$2\" --state \"$3\""
            agent = try BackgroundChild(Array("/bin/sh".utf8),
                                        arguments: [Array("-c".utf8), Array(command.utf8), sandbox.binary, sandbox.source, sandbox.mirror, sandbox.state],
                                        environment: env, output: .files(base: sandbox.root / "agent"))
        }
        // Pings are timed by the kernel's receive stamps, not by when the test reads them.
        func pings() -> [Double] { socket.messages.filter { $0.has("WATCHDOG") }.compactMap(\.sentAt).sorted() }

        // From start: at least 2 pings in the first second (one every 200 ms).
        _ = await eventually(timeout: .seconds(5), every: .milliseconds(5)) {
                return clock.now >= spawned + .milliseconds(1100)
        }
        let early = pings().filter { $0 <= spawnedAt + 1 }
        #expect(early.count >= 2, "\(early.count) WATCHDOG=1 in the first second with WATCHDOG_USEC=400000\n\(socket.transcript)\n\(agent.diagnostics)")
        if let first = early.first {
            #expect(first - spawnedAt < 0.4, "the first WATCHDOG=1 came \(first - spawnedAt) s after start, later than WATCHDOG_USEC")
        }

        let readyIndex = await socket.waitFor(.seconds(30)) { $0.has("READY") }
        let r = try #require(readyIndex, "no READY=1\n\(socket.transcript)\n\(agent.diagnostics)")
        let readyAt = socket.messages[r].at
        let readySent = try #require(socket.messages[r].sentAt)
        _ = await eventually(timeout: .seconds(5), every: .milliseconds(5)) {
                return clock.now >= readyAt + .milliseconds(1100)
        }
        let steady = pings().filter { $0 > readySent && $0 <= readySent + 1 }
        #expect(steady.count >= 2, "\(steady.count) WATCHDOG=1 in the second after READY=1\n\(socket.transcript)")
        // systemd declares a watchdog failure when WATCHDOG_USEC passes without a ping.
        let all = pings()
        let gaps = zip(all.dropFirst(), all).map { $0 - $1 }
        #expect((gaps.max() ?? 0) < 0.4, "\(all.count) pings, largest gap \(gaps.max() ?? 0) s: not every half of WATCHDOG_USEC\n\(socket.transcript)")
        #expect(socket.messages.filter { $0.has("WATCHDOG") }.allSatisfy { $0.text == "WATCHDOG=1" },
                "a watchdog ping is the datagram WATCHDOG=1\n\(socket.transcript)")

        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")
        #expect(Self.lifecycle(socket.messages) == ["READY=1", "STOPPING=1"], "\(socket.transcript)")
        Self.expectWellFormed(socket, from: agent)
    }

    /// A full pass on a big tree takes longer than WATCHDOG_USEC; the scan holds the
    /// manager all that time, yet pings go on (it beats as it walks) and no gap reaches
    /// WATCHDOG_USEC, which is when systemd would kill the service.
    @Test func fullPassesLongerThanWatchdogUsecKeepThePingsGoing() async throws {
        // 105,000 entries: on tmpfs they cost seconds to make and mirror, on a disk minutes.
        let sandbox = try Sandbox(in: access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")
        for d in 0..<5000 {
            let dir = sandbox.source / "d\(d)"
            try FS.mkdirs(dir)
            for f in 0..<20 { try FS.writeFile(dir / "f\(f)", "") }
        }
        let synced = try sandbox.sync()
        try #require(synced.status == 0, "\(synced)")
        let socket = try NotifySocket(.path, directory: sandbox.root)
        let agent = try sandbox.spawnRun(["-v"], environment: ["NOTIFY_SOCKET": socket.address, "WATCHDOG_USEC": "400000"])
        func passes() -> [Double] {
            agent.stderrLines.compactMap { line -> Double? in
                guard line.hasPrefix("keepsync: debug: full pass: nothing to repair"), let r = line.range(of: " checked in ") else { return nil }
                let words = line[r.upperBound...].split(separator: " ")
                guard words.count >= 2, let n = Double(words[0]) else { return nil }
                return words[1].hasPrefix("ms") ? n / 1000 : n
            }
        }
        let ready = await socket.waitFor(.seconds(60)) { $0.has("READY") }
        try #require(ready != nil, "no READY=1\n\(socket.transcript)\n\(agent.diagnostics)")
        agent.send(SIGUSR1)
        let twoPasses = await eventually(timeout: .seconds(60)) { passes().count >= 2 }
        try #require(twoPasses, "the startup pass and the SIGUSR1 pass were not both logged\n\(agent.diagnostics)")
        let longest = passes().max() ?? 0
        if longest < 0.5 {
            try Test.cancel("the longest full pass took \(longest) s here, too short to outlast WATCHDOG_USEC (0.4 s) and show anything")
        }
        let pings = socket.messages.filter { $0.has("WATCHDOG") }.compactMap(\.sentAt).sorted()
        let gaps = zip(pings.dropFirst(), pings).map { $0 - $1 }
        #expect(pings.count >= 4 && (gaps.max() ?? 1) < 0.4,
                "\(pings.count) pings, largest gap \(gaps.max() ?? 0) s, passes \(passes()) s\n\(socket.transcript)")
        print("SdNotifyTests: full passes of \(passes()) s with WATCHDOG_USEC=0.4 s: \(pings.count) pings, largest gap \(gaps.max() ?? 0) s")
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")
    }

    @Test func aWatchdogPidNamingAnotherProcessMeansNoWatchdogPings() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let socket = try NotifySocket(.abstract, directory: sandbox.root)
        // The test runner is certainly another process than the agent.
        let agent = try sandbox.spawnRun(environment: ["NOTIFY_SOCKET": socket.address, "WATCHDOG_USEC": "400000",
                                                         "WATCHDOG_PID": "\(getpid())"])
        let readyIndex = await socket.waitFor(.seconds(30)) { $0.has("READY") }
        let r = try #require(readyIndex, "no READY=1: the socket works, the watchdog check proves nothing otherwise\n\(socket.transcript)\n\(agent.diagnostics)")
        let readyAt = socket.messages[r].at
        let pinged = await eventually(timeout: .milliseconds(1200), every: .milliseconds(5)) {
                return socket.messages.contains { $0.has("WATCHDOG") }
        }
        #expect(!pinged, "WATCHDOG=1 sent although WATCHDOG_PID=\(getpid()) is another process\n\(socket.transcript)")
        #expect(ContinuousClock.now - readyAt >= .seconds(1))
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")
        Self.expectWellFormed(socket, from: agent)
    }

    @Test func aSighupWithAnInvalidConfigurationStillEndsInReadyAfterReloading() async throws {
        let sandbox = try Sandbox()
        let config = sandbox.root / "keepsync.conf"
        try FS.writeFile(config, "exclude = *.tmp\n")
        try FS.writeFile(sandbox.source / "keep.txt", "keep\n")
        let socket = try NotifySocket(.path, directory: sandbox.root)
        let agent = try sandbox.spawnRun(["--config", config], environment: ["NOTIFY_SOCKET": socket.address])
        let readyIndex = await socket.waitFor(.seconds(30)) { $0.has("READY") }
        let r = try #require(readyIndex, "no READY=1\n\(socket.transcript)\n\(agent.diagnostics)")

        try FS.writeFile(config, "exclude = *.tmp\nno_such_key = 1\n")
        agent.send(SIGHUP)
        let reloadIndex = await socket.waitFor(.seconds(10), from: r + 1) { $0.has("RELOADING") }
        let h = try #require(reloadIndex, "no RELOADING=1 after SIGHUP\n\(socket.transcript)\n\(agent.diagnostics)")
        #expect(socket.messages[h].value("MONOTONIC_USEC").flatMap(UInt64.init) != nil, "\(socket.messages[h])")
        let readyAgain = await socket.waitFor(.seconds(10), from: h + 1) { $0.has("READY") }
        #expect(readyAgain != nil, "no READY=1 after RELOADING=1 with an invalid configuration: `systemctl reload` would hang\n\(socket.transcript)\n\(agent.diagnostics)")
        #expect(agent.poll() == nil, "the agent ended after an invalid configuration\n\(agent.diagnostics)")
        let reported = await eventually(timeout: .seconds(5)) {
            agent.stderrLines.contains { $0.contains("keepsync: error:") && $0.contains("\(ByteEscaping.escape(config)):2") }
        }
        #expect(reported, "the invalid line is not reported\n\(agent.diagnostics)")

        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")
        #expect(Self.lifecycle(socket.messages) == ["READY=1", "RELOADING=1", "READY=1", "STOPPING=1"], "\(socket.transcript)")
        Self.expectWellFormed(socket, from: agent)
    }

    /// A SIGTERM that lands while a SIGHUP is being handled wins: STOPPING=1 is the last
    /// lifecycle message (no READY=1 after it) and the agent exits 0. Both signals are
    /// queued while the agent is stopped, so they are handled back to back; ten rounds.
    @Test func aSigtermDuringAReloadIsNeverFollowedByReady() async throws {
        var orders: [String: Int] = [:]
        for round in 0..<10 {
            let sandbox = try Sandbox()
            try sandbox.buildSmallSource()
            let socket = try NotifySocket(.path, directory: sandbox.root)
            let agent = try sandbox.spawnRun(environment: ["NOTIFY_SOCKET": socket.address])
            let ready = await socket.waitFor(.seconds(30)) { $0.has("READY") }
            try #require(ready != nil, "no READY=1\n\(socket.transcript)\n\(agent.diagnostics)")
            agent.send(SIGSTOP)
            agent.send(SIGHUP)
            if round % 2 == 1 { usleep(UInt32(round) * 200) }
            agent.send(SIGTERM)
            agent.send(SIGCONT)
            let status = await agent.waitForExit(timeout: .seconds(10))
            #expect(status == 0, "round \(round): exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")
            let lifecycle = Self.lifecycle(socket.messages)
            orders[lifecycle.joined(separator: " "), default: 0] += 1
            #expect(lifecycle.last == "STOPPING=1" && lifecycle.filter { $0 == "STOPPING=1" }.count == 1,
                    "round \(round): \(lifecycle)\n\(socket.transcript)")
        }
        print("SdNotifyTests: SIGHUP+SIGTERM lifecycles: \(orders)")
    }

    /// READY=1 means "the initial sync is done" even when a SIGHUP (a `kill -HUP`, a
    /// reload) lands while that sync is still running.
    @Test func aSighupDuringTheInitialSyncDoesNotAnnounceReadyBeforeTheSyncIsDone() async throws {
        let sandbox = try Sandbox()
        try sandbox.writeManyFiles(4000)
        let socket = try NotifySocket(.path, directory: sandbox.root)
        let agent = try sandbox.spawnRun(environment: ["NOTIFY_SOCKET": socket.address])
        // Caught in the act: as soon as the first copies land, freeze the agent, check the
        // sync is unfinished, queue SIGHUP and let it go on. (A blocking poll: a busy task
        // pool must not make the test look too late.)
        let copying = eventuallyBlocking(timeout: .seconds(30), every: .microseconds(500)) {
            ((try? FS.list(sandbox.mirror / "many/a"))?.count ?? 0) > 0 || agent.poll() != nil
        }
        try #require(copying && agent.poll() == nil, "the initial copy never started\n\(agent.diagnostics)")
        agent.send(SIGSTOP)
        let mirroredAtSighup = sandbox.mirroredManyFiles()
        agent.send(SIGHUP)
        agent.send(SIGCONT)
        try #require(mirroredAtSighup < 4000, "the initial sync finished before SIGHUP: the test proves nothing")
        let readyIndex = await socket.waitFor(.seconds(60)) { $0.has("READY") }
        let mirroredAtReady = sandbox.mirroredManyFiles()
        let r = try #require(readyIndex, "no READY=1\n\(socket.transcript)\n\(agent.diagnostics)")
        #expect(mirroredAtReady == 4000,
                "the first READY=1 (datagram \(r): \(socket.messages[r])) came while the initial sync was still running (SIGHUP at \(mirroredAtSighup) of 4000 files copied; \(mirroredAtReady) at READY=1)\n\(socket.transcript)")
        let converged = await eventually(timeout: .seconds(60), every: .milliseconds(50)) { sandbox.mirroredManyFiles() == 4000 }
        #expect(converged, "\(sandbox.mirroredManyFiles()) of 4000 files mirrored\n\(agent.diagnostics)")
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")
        Self.expectWellFormed(socket, from: agent)
    }

    /// A notify socket that is bound but never read (a stuck or frozen manager): the
    /// kernel queues only `net.unix.max_dgram_qlen` datagrams (10 by default), then a
    /// blocking send waits for ever. Notifications are best effort; they must not keep
    /// the agent from mirroring or from stopping on SIGTERM.
    @Test func aNotifySocketNobodyReadsDoesNotWedgeTheAgent() async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        let socket = try NotifySocket(.path, directory: sandbox.root, reading: false)
        // A ping every 50 ms fills the queue within a second.
        let agent = try sandbox.spawnRun(environment: ["NOTIFY_SOCKET": socket.address, "WATCHDOG_USEC": "100000"])
        let watching = await eventually(timeout: .seconds(10)) {
            sandbox.statusJSON?["state"] as? String == "watching" || agent.poll() != nil
        }
        #expect(watching && agent.poll() == nil,
                "not watching 10 s after start (exit \(agent.exitStatus.map(String.init) ?? "none")): wedged sending to a notify socket nobody reads?\nstatus.json: \(sandbox.statusJSON.map { "\($0)" } ?? "none")\n\(agent.diagnostics)")
        if watching {
            // Give the queue time to fill up (10 datagrams at 20 a second).
            _ = await eventually(timeout: .seconds(1)) { agent.poll() != nil }
            try FS.writeFile(sandbox.source / "later.txt", "written after the notify queue filled up\n")
            let mirrored = await eventually(timeout: .seconds(10)) { sandbox.differencesFromSource().isEmpty }
            #expect(mirrored, "mirroring stalled behind a full notify socket:\n\(sandbox.differencesFromSourceSummary())\n\(agent.diagnostics)")
        }
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0,
                "exit \(status.map(String.init) ?? "none: still running 10 s after SIGTERM, blocked sending to a notify socket nobody reads")\n\(agent.diagnostics)")
        withExtendedLifetime(socket) {}
    }

    /// With `$NOTIFY_SOCKET` unset, or naming a socket nobody listens on, the agent
    /// mirrors and stops exactly as usual.
    @Test(arguments: ["unset", "a path nobody binds", "an abstract name nobody binds", "a relative path"])
    func withoutAListeningNotifySocketNothingBreaks(_ what: String) async throws {
        let sandbox = try Sandbox()
        try sandbox.buildSmallSource()
        var env: [String: String] = [:]
        switch what {
        case "a path nobody binds": env["NOTIFY_SOCKET"] = ByteEscaping.escape(sandbox.root / "nobody.sock")
        case "an abstract name nobody binds": env["NOTIFY_SOCKET"] = "@keepsync-nobody-\(UInt32.random(in: 0...UInt32.max))"
        case "a relative path": env["NOTIFY_SOCKET"] = "relative.sock"
        default: break
        }
        let agent = try sandbox.spawnRun(environment: env, removing: what == "unset" ? ["NOTIFY_SOCKET"] : [])
        let watching = await eventually(timeout: .seconds(30)) {
            sandbox.statusJSON?["state"] as? String == "watching" || agent.poll() != nil
        }
        #expect(watching && agent.poll() == nil, "not watching (exit \(agent.exitStatus.map(String.init) ?? "none"))\n\(agent.diagnostics)")
        try FS.writeFile(sandbox.source / "later.txt", "written while watching\n")
        let converged = await eventually(timeout: .seconds(20)) { sandbox.differencesFromSource().isEmpty }
        #expect(converged, "\(sandbox.differencesFromSourceSummary())\n\(agent.diagnostics)")
        agent.send(SIGTERM)
        let status = await agent.waitForExit(timeout: .seconds(10))
        #expect(status == 0, "exit \(status.map(String.init) ?? "none")\n\(agent.diagnostics)")
        #expect(!agent.stderrLines.contains { $0.hasPrefix("keepsync: error: ") || $0.hasPrefix("keepsync: warning: ") }, "errors or warnings\n\(agent.diagnostics)")
    }
}
