import Testing

@testable import SafeObserve

private final class Parity: SafeObservable {
    @Observed var count = 0
    var isEven: Bool { count % 2 == 0 }
}

/// DerivedKeyPaths.md: "Every change delivers, even when the derived value did
/// not change (as for a single property, and as Key-Value Observing does)."
@Suite("Derived key paths: every change delivers")
struct DerivedDeliveryPromisesTests {
    @Test func aChangeOfADependency_deliversEvenWhenTheDerivedValueIsTheSame() {
        let parity = Parity()
        let listener = Listener()
        parity.safeObserve(\.isEven, by: listener, options: [.old, .new]) { listener, _, change in
            listener.record(describe(change))
        }
        parity.count = 2
        parity.count = 4
        parity.count = 5
        #expect(listener.log == ["true->true", "true->true", "true->false"])
    }
}
