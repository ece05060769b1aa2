// A `SafeObserver` sender's death ends the hub's relations filtered on it
// inside its deinit, releasing their handlers there, whether or not posts
// wait for the handlers' actors; the finalizers that do it follow the
// channels.

import Dispatch
import Synchronization
import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let reading = NotificationName("NotificationHubSenderDeathTests.reading")
}

/// A sender that adopts `SafeObserver`, counting its lifetime.
private final class Sensor: SafeObserver, Sendable {
    let observerLifetime = ObserverLifetime()
    let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }
}

/// An actor on an executor the test can hold, as a handler's isolation.
private actor Station {
    let executor = HoldableExecutor()
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// Registers from the actor: the handler is isolated to it.
    func observe(_ hub: NotificationHub, from sensor: Sensor, by listener: Peer, _ captured: Captured, _ log: EventLog)
    {
        hub.observe(.reading, from: sensor, by: listener) { _, notification in
            _ = captured
            log.record("\(notification.payload)")
        }
    }

    func sync() {}
}

@Suite("A SafeObserver sender's death ends the hub's relations filtered on it")
struct NotificationHubSenderDeathTests {
    /// Where the handler runs, and how the test keeps it busy.
    enum Isolation: String, CaseIterable, Sendable {
        /// An actor on a custom executor, held (its jobs wait without a thread).
        case customExecutor
        /// An actor listener on a custom executor, held.
        case actorListener
        /// The main actor, its thread blocked for the moment.
        case mainActor
    }

    /// No post waits: the relations of both filtered forms (a name, every
    /// name) end in the sender's deinit, before anything asks about them.
    @Test func aSafeObserverSenderThatDies_endsItsFilteredRelations_andReleasesTheirHandlers_inItsDeinit() {
        let hub = NotificationHub()
        let listener = Listener()
        let captures = LifetimeCounter()
        let senders = LifetimeCounter()
        var sensor: Sensor? = Sensor(lifetime: senders)
        weak let weakSensor = sensor
        do {
            let captured = Captured(captures)
            hub.observe(.reading, from: sensor!, by: listener, isolation: nil) { _, _ in _ = captured }
            hub.observeEvery(from: sensor!, by: listener, isolation: nil) { _, _ in _ = captured }
        }
        #expect(hub._senderChannelCount == 2)
        sensor = nil
        #expect(weakSensor == nil, "the relations kept the sender alive")
        #expect(senders.deinitCount == 1)
        // Checked before anything asks about the relations (asking ends them).
        #expect(captures.deinitCount == 1, "handlers kept after the sender's death")
        #expect(hub._senderChannelCount == 0)
        #expect(hub.relations().isEmpty)
    }

    /// Posts from the sender wait for the handler's busy actor; the sender
    /// dies: the relation ends in its deinit, the handler and its captures
    /// are released at once, and the waiting posts are never delivered.
    @Test(arguments: Isolation.allCases)
    func theSenderDies_whileItsPostsWaitForTheBusyActor_releasesTheHandlerAtOnce(isolation: Isolation) async {
        let hub = NotificationHub()
        let captures = LifetimeCounter()
        let senders = LifetimeCounter()
        let log = EventLog()
        let listener = Peer()
        let station = Station()
        var sensor: Sensor? = Sensor(lifetime: senders)
        var token: ObservationToken?
        do {
            let captured = Captured(captures)
            switch isolation {
            case .customExecutor:
                await station.observe(hub, from: sensor!, by: listener, captured, log)
            case .actorListener:
                token = hub.observe(.reading, from: sensor!, by: station) { _, notification in
                    _ = captured
                    log.record("\(notification.payload)")
                }
            case .mainActor:
                token = await MainActor.run { [sensor] in
                    hub.observe(.reading, from: sensor!, by: listener) { _, notification in
                        _ = captured
                        log.record("\(notification.payload)")
                    }
                }
            }
        }
        #expect(captures.liveCount == 1)

        // The handler's actor is busy: the posts wait for it.
        let releaseMain = DispatchSemaphore(value: 0)
        if isolation == .mainActor {
            #expect(await holdMainActor(until: releaseMain), "the main actor never ran the blocking job")
        } else {
            station.executor.hold()
        }
        for payload in 1...3 { hub.post(.reading, payload: payload, from: sensor!) }
        sensor = nil

        #expect(senders.deinitCount == 1)
        // Checked before anything asks about the relation (asking ends it).
        #expect(captures.deinitCount == 1, "\(isolation): handler kept after the sender's death")

        releaseMain.signal()
        station.executor.release()
        await station.sync()
        await MainActor.run {}
        #expect(log.entries.isEmpty, "\(isolation): delivered after the sender died: \(log.entries)")
        #expect(token?.isActive != true)
        #expect(captures.liveCount == 0)
        #expect(hub.relations().isEmpty)
    }

    /// The finalizers on a long-lived sender follow the hub's channels:
    /// those of hubs that died, and of channels the sweep reclaimed, are
    /// gone.
    @Test func aLongLivedSendersFinalizers_followTheChannelsFilteredOnIt() throws {
        let sensor = Sensor()
        let listener = Listener()
        let proxy = try #require(_ListenerProxy.ofSafeObserver(sensor))
        for _ in 0..<200 {
            let hub = NotificationHub()
            hub.observe(.reading, from: sensor, by: listener, isolation: nil) { _, _ in }
            hub.observeEvery(from: sensor, by: listener, isolation: nil) { _, _ in }
        }
        #expect(proxy._finalizerCount == 0, "dead hubs left finalizers on the sender")

        let hub = NotificationHub()
        for _ in 0..<200 {
            hub.observe(.reading, from: sensor, by: listener, isolation: nil) { _, _ in }.invalidate()
            // A registration on another channel sweeps two channels.
            hub.observe(.reading, by: listener, isolation: nil) { _, _ in }.invalidate()
        }
        #expect(proxy._finalizerCount <= 1, "reclaimed channels left \(proxy._finalizerCount) finalizers")
        #expect(proxy._finalizerCount == (hub._senderChannelCount > 0 ? 1 : 0))
    }
}
