// The hub's complexity claims, each measured as a late operation against an
// early one in one process: a ratio with a generous threshold (the defects
// these pin cost 10–1,000×), never an absolute time.

import Testing

@testable import SafeObserve

extension NotificationName where Payload == Int {
    fileprivate static let scaled = NotificationName("NotificationHubScalingTests.scaled")
    fileprivate static let crowded = NotificationName("NotificationHubScalingTests.crowded")
    fileprivate static let other = NotificationName("NotificationHubScalingTests.other")
}

/// A plain class (not a `SafeObserver`): a sender or a listener.
private final class Plain: Sendable {}

/// A sender that adopts `SafeObserver`.
private final class Store: SafeObserver, Sendable {
    let observerLifetime = ObserverLifetime()
}

@Suite(
    "NotificationHub scaling", .serialized,
    .disabled(if: StressConfig.isSanitized, "a sanitizer's own costs would be measured, not the hub's"))
struct NotificationHubScalingTests {
    /// `unobserve(by:)` visits the listener's relations, not every channel of
    /// the hub.
    @Test func unobserveByAListener_doesNotScaleWithTheHubsOtherChannels() {
        let senders = (0..<5_000).map { _ in Plain() }
        /// 50 × (observe one name + unobserve(by:)) by a listener with one relation.
        func observeAndUnobserveBy(on hub: NotificationHub) -> Duration {
            let listener = Plain()
            return fastest(of: 3) {
                for _ in 0..<50 {
                    hub.observe(.scaled, by: listener, isolation: nil) { _, _ in }
                    hub.unobserve(by: listener)
                }
            }
        }
        var last = (few: Duration.zero, many: Duration.zero)
        // Each attempt on a hub of its own.
        let ratio = smallestRatios(below: 4) {
            let hub = NotificationHub()
            let crowd = Plain()
            for sender in senders[..<8] { hub.observe(.crowded, from: sender, by: crowd, isolation: nil) { _, _ in } }
            let few = observeAndUnobserveBy(on: hub)  // 8 other channels
            for sender in senders[8...] { hub.observe(.crowded, from: sender, by: crowd, isolation: nil) { _, _ in } }
            let many = observeAndUnobserveBy(on: hub)  // 5,000 other channels
            withExtendedLifetime(crowd) {}
            last = (few, many)
            return [many / few]
        }[0]
        #expect(
            ratio < 4,
            "unobserve(by:) with 5,000 other channels costs \(ratio)× what it costs with 8 (last attempt \(describe(last.few)) → \(describe(last.many)) per 50)"
        )
        withExtendedLifetime(senders) {}
    }

    /// Registering on a new sender sweeps a bounded number of old channels,
    /// however many senders died before.
    ///
    /// The bound is 8: the hub's table of 131,072 channels does not fit in
    /// a core's cache, so a release build measures up to 2.9× on an idle
    /// machine, while sweeping the dead channels would cost 128×.
    @Test func registrationAfterManySendersDied_doesNotScaleWithTheDeadSendersChannels() {
        /// Registrations on new senders (each creating a sender channel and
        /// sweeping two old ones) after `dead` senders with channels died.
        func registrations(afterDeadSenders dead: Int) -> Duration {
            let hub = NotificationHub()
            let listener = Plain()
            do {
                let senders = (0..<dead).map { _ in Plain() }
                for sender in senders { hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in } }
            }  // every one of them dies here; their channels wait for the sweep
            let fresh = (0..<3 * 64).map { _ in Plain() }
            var batch = 0
            let duration = fastest(of: 3) {
                for sender in fresh[(batch * 64)..<(batch * 64 + 64)] {
                    hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
                }
                batch += 1
            }
            withExtendedLifetime((fresh, listener, hub)) {}
            return duration
        }
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 8) {
            last = (registrations(afterDeadSenders: 1_024), registrations(afterDeadSenders: 131_072))
            return [last.late / last.early]
        }[0]
        #expect(
            ratio < 8,
            "registration after 131,072 senders died costs \(ratio)× what it costs after 1,024 (last attempt \(describe(last.early)) → \(describe(last.late)) per 64)"
        )
    }

    /// A hub's death ends each of its relations in O(1), however many one
    /// listener has: the listener's table is not left with one probe run as
    /// long as itself (removals in the hub's table order used to do that,
    /// making the death quadratic: 8,192 channels took 0.5 s, 32,768 took 7).
    ///
    /// Both hubs hold 32,768 relations, so both deaths touch the same amount
    /// of memory: one spreads them over 32 listeners, the other gives them all
    /// to one. Only the size of one listener's table differs, which is what a
    /// quadratic death scales with (32× here).
    @Test func aHubsDeath_endsEachRelationInConstantTime_forOneListenerWithManySenders() {
        /// The hub's death, per relation, with `listeners` listeners of
        /// `count / listeners` senders each.
        func death(of count: Int, spreadOver listeners: Int) -> Duration {
            let clock = ContinuousClock()
            var best = Duration.seconds(1_000_000)
            for _ in 0..<3 {
                var hub: NotificationHub? = NotificationHub()
                let listeners = (0..<listeners).map { _ in Plain() }
                let senders = (0..<count).map { _ in Plain() }
                for (index, sender) in senders.enumerated() {
                    let listener = listeners[index % listeners.count]
                    hub!.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
                }
                best = min(best, clock.measure { hub = nil })
                withExtendedLifetime((senders, listeners)) {}
            }
            return best / count
        }
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            last = (death(of: 32_768, spreadOver: 32), death(of: 32_768, spreadOver: 1))
            return [last.late / last.early]
        }[0]
        #expect(
            ratio < 4,
            "a hub's death costs \(ratio)× per relation when one listener has 32,768 senders what it costs when 32 listeners have 1,024 each (last attempt \(describe(last.early)) → \(describe(last.late)))"
        )
    }

    /// Dropping the iterator of one of *k* sequences filtered on one sender
    /// is O(1), whether the sender is a plain class or a `SafeObserver`.
    @Test(arguments: [false, true])
    func endingOneOfManySequencesOnOneSender_doesNotScaleWithTheOthers(senderIsSafeObserver: Bool) {
        /// Drops 100 iterators of sequences filtered on one sender that has
        /// `others` more.
        func ending(among others: Int) -> Duration {
            let hub = NotificationHub()
            let sender: AnyObject = senderIsSafeObserver ? Store() : Plain()
            let sequence = hub.notifications(named: .scaled, from: sender)
            let kept = (0..<others).map { _ in sequence.makeAsyncIterator() }
            var batches = (0..<3).map { _ in (0..<100).map { _ in sequence.makeAsyncIterator() } }
            let duration = fastest(of: 3) { batches.removeLast() }
            withExtendedLifetime((kept, batches, sender, hub)) {}
            return duration
        }
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            last = (ending(among: 64), ending(among: 8_000))
            return [last.late / last.early]
        }[0]
        #expect(
            ratio < 4,
            "ending a sequence among 8,000 on its sender costs \(ratio)× what it costs among 64 (last attempt \(describe(last.early)) → \(describe(last.late)) per 100)"
        )
    }

    /// A hub's name table holds the names it has channels for, not every
    /// name the process ever made.
    @Test func aNewHubsMemory_doesNotGrowWithTheNamesEverCreatedInTheProcess() {
        let names = (0..<20_000).map { NotificationName<Int>("NotificationHubScalingTests.name.\($0)") }
        let hub = NotificationHub()
        let listener = Plain()
        hub.observe(names[names.count - 1], by: listener, isolation: nil) { _, _ in }
        let slots = hub._nameTableCapacity
        #expect(
            slots <= 64,
            "a new hub observing one name holds \(slots) name slots after 20,000 names were created"
        )
        withExtendedLifetime(listener) {}
    }

    /// Observers of other names (each a channel of its own), of other
    /// senders, of every name, and other listeners of `name` itself:
    /// `count` of each kind on `hub`.
    private struct LiveObservers {
        let listeners: [Plain]
        let senders: [Plain]
        let subscriptions: [NotificationSubscription]

        init(_ count: Int, on hub: NotificationHub, of name: NotificationName<Int>, offset: Int = 0) {
            listeners = (0..<count).map { _ in Plain() }
            senders = (0..<count).map { _ in Plain() }
            let names = (offset..<(offset + count)).map {
                NotificationName<Int>("NotificationHubScalingTests.live.\($0)")
            }
            for ((listener, sender), other) in zip(zip(listeners, senders), names) {
                hub.observe(other, by: listener, isolation: nil) { _, _ in }
                hub.observe(name, from: sender, by: listener, isolation: nil) { _, _ in }
                hub.observe(name, by: listener, isolation: nil) { _, _ in }
            }
            subscriptions = (0..<count).map { _ in hub.subscribeEvery(isolation: nil) { _ in } }
        }
    }

    /// `observe` (both forms), `observeEvery` and `subscribeEvery`
    /// (amortized O(1) expected): registering, and ending what was
    /// registered, costs what it costs on a quiet hub with 10,000 live
    /// observers of other names, of other senders, of every name and of the
    /// same name (40,000 relations).
    @Test func registration_doesNotScaleWithTheHubsLiveObservers() {
        let listeners = (0..<50).map { _ in Plain() }
        let sender = Plain()
        /// 50 × (observe a name, a name from a sender, every name, subscribe
        /// to every name, then end the four) on `hub`.
        func registrations(on hub: NotificationHub) -> Duration {
            fastest(of: 5) {
                for listener in listeners {
                    let tokens = [
                        hub.observe(.scaled, by: listener, isolation: nil) { _, _ in },
                        hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in },
                        hub.observeEvery(by: listener, isolation: nil) { _, _ in },
                    ]
                    let subscription = hub.subscribeEvery(isolation: nil) { _ in }
                    for token in tokens { token.invalidate() }
                    subscription.cancel()
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a hub of its own.
        let ratio = smallestRatios(below: 4) {
            let hub = NotificationHub()
            let few = LiveObservers(8, on: hub, of: .scaled)
            let early = registrations(on: hub)
            let many = LiveObservers(10_000, on: hub, of: .scaled, offset: 8)
            let late = registrations(on: hub)
            withExtendedLifetime((few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "registration with 10,000 live observers of each kind costs \(ratio)× what it costs with 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 50)"
        )
        withExtendedLifetime((listeners, sender)) {}
    }

    /// `post` (O(1) expected to find the observers): a post from a sender,
    /// and one from none, reaching two observers, costs what it costs with
    /// 10,000 live observers of other names, of other senders and of every
    /// name's other senders (the notification's own observers are the
    /// same on both sides).
    @Test func post_findsItsObserversByLookUp_whateverOtherObserversExist() {
        /// 500 posts from `sender` and 500 from none on `hub`.
        func posts(on hub: NotificationHub, from sender: Plain) -> Duration {
            fastest(of: 5) {
                for payload in 0..<500 {
                    hub.post(.scaled, payload: payload, from: sender)
                    hub.post(.scaled, payload: payload)
                }
            }
        }
        /// Observers on `hub` of other names, of `.other` from other
        /// senders, and of every name from other senders.
        func crowd(_ count: Int, offset: Int, on hub: NotificationHub) -> [Plain] {
            let crowd = (0..<count).map { _ in Plain() }
            for (index, other) in crowd.enumerated() {
                hub.observe(
                    NotificationName<Int>("NotificationHubScalingTests.post.\(offset + index)"), by: other,
                    isolation: nil
                ) { _, _ in }
                hub.observe(.other, from: other, by: other, isolation: nil) { _, _ in }
                hub.observeEvery(from: other, by: other, isolation: nil) { _, _ in }
            }
            return crowd
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a hub of its own.
        let ratio = smallestRatios(below: 4) {
            let hub = NotificationHub()
            let listener = Plain()
            let sender = Plain()
            hub.observe(.scaled, by: listener, isolation: nil) { _, _ in }
            hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
            let few = crowd(8, offset: 0, on: hub)
            let early = posts(on: hub, from: sender)
            let many = crowd(10_000, offset: 8, on: hub)
            let late = posts(on: hub, from: sender)
            withExtendedLifetime((listener, sender, few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "a post with 10,000 other observers of each kind costs \(ratio)× what it costs with 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 1,000)"
        )
    }

    /// `post` (O(1) per observer called): each observer costs at 20,000
    /// what it costs at 200.
    @Test func post_costsTheSamePerObserver_with20000AsWith200() {
        /// `posts` posts to `count` observers of the name.
        func posting(_ posts: Int, to count: Int) -> Duration {
            let hub = NotificationHub()
            let listeners = (0..<count).map { _ in Plain() }
            for listener in listeners { hub.observe(.scaled, by: listener, isolation: nil) { _, _ in } }
            let duration = fastest(of: 5) {
                for payload in 0..<posts { hub.post(.scaled, payload: payload) }
            }
            withExtendedLifetime(listeners) {}
            return duration
        }
        // 20,000 deliveries on each side.
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            last = (posting(100, to: 200), posting(1, to: 20_000))
            return [last.late / last.early]
        }[0]
        #expect(
            ratio < 4,
            "a post costs \(ratio)× per observer with 20,000 what it costs with 200 (last attempt \(describe(last.early)) → \(describe(last.late)) per 20,000 deliveries)"
        )
    }

    /// `unobserve(_:from:by:)` with a sender (O(*k*) expected, *k* the
    /// listener's relations on that channel): a listener that observes
    /// 20,000 other senders removes one as fast as a listener of one.
    @Test func unobserveANameFromASender_doesNotScaleWithTheListenersOtherRelations() {
        let sender = Plain()
        let others = (0..<20_000).map { _ in Plain() }
        /// 50 × (observe a name from the sender, then unobserve it) by `listener` on `hub`.
        func observeAndUnobserve(on hub: NotificationHub, by listener: Plain) -> Duration {
            fastest(of: 5) {
                for _ in 0..<50 {
                    hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
                    hub.unobserve(.scaled, from: sender, by: listener)
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a hub of its own.
        let ratio = smallestRatios(below: 4) {
            let hub = NotificationHub()
            let alone = Plain()
            let early = observeAndUnobserve(on: hub, by: alone)
            let busy = Plain()
            for other in others { hub.observe(.scaled, from: other, by: busy, isolation: nil) { _, _ in } }
            let late = observeAndUnobserve(on: hub, by: busy)
            withExtendedLifetime((alone, busy)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "unobserve(_:from:by:) by a listener of 20,000 other senders costs \(ratio)× what it costs for a listener of none (last attempt \(describe(last.early)) → \(describe(last.late)) per 50)"
        )
        withExtendedLifetime((others, sender)) {}
    }

    /// `unobserve(_:by:)` without a sender and `unobserve(from:by:)`
    /// (O(*n*) in the listener's relations): they visit the listener's
    /// relations, not the hub's other channels and listeners.
    @Test func unobserveANameOrASender_doesNotScaleWithTheHubsOtherObservers() {
        let sender = Plain()
        let listener = Plain()
        /// 50 × (observe a name from the sender; unobserve the name; observe
        /// again; unobserve the sender) on `hub`.
        func observeAndUnobserve(on hub: NotificationHub) -> Duration {
            fastest(of: 5) {
                for _ in 0..<50 {
                    hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
                    hub.unobserve(.scaled, by: listener)
                    hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
                    hub.unobserve(from: sender, by: listener)
                }
            }
        }
        var last = (early: Duration.zero, late: Duration.zero)
        // Each attempt on a hub of its own.
        let ratio = smallestRatios(below: 4) {
            let hub = NotificationHub()
            let few = LiveObservers(8, on: hub, of: .scaled, offset: 40_000)
            let early = observeAndUnobserve(on: hub)
            let many = LiveObservers(10_000, on: hub, of: .scaled, offset: 40_008)
            let late = observeAndUnobserve(on: hub)
            withExtendedLifetime((few, many)) {}
            last = (early, late)
            return [late / early]
        }[0]
        #expect(
            ratio < 4,
            "unobserving a name or a sender with 10,000 other observers of each kind costs \(ratio)× what it costs with 8 (last attempt \(describe(last.early)) → \(describe(last.late)) per 50)"
        )
        withExtendedLifetime((sender, listener)) {}
    }

    /// `relations()` (O(*c* + *n* log *n*) in the hub's channels and their
    /// relations) and `relations(observedBy:)` (O(*n* log *n*) in the
    /// listener's relations): the relations of other hubs, and, for the
    /// listener's, of the hub's other listeners, change nothing.
    @Test func listingAHubsRelations_doesNotScaleWithOtherHubsOrListeners() {
        let senders = (0..<4).map { _ in Plain() }
        let otherListeners = (0..<20_000).map { _ in Plain() }
        /// 200 × the relations of `hub`.
        func hubListing(_ hub: NotificationHub) -> Duration {
            fastest(of: 9) { for _ in 0..<200 { _ = hub.relations() } }
        }
        /// 200 × those of `listener` on `hub`.
        func listenerListing(_ hub: NotificationHub, _ listener: Plain) -> Duration {
            fastest(of: 9) { for _ in 0..<200 { _ = hub.relations(observedBy: listener) } }
        }
        var last: [(early: Duration, late: Duration)] = []
        var listed = 0
        // Each attempt with hubs and a listener of its own.
        let ratios = smallestRatios(below: 4) {
            let hub = NotificationHub()
            let listener = Plain()
            for sender in senders {
                hub.observe(.scaled, by: listener, isolation: nil) { _, _ in }
                hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in }
            }
            let early = (hub: hubListing(hub), listener: listenerListing(hub, listener))
            let otherHub = NotificationHub()
            let elsewhere = LiveObservers(10_000, on: otherHub, of: .scaled)
            let afterOtherHubs = (hub: hubListing(hub), listener: listenerListing(hub, listener))
            listed = hub.relations().count
            for other in otherListeners { hub.observe(.other, by: other, isolation: nil) { _, _ in } }
            let afterOtherListeners = listenerListing(hub, listener)
            withExtendedLifetime((otherHub, elsewhere)) {}
            last = [
                (early.hub, afterOtherHubs.hub), (early.listener, afterOtherHubs.listener),
                (early.listener, afterOtherListeners),
            ]
            return last.map { $0.late / $0.early }
        }
        #expect(listed == 5, "the hub has the listener's channel and four sender channels")
        let labels = [
            "relations() with 40,000 relations on another hub",
            "relations(observedBy:) with 40,000 relations on another hub",
            "relations(observedBy:) with 20,000 other listeners on the hub",
        ]
        for ((label, (early, late)), ratio) in zip(zip(labels, last), ratios) {
            #expect(
                ratio < 4,
                "\(label) costs \(ratio)× what it costs without (last attempt \(describe(early)) → \(describe(late)) per 200)"
            )
        }
        withExtendedLifetime((senders, otherListeners)) {}
    }

    /// `relations()` and `relations(observedBy:)` are O(*n* log *n*): each
    /// relation listed costs at 20,000 within a small factor of what it
    /// costs at 200, where a quadratic listing would cost 100×.
    ///
    /// The factor is the sort's log (1.9×) times the cache: 20,000
    /// relations do not fit in a core's cache, 200 do. A release build
    /// measures 2.4–3.3× on an idle machine and 4.2× was seen under CI's
    /// load, so the bound is 8.
    @Test func listingAHubsRelations_costsAboutTheSamePerRelation_with20000AsWith200() {
        /// A hub where one listener observes `count` senders (`count`
        /// sender channels), with that listener.
        func hub(of count: Int) -> (hub: NotificationHub, listener: Plain, senders: [Plain]) {
            let hub = NotificationHub()
            let listener = Plain()
            let senders = (0..<count).map { _ in Plain() }
            for sender in senders { hub.observe(.scaled, from: sender, by: listener, isolation: nil) { _, _ in } }
            return (hub, listener, senders)
        }
        let small = hub(of: 200)
        let large = hub(of: 20_000)
        // 20,000 relations listed on each side. The small and the large
        // listing alternate, so that both see the same load from the rest
        // of a parallel run.
        var last: [(early: Duration, late: Duration)] = []
        let ratios = smallestRatios(below: 8) {
            var early = (hub: Duration.seconds(1_000_000), listener: Duration.seconds(1_000_000))
            var late = early
            for _ in 0..<7 {
                early.hub = min(early.hub, fastest(of: 1) { for _ in 0..<100 { _ = small.hub.relations() } })
                late.hub = min(late.hub, fastest(of: 1) { _ = large.hub.relations() })
                early.listener = min(
                    early.listener,
                    fastest(of: 1) { for _ in 0..<100 { _ = small.hub.relations(observedBy: small.listener) } })
                late.listener = min(
                    late.listener, fastest(of: 1) { _ = large.hub.relations(observedBy: large.listener) })
            }
            last = [(early.hub, late.hub), (early.listener, late.listener)]
            return last.map { $0.late / $0.early }
        }
        for ((label, (early, late)), ratio) in zip(zip(["relations()", "relations(observedBy:)"], last), ratios) {
            #expect(
                ratio < 8,
                "\(label) costs \(ratio)× per relation with 20,000 what it costs with 200 (last attempt \(describe(early)) → \(describe(late)) per 20,000 listed)"
            )
        }
        withExtendedLifetime((small, large)) {}
    }

    /// `NotificationName.init` (O(*n*) in the raw value's length, once per
    /// name value): a new name costs what it costs however many names the
    /// process made before. In a process of its own, whose first names
    /// these are (the suites running in parallel make thousands).
    @Test func aNewName_doesNotScaleWithTheNamesMadeBefore() async {
        /// The last child's report: the ratio, a tab, the timings.
        var report = ""
        // Each attempt in a process of its own: in one, an earlier
        // attempt's names would be names made before.
        let ratio = await smallestRatios(below: 4) {
            let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
                var made = 0
                /// Raw values never used before, 200 per run.
                func newRawValues() -> [[String]] {
                    (0..<5).map { _ in
                        (0..<200).map { _ in
                            made += 1
                            return "NotificationHubScalingTests.new.\(made)"
                        }
                    }
                }
                func making(_ batches: [[String]]) -> Duration {
                    var batches = batches
                    return fastest(of: 5) {
                        for rawValue in batches.removeLast() { _ = NotificationName<Int>(rawValue) }
                    }
                }
                let early = making(newRawValues())
                for _ in 0..<20_000 {
                    made += 1
                    _ = NotificationName<Int>("NotificationHubScalingTests.new.\(made)")
                }
                let late = making(newRawValues())
                // The ratio and the timings, for the parent.
                print("\(late / early)\t\(describe(early)) → \(describe(late))")
            }
            report = result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } ?? ""
            // Not a number (no report) is not measured again, and fails below.
            return [Double(report.prefix { $0 != "\t" }) ?? .nan]
        }[0]
        #expect(!ratio.isNaN, "the child reported no ratio: \"\(report)\"")
        guard !ratio.isNaN else { return }
        let timings = report.drop { $0 != "\t" }.dropFirst().prefix { $0 != "\n" }
        #expect(
            ratio < 4,
            "a new name after 20,000 others costs \(ratio)× what it cost before them (last attempt \(timings) per 200)"
        )
    }

    /// `NotificationName.init` is O(*n*) in the raw value's length: each
    /// character of a 10,000-character name costs what one of a
    /// 100-character name costs.
    @Test func aNewName_costsTheSamePerCharacter_with10000AsWith100() {
        var made = 0
        /// Raw values of `length` characters never used before, `count` per run.
        func rawValues(_ count: Int, of length: Int) -> [[String]] {
            (0..<5).map { _ in
                (0..<count).map { _ in
                    made += 1
                    let prefix = "NotificationHubScalingTests.long.\(made)."
                    return prefix + String(repeating: "x", count: length - prefix.count)
                }
            }
        }
        func making(_ batches: [[String]]) -> Duration {
            var batches = batches
            return fastest(of: 5) {
                for rawValue in batches.removeLast() { _ = NotificationName<Int>(rawValue) }
            }
        }
        // 100,000 characters on each side, of names never made before (each attempt's own).
        var last = (early: Duration.zero, late: Duration.zero)
        let ratio = smallestRatios(below: 4) {
            last = (making(rawValues(1_000, of: 100)), making(rawValues(10, of: 10_000)))
            return [last.late / last.early]
        }[0]
        #expect(
            ratio < 4,
            "a name costs \(ratio)× per character with 10,000 what it costs with 100 (last attempt \(describe(last.early)) → \(describe(last.late)) per 100,000 characters)"
        )
    }
}
