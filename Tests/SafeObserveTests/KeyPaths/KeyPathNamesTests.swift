import Testing

@testable import SafeObserve

/// A requirement that `@Observed var count` of `NamedCounter` witnesses.
private protocol CountProviding: AnyObject {
    var count: Int { get set }
}

private final class NamedCounter: SafeObservable, CountProviding {
    @Observed var count = 0
}

private final class NameListener {}

/// `\T.count` formed in code generic over `CountProviding`: a key path whose
/// one component is the protocol requirement, not the property.
private func countThroughTheRequirement<T: CountProviding>(_: T.Type) -> ReferenceWritableKeyPath<T, Int> {
    \T.count
}

@Suite("Key-path names in descriptions")
struct KeyPathNamesTests {
    @Test func anObservedPropertysKeyPath_isNamedAsInSource_inTokensAndControllers() {
        let counter = NamedCounter()
        let listener = NameListener()
        let token = counter.safeObserve(\.count, by: listener) { _, _, _ in }
        #expect(token.debugDescription.contains("\\NamedCounter.count,"))
        let controller = ObservationController(observer: listener)
        controller.observe(counter, keyPath: \.count) { _, _, _ in }
        #expect(controller.debugDescription.contains("\\NamedCounter.count [.new]"))
        withExtendedLifetime((counter, listener, controller)) {}
    }

    /// The documented limit (ObservationToken.debugDescription, PicturingRelations):
    /// nothing in a key path formed through a protocol requirement names the
    /// requirement, and it is another key path than the property's, observed
    /// as a derived one; descriptions print it as Swift does.
    @Test func aKeyPathFormedThroughAProtocolRequirement_isDerived_andPrintedAsSwiftPrintsIt() {
        let counter = NamedCounter()
        let listener = NameListener()
        let keyPath = countThroughTheRequirement(NamedCounter.self)
        #expect(keyPath != \NamedCounter.count)
        var delivered: [Int] = []
        let token = counter.safeObserve(keyPath, by: listener) { _, _, change in delivered.append(change.newValue!) }
        counter.safeObserve(\.count, by: listener) { _, _, _ in }
        #expect(SafeObservation.relations(observedBy: listener).count == 2, "two relations: one derived")
        #expect(token.debugDescription.contains("\\NamedCounter.<computed 0x"))
        #expect(!token.debugDescription.contains("\\NamedCounter.count"))
        counter.count = 1
        #expect(delivered == [1], "it is observed all the same")
        withExtendedLifetime((counter, listener)) {}
    }
}
