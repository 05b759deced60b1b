/// The manager's run loop on its thread: events in, waits, the alarm, stopping.
extension SyncManager {
    // MARK: Driving

    /// Processes what is due, as events arrive through `receive`, until `stop`;
    /// returns after the copies in flight ended and the records are appended.
    public nonisolated func run() async {
        // Preferring the actor's executor, the loop resumes from its waits right there,
        // not first on the global pool (a continuation's resume goes to the task's executor).
        await withTaskExecutorPreference(thread) { await self.loop() }
    }

    func loop() async {
        while !stopping {
            processDue()
            if stopping { break }
            // Something due again at once: let copy completions and events waiting for the
            // actor in first (a slow pass must not starve them). Else the wait lets them in.
            let due = nextDue()
            if let due, due <= now { await Task.yield() }
            await sleep(until: due)
        }
        alarm?.task.cancel()
        alarm = nil
        while !copies.nothingRunning { await waitForSignal() }
        finishRound()
        await drainRecords()
        // One more try for appends that failed.
        if recordWriter.hasBacklog {
            flushRecords()
            await drainRecords()
        }
    }

    /// Feeds a watcher's events to `receive` until the stream ends (`feed` with this
    /// manager alone).
    public nonisolated func consume(_ stream: AsyncStream<WatchEvent>) async {
        await Self.feed(stream, to: [self])
    }

    /// Feeds one watcher's events to every manager in `managers`, from a thread of its
    /// own, each through its inbox (`post`): the events that come while a manager works (a
    /// round blocked on a remote mirror) are taken together by its next round or hop. (Read
    /// on the actor's thread, each event was one round: the stream's reader and the loop
    /// took turns there, and a remote mirror's round costs a round trip.)
    public nonisolated static func feed(_ stream: AsyncStream<WatchEvent>, to managers: [SyncManager]) async {
        let reader = ManagerThread(label: "keepsync.events")
        defer { reader.close() }
        await withTaskExecutorPreference(reader) {
            for await event in stream {
                for manager in managers { manager.post(event) }
            }
        }
    }

    /// Feeds one watcher's events to the managers `fanout` holds at each event (as `feed`
    /// to an array): a link that pauses leaves it, and its full pass on return covers what
    /// it missed.
    public nonisolated static func feed(_ stream: AsyncStream<WatchEvent>, to fanout: WatchFanout<C>) async {
        let reader = ManagerThread(label: "keepsync.events")
        defer { reader.close() }
        await withTaskExecutorPreference(reader) {
            for await event in stream {
                for manager in fanout.managers { manager.post(event) }
            }
        }
    }

    /// The door events enter the manager by from outside its actor: into the events
    /// inbox, taken by the next round (`processDue`) or by the hop the first post of a
    /// batch schedules, whichever comes first.
    public nonisolated func post(_ event: WatchEvent) {
        guard events.post(event) else { return }
        Task(executorPreference: thread) { await self.takeEvents() }
    }

    /// Receives the events the inbox holds, in the order they came.
    func takeEvents() {
        for event in events.take() { receive(event) }
    }

    /// Hands a copy work item's results to the actor; the first of a batch schedules the hop.
    nonisolated func hand(_ results: CopyResults) {
        guard inbox.post(results) else { return }
        Task(executorPreference: thread) { await self.takeInbox() }
    }

    /// Takes the finished copies the inbox holds, in the order they came.
    func takeInbox() {
        for results in inbox.take() { copiesFinished(results) }
    }

    /// True once `stop` was called or a full pass found the root lost (`run` returns).
    public var hasStopped: Bool { stopping }

    /// Makes `run` return after the copies in flight end.
    public func stop() {
        stopping = true
        signal()
    }

    func signal() {
        if let c = wakeContinuation {
            wakeContinuation = nil
            c.resume()
        } else {
            woken = true
        }
    }

    func waitForSignal() async {
        if woken {
            woken = false
            return
        }
        // The body may run after other jobs of the actor (the runtime can enqueue it as a
        // job of its own on our thread: seen 1 in 20 under load), so a signal that came
        // meanwhile is looked for again there, not lost.
        await withCheckedContinuation { c in
            if woken { c.resume() } else { wakeContinuation = c }
        }
        woken = false
    }

    /// Waits for a signal or `due`. One alarm stays armed across waits: it is replaced
    /// only by an earlier deadline (a later one finds the loop awake early, which looks
    /// again), so an event does not cost a timer task each.
    func sleep(until due: Duration?) async {
        guard let due else { return await waitForSignal() }
        if due <= now { return }
        if woken {
            woken = false
            return
        }
        if alarm == nil || alarm!.at > due {
            alarm?.task.cancel()
            alarm = (due, Self.startAlarm(self, clock: clock, at: origin.advanced(by: due), due: due, on: thread))
        }
        await waitForSignal()
    }

    /// A task that signals `manager` at `deadline`, on `executor` (where the manager runs),
    /// not isolated to it: its sleep and a cancellation never hop onto the actor.
    nonisolated static func startAlarm(_ manager: SyncManager, clock: C, at deadline: C.Instant, due: Duration,
                                       on executor: (any TaskExecutor)?) -> Task<Void, Never> {
        Task(executorPreference: executor) {
            try? await clock.sleep(until: deadline, tolerance: nil)
            if !Task.isCancelled { await manager.alarmRang(due) }
        }
    }

    func alarmRang(_ due: Duration) {
        if alarm?.at == due { alarm = nil }
        signal()
    }
}
