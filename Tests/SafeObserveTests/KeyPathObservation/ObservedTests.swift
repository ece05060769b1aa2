import Testing

@testable import SafeObserve

@Suite("Delivery and options")
struct ObservedTests {
    @Test func defaultOptionsDeliverTheNewValueAfterTheStore() {
        let counter = Counter()
        let listener = Listener()
        counter.safeObserve(\.count, by: listener) { listener, counter, change in
            // The value is already stored when the handler runs.
            listener.record("\(describe(change)) stored=\(counter.count)")
        }
        counter.count = 1
        counter.count += 1
        #expect(listener.log == ["nil->1 stored=1", "nil->2 stored=2"])
    }

    @Test func everyOptionCombinationMatchesKVO() {
        // (options, changes for count 0 -> 1, with .initial at registration)
        let cases: [(ObservationOptions, [String])] = [
            ([], ["nil->nil"]),
            (.new, ["nil->1"]),
            (.old, ["0->nil"]),
            ([.old, .new], ["0->1"]),
            (.initial, ["nil->0 initial", "nil->nil"]),
            ([.initial, .new], ["nil->0 initial", "nil->1"]),
            (.prior, ["nil->nil prior", "nil->nil"]),
            ([.prior, .old], ["0->nil prior", "0->nil"]),
            ([.initial, .old, .new, .prior], ["nil->0 initial", "0->nil prior", "0->1"]),
        ]
        for (options, expected) in cases {
            let counter = Counter()
            let listener = Listener()
            let token = counter.safeObserve(\.count, by: listener, options: options) { listener, _, change in
                listener.record(describe(change))
            }
            counter.count = 1
            #expect(listener.log == expected, "options \(options)")
            #expect(token.options == options)
        }
    }

    @Test func priorDeliverySeesTheOldValueStillStored() {
        let counter = Counter(count: 7)
        let listener = Listener()
        counter.safeObserve(\.count, by: listener, options: [.prior, .new]) { listener, counter, change in
            listener.record("\(change.isPrior) stored=\(counter.count)")
        }
        counter.count = 8
        #expect(listener.log == ["true stored=7", "false stored=8"])
    }

    @Test func handlerReceivesTheListenerAndTheObject() {
        let counter = Counter()
        let listener = Listener()
        let listenerID = ObjectIdentifier(listener)
        let counterID = ObjectIdentifier(counter)
        counter.safeObserve(\.count, by: listener) { receivedListener, receivedCounter, _ in
            #expect(ObjectIdentifier(receivedListener) == listenerID)
            #expect(ObjectIdentifier(receivedCounter) == counterID)
            receivedListener.record("called")
        }
        counter.count = 3
        #expect(listener.log == ["called"])
    }

    @Test func relationsAreIndependentPerPropertyPerObjectAndPerListener() {
        let first = Counter()
        let second = Counter()
        let a = Listener()
        let b = Listener()
        first.safeObserve(\.count, by: a) { a, _, change in a.record("first.count \(change.newValue!)") }
        first.safeObserve(\.title, by: a) { a, _, change in a.record("first.title \(change.newValue!)") }
        second.safeObserve(\.count, by: b) { b, _, change in b.record("second.count \(change.newValue!)") }
        first.count = 1
        first.title = "x"
        second.count = 2
        #expect(a.log == ["first.count 1", "first.title x"])
        #expect(b.log == ["second.count 2"])
    }

    @Test func observersAreCalledInRegistrationOrder() {
        let counter = Counter()
        let listeners = (0..<5).map { _ in Listener() }
        let order = EventLog()
        for (index, listener) in listeners.enumerated() {
            counter.safeObserve(\.count, by: listener) { _, _, _ in order.record("\(index)") }
        }
        counter.count = 1
        #expect(order.entries == ["0", "1", "2", "3", "4"])
        withExtendedLifetime(listeners) {}  // optimized builds may release them after their last use
    }

    @Test func sentinelsAreCreatedOnlyByTheFirstObservationOfAProperty() {
        let counter = Counter()
        counter.count = 5
        _ = counter.count
        #expect(counter.count == 5)
        #expect(!hasSentinel(counter, storage: "_count"))
        let listener = Listener()
        counter.safeObserve(\.count, by: listener) { _, _, _ in }
        #expect(hasSentinel(counter, storage: "_count"))
        #expect(!hasSentinel(counter, storage: "_title"))
    }
}
