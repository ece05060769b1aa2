import Testing

@testable import SafeObserve

private final class Mixed: SafeObservable {
    @Observed var count = 0
    @Observed var child: Counter? = nil
    var plain = 0
    var plainDoubled: Int { plain * 2 }
}

/// Programmer errors: clear messages naming the type and key path, and an
/// inert token instead of a crash. (Each test's handler is its own task's, so
/// the suite runs in parallel with everything else.)
@Suite("Programmer errors")
struct DiagnosticsTests {
    private func expectRejected<Value>(
        _ keyPath: KeyPath<Mixed, Value>, on object: Mixed, mentioning fragments: [String]
    ) {
        let messages = EventLog()
        let listener = Listener()
        let log = EventLog()
        let token = _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            object.safeObserve(keyPath, by: listener, options: [.initial]) { _, _, _ in log.record("called") }
        }
        #expect(!token.isActive)
        #expect(token.keyPath == nil)
        #expect(log.entries.isEmpty)
        #expect(messages.entries.count == 1)
        for fragment in fragments {
            #expect(messages.entries.first?.contains(fragment) == true, "\(messages.entries) lacks \(fragment)")
        }
    }

    @Test func aKeyPathThatReadsNoObservedProperty_isRejected() {
        expectRejected(\.plain, on: Mixed(), mentioning: ["\\Mixed.plain", "reads no @Observed property"])
    }

    #if DEBUG
        /// Without a test handler, a debug build stops, naming the key path.
        @Test func aKeyPathThatReadsNoObservedProperty_stopsADebugBuild() async throws {
            let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let mixed = Mixed()
                let listener = Listener()
                mixed.safeObserve(\.plain, by: listener) { _, _, _ in }
            }
            let message = String(decoding: result.standardErrorContent, as: UTF8.self)
            #expect(message.contains("\\Mixed.plain") && message.contains("reads no @Observed property"), "\(message)")
        }
    #endif

    @Test func aComputedKeyPathThatReadsNoObservedProperty_isRejected_namingTheRootAndTheValueType() {
        expectRejected(\.plainDoubled, on: Mixed(), mentioning: ["Mixed", "Int", "reads no @Observed property"])
    }

    @Test func observingFromADeinitIsRejectedWithoutCreatingAnything() {
        let messages = EventLog()
        _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            let counter = Counter()
            do {
                let listener = Listener()
                listener.onDeinit = { [counter] listener in
                    let token = counter.safeObserve(\.count, by: listener) { _, _, _ in }
                    #expect(!token.isActive)
                }
            }
            var observed: Counter? = Counter()
            observed!.onDeinit = { counter in
                let token = counter.safeObserve(\.count, by: counter) { _, _, _ in }
                #expect(!token.isActive)
                #expect(!hasSentinel(counter, storage: "_count"))
            }
            observed = nil
            #expect(SafeObservation.relations(of: counter).isEmpty)
        }
        #expect(messages.entries.count == 2)
        #expect(messages.entries.allSatisfy { $0.contains("deinit") && $0.contains("Counter") })
    }

    @Test func anObserverLifetimeSharedByTwoListeners_isRejectedForTheSecond_andNeverReachesTheFirst() {
        final class Sharing: SafeObserver {
            let observerLifetime: ObserverLifetime
            init(_ lifetime: ObserverLifetime) { observerLifetime = lifetime }
        }
        let lifetime = ObserverLifetime()
        let first = Sharing(lifetime)
        let second = Sharing(lifetime)
        let counter = Counter()
        let log = EventLog()
        let messages = EventLog()
        let firstToken = counter.safeObserve(\.count, by: first) { _, _, _ in log.record("first") }
        let secondToken = _Diagnostics.withHandler {
            messages.record($0)
        } body: {
            counter.safeObserve(\.count, by: second) { _, _, _ in log.record("second") }
        }
        #expect(firstToken.isActive)
        #expect(!secondToken.isActive)
        #expect(messages.entries.count == 1)
        #expect(
            messages.entries.first?.contains("Sharing") == true
                && messages.entries.first?.contains("ObserverLifetime") == true)
        // Unobserving through the second listener must not end the first's relation.
        counter.safeUnobserve(\.count, by: second)
        SafeObservation.removeAll(observedBy: second)
        #expect(SafeObservation.relations(observedBy: second).isEmpty)
        counter.count = 1
        #expect(log.entries == ["first"])
        #expect(SafeObservation.relations(observedBy: first) == [firstToken])
    }
}
