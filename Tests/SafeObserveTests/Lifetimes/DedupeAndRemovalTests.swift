import Testing

@testable import SafeObserve

@Suite("Dedupe and idempotent removal")
struct DedupeAndRemovalTests {
    @Test func observingTheSameRelationTwice_keepsTheFirstHandler_andReturnsTheSameToken() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        let first = counter.safeObserve(\.count, by: listener, options: [.new]) { _, _, _ in log.record("first") }
        let second = counter.safeObserve(\.count, by: listener, options: [.initial, .old]) { _, _, _ in
            log.record("second")
        }
        #expect(first == second)
        #expect(second.options == [.new], "the first registration's options stay")
        #expect(log.entries.isEmpty, "a deduplicated .initial is not delivered")
        counter.count = 1
        #expect(log.entries == ["first"])
        #expect(SafeObservation.relations(of: counter).count == 1)
    }

    @Test func afterRemovalTheSameRelationCanBeObservedAgain() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        let first = counter.safeObserve(\.count, by: listener) { _, _, _ in log.record("first") }
        first.invalidate()
        let second = counter.safeObserve(\.count, by: listener) { _, _, _ in log.record("second") }
        #expect(first != second)
        counter.count = 1
        #expect(log.entries == ["second"])
    }

    @Test func removingWhatWasNeverAdded_twice_orAfterDeath_isANoOp() {
        let counter = Counter()
        let listener = Listener()
        counter.safeUnobserve(\.count, by: listener)
        counter.safeUnobserve(by: listener)
        SafeObservation.removeAll(observedBy: listener)

        let token = counter.safeObserve(\.count, by: listener) { _, _, _ in }
        counter.safeUnobserve(\.count, by: listener)
        counter.safeUnobserve(\.count, by: listener)
        token.invalidate()
        token.invalidate()
        counter.safeUnobserve(by: listener)
        #expect(!token.isActive)
        #expect(SafeObservation.relations(of: counter).isEmpty)

        var doomed: Counter? = Counter()
        let late = doomed!.safeObserve(\.count, by: listener) { _, _, _ in }
        doomed = nil
        late.invalidate()
        SafeObservation.removeAll(observedBy: listener)
        #expect(!late.isActive)
    }

    @Test func unobserveByKeyPath_removesOnlyThatKeyPath() {
        let counter = Counter()
        let listener = Listener()
        let log = EventLog()
        counter.safeObserve(\.count, by: listener) { _, _, _ in log.record("count") }
        counter.safeObserve(\.title, by: listener) { _, _, _ in log.record("title") }
        counter.safeUnobserve(\.count, by: listener)
        counter.count = 1
        counter.title = "t"
        #expect(log.entries == ["title"])
    }

    @Test func unobserveByListener_removesEveryKeyPathOnThatObjectOnly() {
        let counter = Counter()
        let other = Counter()
        let listener = Listener()
        let log = EventLog()
        counter.safeObserve(\.count, by: listener) { _, _, _ in log.record("count") }
        counter.safeObserve(\.title, by: listener) { _, _, _ in log.record("title") }
        other.safeObserve(\.count, by: listener) { _, _, _ in log.record("other") }
        counter.safeUnobserve(by: listener)
        counter.count = 1
        counter.title = "t"
        other.count = 1
        #expect(log.entries == ["other"])
    }

    @Test func removeAll_endsEveryRelationOfAListenerOnEveryObject_andItCanObserveAgain() {
        let objects = (0..<3).map { _ in Counter() }
        let listener = OptInListener()
        let log = EventLog()
        for object in objects {
            object.safeObserve(\.count, by: listener) { _, _, _ in log.record("old") }
        }
        #expect(SafeObservation.relations(observedBy: listener).count == 3)
        SafeObservation.removeAll(observedBy: listener)
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
        for object in objects { object.count += 1 }
        objects[0].safeObserve(\.count, by: listener) { _, _, _ in log.record("new") }
        objects[0].count += 1
        #expect(log.entries == ["new"])
    }

    @Test func removalsCompactTheRelationList_inLinearTime() {
        let counter = Counter()
        let listeners = (0..<2_000).map { _ in Listener() }
        let log = EventLog()
        var tokens: [ObservationToken] = []
        for (index, listener) in listeners.enumerated() {
            tokens.append(
                counter.safeObserve(\.count, by: listener) { _, _, _ in
                    if index % 500 == 1 { log.record("\(index)") }
                })
        }
        for (index, token) in tokens.enumerated() where index % 2 == 0 { token.invalidate() }
        counter.count = 1
        #expect(log.entries == ["1", "501", "1001", "1501"])
        #expect(SafeObservation.relations(of: counter).count == 1_000)
        withExtendedLifetime(listeners) {}  // optimized builds may release them after their last use
    }

    @Test func introspectionListsRelationsFromBothSides() {
        let counter = Counter()
        let listener = Listener()
        let token = counter.safeObserve(\.count, by: listener, options: [.old, .new]) { _, _, _ in }
        counter.safeObserve(\.title, by: listener) { _, _, _ in }
        #expect(SafeObservation.relations(of: counter).count == 2)
        #expect(Set(SafeObservation.relations(observedBy: listener)) == Set(SafeObservation.relations(of: counter)))
        #expect(token.keyPath == \Counter.count)
        #expect(token.observedObjectID == ObjectIdentifier(counter))
        #expect(token.listener === listener)
        #expect(token.debugDescription.contains("Listener"))
        #expect(token.debugDescription.contains("\\Counter.count,"), "the @Observed property is not named")
        #expect(token.debugDescription.contains("[.new, .old]"))
        #expect(token.debugDescription.hasSuffix("active)"))
        token.invalidate()
        #expect(token.debugDescription.hasSuffix("ended)"))
    }
}
