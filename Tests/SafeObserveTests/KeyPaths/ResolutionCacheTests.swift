import Synchronization
import Testing

@testable import SafeObserve

private class Base: SafeObservable {
    @Observed var count = 0
    @Observed var name = ""
}

private final class Derived: Base {
    @Observed var extra = 0.0
}

/// Forms `\.count` in generic code: a new key-path object on every call.
private func observeCount<Root: Base>(of root: Root, by listener: Peer) -> ObservationToken {
    root.safeObserve(\.count, by: listener) { _, _, _ in }
}

/// Ten properties whose key paths share one class (`KeyPath<Dials, Int>`):
/// the second level's candidates for that class, more than it keeps.
private final class Dials: SafeObservable {
    @Observed var d0 = 0
    @Observed var d1 = 0
    @Observed var d2 = 0
    @Observed var d3 = 0
    @Observed var d4 = 0
    @Observed var d5 = 0
    @Observed var d6 = 0
    @Observed var d7 = 0
    @Observed var d8 = 0
    @Observed var d9 = 0
}

/// Every dial's key path, each formed in generic code (a new object per call).
private func dialKeyPaths<Root: Dials>(_: Root.Type) -> [KeyPath<Root, Int>] {
    [\.d0, \.d1, \.d2, \.d3, \.d4, \.d5, \.d6, \.d7, \.d8, \.d9]
}

@Suite("Internal: key-path resolution cache")
struct ResolutionCacheTests {
    /// In a process of its own: the count of general resolutions is
    /// process-wide, and suites running in parallel resolve key paths too.
    @Test func aKeyPathFormedInGenericCode_isFoundByValue_andNeverReadAgain() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardOutputContent]) {
            let object = Base()
            object.safeObserve(\.count, by: Peer()) { _, _, _ in }
            let resolved = _generalResolutions.load(ordering: .relaxed)
            let listeners = (0..<10).map { _ in Peer() }
            let tokens = listeners.map { observeCount(of: object, by: $0) }
            expectInChild(
                _generalResolutions.load(ordering: .relaxed) == resolved,
                "registrations from generic code read the key path again")
            expectInChild(tokens.allSatisfy(\.isActive), "a registration from generic code failed")
            expectInChild(
                SafeObservation._channels(of: object).count == 1, "generic registrations reached another property")
        }
        #expect(result.map { String(decoding: $0.standardOutputContent, as: UTF8.self) } == "")
    }

    @Test func aPropertyResolvedOnceIsFoundByOffset_onEveryInstance_andOnSubclassInstances() {
        let keyPath = \Base.count
        let first = Base()
        let listener = Peer()
        first.safeObserve(keyPath, by: listener) { _, _, _ in }
        let field = _KeyPathResolutionCache.sentinelField(for: keyPath, on: ObjectIdentifier(Base.self))
        #expect(field != nil, "the first resolution did not record the property's sentinel field")

        // Other instances, including a subclass's, reach their own property.
        let log = EventLog()
        let others: [Base] = [Base(), Derived(), Base()]
        for (index, object) in others.enumerated() {
            object.safeObserve(keyPath, by: listener) { _, _, change in log.record("\(index):\(change.newValue!)") }
        }
        for (index, object) in others.enumerated() { object.count = 10 + index }
        #expect(log.entries == ["0:10", "1:11", "2:12"])
        // And never a neighbouring property.
        others[1].name = "x"
        (others[1] as! Derived).extra = 1
        #expect(log.entries.count == 3)
        withExtendedLifetime((first, listener)) {}
    }

    @Test func theSentinelFieldLiesInsideTheObject_andLeadsToThePropertysOwnChannel() {
        let object = Base()
        let listener = Peer()
        let token = object.safeObserve(\.name, by: listener) { _, _, _ in }
        let field = _KeyPathResolutionCache.sentinelField(for: \Base.name, on: ObjectIdentifier(Base.self))
        #expect(field != nil)
        if let field {
            // The metadata places `name`'s sentinel there, and nothing else's.
            let named = _ObservedFields.field(withSentinelAt: field.offset, in: Base.self)
            #expect(named?.name == "name")
            #expect(_ObservedFields.fields(of: Derived.self).map(\.name) == ["count", "name", "extra"])
            let relations = field.channel(in: object)?.liveRelations().map(ObservationToken.init)
            #expect(relations == [token], "the offset led to another property's channel")
        }
        withExtendedLifetime(listener) {}
    }

    @Test func keyPathsOfOneClassFormedInGenericCode_eachReachItsOwnProperty_pastTheCandidateBound() {
        let log = EventLog()
        let listener = Peer()
        let dials = Dials()
        // Twice: the first round resolves and records, the second is found by value.
        for round in 0..<2 {
            for (index, keyPath) in dialKeyPaths(Dials.self).enumerated() {
                dials.safeObserve(keyPath, by: listener) { _, _, change in
                    log.record("\(round).\(index):\(change.newValue!)")
                }
                // Found by value (unless evicted), it is this dial's field.
                if let field = _KeyPathResolutionCache.sentinelField(
                    equalTo: dialKeyPaths(Dials.self)[index], on: ObjectIdentifier(Dials.self))
                {
                    let name = _ObservedFields.field(withSentinelAt: field.offset, in: Dials.self)?.name
                    #expect(name == "d\(index)", "a dial's key path was matched to another dial")
                }
            }
        }
        dials.d3 = 3
        dials.d9 = 9
        // One relation per property (the second round deduplicated), each on its own property.
        #expect(log.entries == ["0.3:3", "0.9:9"])
        #expect(SafeObservation._channels(of: dials).count == 10)
        withExtendedLifetime(listener) {}
    }
}
