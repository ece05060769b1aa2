// A burst of changes to an `@Observable` model while a delivery is due:
// the burst's later changes cancel the tracking, so that they cost no
// report (see `_ObservableTrackerStateMachine`). What users rely on holds
// through it: no change is lost, and the model's death ends the relations
// without delivering anything.
//
// A link replaced inside a tracked read stays alive in the tests (`replaced`)
// past the read: a tracked read that drops the last reference to an object it
// read gets its tracking installed in that dead object's registrar storage,
// where nothing can cancel it (Observation gives the tracking's handle only
// when it reports), so Observation's storage of it leaks (ARCHITECTURE.md,
// "What Observation cannot let go"). These tests are about deliveries.

import Dispatch
import Observation
import Synchronization
import Testing

@testable import SafeObserve

@Observable
// @unchecked Sendable: each test changes it from one thread at a time, but
// for the store its getter makes (see `slowCount`).
private final class Meter: @unchecked Sendable {
    var count = 0
    /// Set once: the next read of `slowCount` stores this in `count` after
    /// reading it, as a store made on another thread at that moment would.
    @ObservationIgnored let storeAfterRead = _Mutex<Int?>(nil)
    @ObservationIgnored let lifetime: LifetimeCounter?

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }
    deinit { lifetime?.didDeinit() }

    var link = MeterLink(0)
    /// Set once: the next read of `linkValue` stores this in the link it
    /// read, right after reading it.
    @ObservationIgnored let storeToLinkAfterRead = _Mutex<Int?>(nil)
    /// Set once: the next read of `linkValue` replaces the link with this,
    /// right after reading it.
    @ObservationIgnored let replaceLinkAfterRead = _Mutex<MeterLink?>(nil)

    /// `link.value`, with the stores above right after the read (once each).
    var linkValue: Int {
        let current = link
        let read = current.value
        if let stored = storeToLinkAfterRead.withLock({ value in
            defer { value = nil }
            return value
        }) {
            current.value = stored
        }
        if let next = replaceLinkAfterRead.withLock({ value in
            defer { value = nil }
            return value
        }) {
            link = next
        }
        return read
    }

    /// `count`, with a store of `storeAfterRead` right after the read (once).
    var slowCount: Int {
        let read = count
        if let stored = storeAfterRead.withLock({ value in
            defer { value = nil }
            return value
        }) {
            count = stored
        }
        return read
    }
}

@Observable
// @unchecked Sendable: each test changes it from one thread at a time.
private final class MeterLink: @unchecked Sendable {
    var value: Int
    init(_ value: Int) { self.value = value }
}

/// An actor on an executor the test can hold, to make a delivery wait.
private actor MeterHost {
    let executor = HoldableExecutor()
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    func observe(
        _ keyPath: any KeyPath<Meter, Int> & Sendable, of meter: Meter, by listener: Peer, _ captured: Captured?,
        _ told: EventLog
    ) {
        meter.safeObserve(keyPath, by: listener, options: [.old, .new]) { _, _, change in
            _ = captured
            told.record(describe(change))
        }
    }

    func sync() {}
}

/// Waits until `told`'s last entry is `entry` (what these tests catch is a
/// delivery that never comes). As long as ``eventually`` waits: the job
/// starts as a task on the cooperative pool before it hops to the actor's
/// executor, and the tests running in parallel may keep that pool busy for
/// many seconds (a delivery waited longer than a ten-second bound once in a
/// local CI run).
private func waitForLast(_ entry: String, in told: EventLog) async {
    _ = await eventually { told.entries.last == entry }
}

@Suite("Bursts of changes to an @Observable model", .serialized)  // one counts the sentinels of `Meter`
struct ObservableModelBurstTests {
    /// The burst's second change cancels the tracking while the job waits;
    /// the job then reads the key path, and a change stored right after
    /// that read, before the job's new tracking is installed, reports to no
    /// tracking at all. It is delivered all the same (the job reads the key
    /// path again once its tracking is installed).
    @Test func aChangeStoredWhileTheJobTracksAgain_afterABurst_isDelivered() async {
        let meter = Meter()
        let listener = Peer()
        let host = MeterHost()
        let told = EventLog()
        await host.observe(\.slowCount, of: meter, by: listener, nil, told)

        host.executor.hold()
        meter.count = 1  // schedules the job, which waits
        meter.count = 2  // a burst: cancels the tracking
        meter.storeAfterRead.withLock { $0 = 3 }
        host.executor.release()
        await host.sync()

        // The job tells 2, then runs again and tells 3.
        await waitForLast("2->3", in: told)
        #expect(meter.count == 3)
        #expect(told.entries == ["0->2", "2->3"], "the store right after the job's read was lost: \(told.entries)")
        withExtendedLifetime(listener) {}
    }

    /// A change replaced the chain's link; right after the job read the new
    /// link, and before its tracking was installed, the new link changed
    /// (the trackings installed follow the old link). The job reads again,
    /// runs again, and the new link stays tracked.
    @Test func aNewLinkChangedRightAfterTheJobsRead_isDelivered_andStaysTracked() async {
        let meter = Meter()
        let listener = Peer()
        let host = MeterHost()
        let told = EventLog()
        await host.observe(\.linkValue, of: meter, by: listener, nil, told)

        host.executor.hold()
        meter.link = MeterLink(5)
        meter.storeToLinkAfterRead.withLock { $0 = 6 }
        host.executor.release()
        await host.sync()
        await waitForLast("5->6", in: told)
        meter.link.value = 7
        await waitForLast("6->7", in: told)
        #expect(told.entries == ["0->5", "5->6", "6->7"], "told \(told.entries)")
        withExtendedLifetime(listener) {}
    }

