// When the hub's relations and sequences end: senders and listeners that
// die, channels left without relations.

import Synchronization
import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let watched = NotificationName("NotificationHubLifetimeTests.watched")
    fileprivate static let badge = NotificationName("NotificationHubLifetimeTests.badge")
}

/// Counts deinits.
private final class Deaths: Sendable {
    private let deinits = Atomic<Int>(0)
    var count: Int { deinits.load(ordering: .relaxed) }
    func died() { deinits.add(1, ordering: .relaxed) }
}

/// A plain class (not a `SafeObserver`): a sender or a listener.
private final class Plain: Sendable {
    let deaths: Deaths?
    init(deaths: Deaths? = nil) { self.deaths = deaths }
    deinit { deaths?.died() }
}

/// A listener that adopts `SafeObserver`.
private final class Opted: SafeObserver, Sendable {
    let observerLifetime = ObserverLifetime()
}

/// What a handler captures, to tell when the handler is released.
private final class Capture: Sendable {
    let deaths: Deaths
    init(_ deaths: Deaths) { self.deaths = deaths }
    deinit { deaths.died() }
}

/// Polls `condition` until it holds or `seconds` passed (never hangs).
private func within(
    seconds: Double, isolation: isolated (any Actor)? = #isolation, _ condition: () -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
    while !condition() {
        guard ContinuousClock.now < deadline else { return condition() }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

@Suite("NotificationHub lifetimes")
struct NotificationHubLifetimeTests {
    /// The documented bound is half a second; the test allows two on a
    /// loaded machine (the defect never finishes at all). The end of the
    /// relation is watched from this thread: finishing the sequence needs
    /// no thread of the cooperative pool, which other tests may keep busy.
    @Test(.timeLimit(.minutes(1)))
    func aSequenceFilteredOnAPlainSender_finishesSoonAfterTheSenderDies_withNoOtherActivity() async {
        let hub = NotificationHub()
        let senderDeaths = Deaths()
        var sender: Plain? = Plain(deaths: senderDeaths)
        let sequence = hub.notifications(named: .watched, from: sender!)
        let started = Flag()
        let finished = Flag()
        let consumer = Task {
            var iterator = sequence.makeAsyncIterator()
            started.set()
            while await iterator.next() != nil {}
            finished.set()
        }
        // The iterator observes before the sender dies (made after, it would
        // finish at once and prove nothing).
        #expect(await within(seconds: 5) { started.isSet })
        let channel = hub.state.withLock { $0.channel(NotificationName<Int>.watched.id, sender: sender!) }
        #expect(channel?.liveRelations().count == 1)
        sender = nil
        #expect(senderDeaths.count == 1, "the test must drop the sender's last reference")
        let ended = settles(within: 2) { channel?.liveRelations().isEmpty ?? true }
        #expect(ended, "notifications(named:from:) did not finish within 2 s of its plain sender's death")
        if !ended { consumer.cancel() }  // bounded either way
        await consumer.value
        #expect(finished.isSet)
        withExtendedLifetime(hub) {}
    }

    /// The watch of plain senders costs nothing while no sequence filtered
    /// on one exists: no thread runs, nothing is held. Its own process (an
    /// exit test): other suites make such sequences meanwhile.
    @Test func theWatchOfPlainSenders_runsOnlyWhileASequenceFilteredOnOneExists() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            await NotificationHubLifetimeTests.watchComesAndGoes()
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    /// Runs in the exit test's process, which nothing else uses.
    static func watchComesAndGoes() async {
        let hub = NotificationHub()
        let sender = Plain()
        final class Store: SafeObserver, Sendable {
            let observerLifetime = ObserverLifetime()
        }
        let store = Store()
        // Unfiltered, or on a SafeObserver: nothing to watch.
        var unwatched: [PostedNotifications<Int>.AsyncIterator]? = [
            hub.notifications(named: .watched).makeAsyncIterator(),
            hub.notifications(named: .watched, from: store).makeAsyncIterator(),
        ]
        expectInChild(_SenderWatch._status == (false, 0), "watching with no plain sender: \(_SenderWatch._status)")
        var watched: PostedNotifications<Int>.AsyncIterator? = hub.notifications(named: .watched, from: sender)
            .makeAsyncIterator()
        expectInChild(_SenderWatch._status == (true, 1), "not watching a plain sender: \(_SenderWatch._status)")
        watched = nil
        unwatched = nil
        expectInChild(_SenderWatch._status.senders == 0, "a dropped sequence's sender still watched")
        // The thread ends at its next probe.
        let deadline = ContinuousClock.now + .seconds(5)
        while _SenderWatch._status.isRunning, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        expectInChild(!_SenderWatch._status.isRunning, "the watching thread outlived every watched sequence")
        withExtendedLifetime((watched, unwatched, sender, store, hub)) {}
    }

    /// Notifications.md: a plain listener's relation ends at the next post
    /// that reaches it (or a sweep), releasing its handler then.
    @Test func aPlainListenersRelation_endsAtTheNextPostThatReachesIt() {
        let hub = NotificationHub()
        let captures = Deaths()
        var listener: Plain? = Plain()
        let token = hub.observe(.badge, by: listener!, isolation: nil) { [capture = Capture(captures)] _, _ in
            withExtendedLifetime(capture) {}
        }
        listener = nil
        hub.post(.badge, payload: 1)
        #expect(!token.isActive)
        #expect(settles { captures.count == 1 }, "the handler outlived the post that found its listener dead")
    }

    /// Notifications.md: a `SafeObserver` listener's relation ends inside
    /// its `deinit`, with nothing else happening.
    @Test func aSafeObserverListenersRelation_endsWhenItDies() {
        let hub = NotificationHub()
        let captures = Deaths()
        var listener: Opted? = Opted()
        let token = hub.observe(.badge, by: listener!, isolation: nil) { [capture = Capture(captures)] _, _ in
            withExtendedLifetime(capture) {}
        }
        listener = nil
        #expect(!token.isActive)
        #expect(captures.count == 1)
        #expect(hub.relations().isEmpty)
    }

    /// A post delivers to the observers registered when it began: one that
    /// a handler registers meanwhile receives the next post, on the name's
    /// channel as on the sender's.
    @Test func anObserverRegisteredDuringAPost_receivesTheNextPostOnly() {
        let hub = NotificationHub()
        let sender = Plain()
        let first = Plain()
        let late = Plain()
        let received = Mutex<[String]>([])
        hub.observe(.badge, by: first, isolation: nil) { _, notification in
            received.withLock { $0.append("first \(notification.payload)") }
            hub.observe(.badge, by: late, isolation: nil) { _, notification in
                received.withLock { $0.append("late \(notification.payload)") }
            }
            hub.observe(.badge, from: sender, by: late, isolation: nil) { _, notification in
                received.withLock { $0.append("late/sender \(notification.payload)") }
            }
        }
        hub.post(.badge, payload: 1, from: sender)
        hub.post(.badge, payload: 2, from: sender)
        #expect(received.withLock { $0 } == ["first 1", "first 2", "late 2", "late/sender 2"])
        withExtendedLifetime((sender, first, late)) {}
    }

    /// Channels whose relations all ended are reclaimed by the sweep that
    /// later channels' registrations make: the hub's tables follow the
    /// channels that have relations, after a peak.
    @Test func channelsLeftWithoutRelations_areReclaimedByLaterRegistrations() {
        let hub = NotificationHub()
        let listener = Plain()
        let names = (0..<1_000).map { NotificationName<Int>("NotificationHubLifetimeTests.peak.\($0)") }
        for name in names { hub.observe(name, by: listener, isolation: nil) { _, _ in } }
        #expect(hub._channelCount == 1_000)
        let peakSlots = hub._nameTableCapacity
        hub.unobserve(by: listener)
        // Later traffic: registrations on other names, each soon ended.
        let later = (0..<1_000).map { NotificationName<Int>("NotificationHubLifetimeTests.later.\($0)") }
        for name in later { hub.observe(name, by: listener, isolation: nil) { _, _ in }.invalidate() }
        let reclaimed = names.filter { name in hub.state.withLock { $0.channel(name.id, sender: nil) } == nil }.count
        #expect(reclaimed == names.count, "\(names.count - reclaimed) of the peak's channels were kept")
        // The sweep's cursor has not come back yet to the channels made
        // since its last pass: some of the later ones remain, not the peak.
        #expect(hub._channelCount < later.count / 2, "\(hub._channelCount) channels kept for no relation")
        #expect(
            hub._nameTableCapacity < peakSlots / 2,
            "the name table kept \(hub._nameTableCapacity) of \(peakSlots) slots")
        // A reclaimed channel's name is observed anew.
        let received = Atomic<Int>(0)
        hub.observe(names[0], by: listener, isolation: nil) { _, n in received.add(n.payload, ordering: .relaxed) }
        hub.post(names[0], payload: 7)
        #expect(received.load(ordering: .relaxed) == 7)
    }

    /// Registrations, removals, posts and the reclamation of channels left
    /// without relations, racing on a few names (on threads of their own,
    /// not the cooperative pool's): a relation that stays receives every
    /// post, and nothing crashes (run under the sanitizers).
    @Test func postsAndRegistrationsRace_withTheReclamationOfEmptyChannels() {
        let hub = NotificationHub()
        let stable = Plain()
        let delivered = Atomic<Int>(0)
        hub.observe(.badge, by: stable, isolation: nil) { _, _ in delivered.add(1, ordering: .relaxed) }
        let names = (0..<8).map { NotificationName<Int>("NotificationHubLifetimeTests.race.\($0)") }
        let rounds = StressConfig.rounds(2_000)
        let poster: @Sendable () -> Void = {
            for round in 0..<rounds {
                hub.post(.badge, payload: round)
                hub.post(names[round % names.count], payload: round)
            }
        }
        let workers = (0..<2).map { worker -> @Sendable () -> Void in
            {
                let listener = Plain()
                let sender = Plain()
                for round in 0..<rounds {
                    let name = names[(round + worker) % names.count]
                    let token = hub.observe(name, by: listener, isolation: nil) { _, _ in }
                    hub.observe(name, from: sender, by: listener, isolation: nil) { _, _ in }
                    // A fresh name each round: its registration sweeps.
                    hub.observe(
                        NotificationName<Int>("NotificationHubLifetimeTests.race.fresh.\(worker).\(round)"),
                        by: listener, isolation: nil
                    ) { _, _ in }.invalidate()
                    hub.post(name, payload: round, from: sender)
                    token.invalidate()
                    if round % 2 == 0 { hub.unobserve(name, by: listener) }
                }
                hub.unobserve(by: listener)
            }
        }
        stressRunConcurrently([poster] + workers)
        #expect(delivered.load(ordering: .relaxed) == rounds)
        #expect(hub.relations() == hub.relations(observedBy: stable))
        withExtendedLifetime(stable) {}
    }
}
