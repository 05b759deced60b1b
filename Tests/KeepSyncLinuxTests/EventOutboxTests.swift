import KeepSyncCore
@testable import KeepSyncLinux
import Testing

/// The bounded event stream: a consumer that does not read sees the buffer's limit of
/// events, then one `.rescan`, never an unbounded queue nor a silent gap.
@Suite("EventOutbox")
struct EventOutboxTests {
    static func event(_ i: Int) -> WatchEvent { .changed(RelativePath("f\(i)")) }

    @Test("a flood into a stream nobody reads stays at the limit, then one rescan covers the rest")
    func floodDegradesToRescan() async {
        let (stream, continuation) = AsyncStream.makeStream(of: WatchEvent.self, bufferingPolicy: .bufferingOldest(64))
        let outbox = EventOutbox(continuation, logger: .silent)
        for i in 0..<100_000 { outbox.emit(Self.event(i)) }
        #expect(outbox.owesRescan)
        #expect(!outbox.settleRescan(), "the stream is still full")
        var iterator = stream.makeAsyncIterator()
        var received: [WatchEvent] = []
        for _ in 0..<64 { if let e = await iterator.next() { received.append(e) } }
        #expect(received == (0..<64).map(Self.event))
        #expect(outbox.settleRescan())
        #expect(await iterator.next() == .rescan(reason: EventOutbox.overflowReason))
        outbox.emit(Self.event(-1))
        outbox.finish()
        #expect(await iterator.next() == Self.event(-1))
        #expect(await iterator.next() == nil, "nothing else was queued")
    }

    @Test("while the rescan is owed, new events are covered by it, not queued")
    func eventsWhileOwed() async {
        let (stream, continuation) = AsyncStream.makeStream(of: WatchEvent.self, bufferingPolicy: .bufferingOldest(2))
        let outbox = EventOutbox(continuation, logger: .silent)
        for i in 0..<3 { outbox.emit(Self.event(i)) }
        var iterator = stream.makeAsyncIterator()
        _ = await iterator.next()
        outbox.emit(Self.event(3))  // room for one now, but the rescan is owed first
        #expect(outbox.settleRescan())
        outbox.finish()
        var rest: [WatchEvent] = []
        while let e = await iterator.next() { rest.append(e) }
        #expect(rest == [Self.event(1), .rescan(reason: EventOutbox.overflowReason)])
    }

    @Test("a consumer that keeps up gets every event and no rescan")
    func keepingUp() async {
        let (stream, continuation) = AsyncStream.makeStream(of: WatchEvent.self, bufferingPolicy: .bufferingOldest(4))
        let outbox = EventOutbox(continuation, logger: .silent)
        var iterator = stream.makeAsyncIterator()
        for i in 0..<100 {
            outbox.emit(Self.event(i))
            #expect(await iterator.next() == Self.event(i))
        }
        #expect(!outbox.owesRescan)
    }
}