    /// After a burst (its tracking cancelled), the link is replaced right
    /// after the job's read, before its tracking is installed: the job's
    /// second read sees it, and the job that runs again tracks the new
    /// link, so its later changes are delivered (not lost for good).
    @Test func aLinkReplacedRightAfterTheJobsRead_afterABurst_isTrackedFromThen() async {
        let meter = Meter()
        let listener = Peer()
        let host = MeterHost()
        let told = EventLog()
        await host.observe(\.linkValue, of: meter, by: listener, nil, told)

        host.executor.hold()
        meter.link.value = 1
        meter.link.value = 2  // a burst: cancels the tracking
        // Kept alive past the job's tracked read (see the file's header).
        let replaced = meter.link
        meter.replaceLinkAfterRead.withLock { $0 = MeterLink(9) }
        host.executor.release()
        await host.sync()
        await waitForLast("2->9", in: told)
        meter.link.value = 10
        await waitForLast("9->10", in: told)
        #expect(told.entries == ["0->2", "2->9", "9->10"], "told \(told.entries)")
        withExtendedLifetime((listener, replaced)) {}
    }

    /// A job's tracking followed a link replaced during its read, and a
    /// newer tracking replaced it without its having reported: it stays
    /// installed in the replaced link's registrar (Observation gives no way
    /// to cancel it). It must not keep SafeObserve's side alive: once the
    /// model dies, its sentinel goes, with the replaced link still alive.
    @Test func aTrackingReplacedBeforeItReported_keepsNothingOfTheModelsAlive() async {
        let captures = LifetimeCounter()
        var meter: Meter? = Meter()
        let listener = Peer()
        let host = MeterHost()
        let told = EventLog()
        await host.observe(\.linkValue, of: meter!, by: listener, Captured(captures), told)
        host.executor.hold()
        meter!.link.value = 1
        meter!.link.value = 2
        let replaced = meter!.link
        meter!.replaceLinkAfterRead.withLock { $0 = MeterLink(9) }
        host.executor.release()
        await host.sync()
        await waitForLast("2->9", in: told)
        #expect(_ModelSentinels._count(ofModelsOf: Meter.self) == 1)

        meter = nil
        #expect(await eventually { captures.deinitCount == 1 }, "the handler was kept after the model's death")
        #expect(
            await eventually { _ModelSentinels._count(ofModelsOf: Meter.self) == 0 },
            "the replaced link's registrar keeps the model's sentinel")
        withExtendedLifetime((listener, replaced)) {}
    }

    /// The first registration's tracked read sees the link replaced right
    /// after it read the old one, before its tracking was installed (which
    /// follows the old link): it reads again, and the job it schedules
    /// tracks the new link, so the new link's changes are delivered.
    @Test func aLinkReplacedRightAfterTheFirstRegistrationsRead_isTrackedFromThen() async {
        let meter = Meter()
        let listener = Peer()
        let host = MeterHost()
        let told = EventLog()
        let replaced = meter.link
        meter.replaceLinkAfterRead.withLock { $0 = MeterLink(9) }
        await host.observe(\.linkValue, of: meter, by: listener, nil, told)
        await waitForLast("0->9", in: told)
        meter.link.value = 10
        await waitForLast("9->10", in: told)
        #expect(told.entries == ["0->9", "9->10"], "told \(told.entries)")
        withExtendedLifetime((listener, replaced)) {}
    }

    /// The model dies after a burst, while its delivery waits for the busy
    /// actor: the burst cancelled the tracking that held the model's
    /// sentinel, so the relation ends within the model's death watch (half
    /// a second), not in the model's deinit; its handler and captures are
    /// released then, and nothing is delivered.
    @Test func theModelDies_afterABurst_whileItsDeliveryWaits_endsTheRelation_andDeliversNothing() async {
        let models = LifetimeCounter()
        let captures = LifetimeCounter()
        let listener = Peer()
        let host = MeterHost()
        let told = EventLog()
        var meter: Meter? = Meter(lifetime: models)
        weak let weakMeter = meter
        await host.observe(\.count, of: meter!, by: listener, Captured(captures), told)
        #expect(captures.liveCount == 1)

        host.executor.hold()
        for value in 1...10 { meter!.count = value }
        meter = nil
        #expect(weakMeter == nil, "the relation kept the model alive")
        #expect(models.deinitCount == 1)
        #expect(await eventually { captures.deinitCount == 1 }, "the handler was kept after the model's death")

        host.executor.release()
        await host.sync()
        #expect(told.entries.isEmpty, "delivered after the model died: \(told.entries)")
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
        #expect(captures.liveCount == 0)
    }

    /// A burst while the delivery waits is one delivery, from the value
    /// told last to the value after the burst; the changes after it are
    /// reported again (the job tracked again).
    @Test func aBurst_isOneDelivery_andLaterChangesAreReportedAgain() async {
        let meter = Meter()
        let listener = Peer()
        let host = MeterHost()
        let told = EventLog()
        await host.observe(\.count, of: meter, by: listener, nil, told)

        host.executor.hold()
        for value in 1...100 { meter.count = value }
        host.executor.release()
        await host.sync()
        #expect(await eventually { told.entries == ["0->100"] }, "told \(told.entries)")

        meter.count = 101
        #expect(await eventually { told.entries == ["0->100", "100->101"] }, "told \(told.entries)")
        withExtendedLifetime(listener) {}
    }
}
