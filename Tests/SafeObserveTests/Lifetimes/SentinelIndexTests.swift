import Testing

@testable import SafeObserve

private final class Object {}

@Suite("Internal: the index of observed properties")
struct SentinelIndexTests {
    /// Random filings and removals of channels of a few objects, some with
    /// many properties (past the inline limit, into their overflow lists):
    /// each object's channels come back in filing order.
    @Test(arguments: [1 as UInt64, 2, 3])
    func randomFilingsAndRemovals_keepEachObjectsOrder(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let objects = (0..<4).map { _ in Object() }
        var index = _SentinelIndex.State()
        var model: [ObjectIdentifier: [_Channel]] = [:]
        for step in 0..<3_000 {
            let object = objects[random.next(objects.count)]
            let key = ObjectIdentifier(object)
            let filed = model[key] ?? []
            // Grow to a few dozen per object, then shrink, then grow again.
            let growing = (step / 750) % 2 == 0
            if filed.isEmpty || random.next(10) < (growing ? 7 : 3) {
                let channel = _Channel(object: object, keyPath: nil)
                index.insert(channel)
                model[key, default: []].append(channel)
            } else {
                let victim = filed[random.next(filed.count)]
                #expect(index.remove(victim) === victim, "seed \(seed), step \(step)")
                model[key]!.removeAll { $0 === victim }
            }
            let channels = index.channels(under: key)
            #expect(
                channels.map(ObjectIdentifier.init) == (model[key] ?? []).map(ObjectIdentifier.init),
                "seed \(seed), step \(step)")
        }
        #expect(model.values.contains { $0.count > 2 * _SentinelIndex.State.inlineLimit }, "no overflow list was used")
        for (_, channels) in model {
            for channel in channels { #expect(index.remove(channel) === channel) }
        }
        #expect(index.table.isEmpty && index.overflows.isEmpty)
        withExtendedLifetime(objects) {}
    }
}
