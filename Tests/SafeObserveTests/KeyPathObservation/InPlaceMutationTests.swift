import Testing

@testable import SafeObserve

private final class Inbox: SafeObservable {
    @Observed var messages: [Int] = []
    @Observed var text = ""
    @Observed var count = 0
}

private struct Rejected: Error {}

/// The address of an array's buffer: equal before and after a mutation iff it
/// happened in place (no copy).
private func bufferAddress(_ array: [Int]) -> UInt {
    array.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
}

/// In-place mutation of `@Observed` values (`append`, `+=`, `mutating` methods)
/// goes through the wrapper's `_modify`: the value is never copied when nobody
/// observes it, and only as the options need when observed.
@Suite("In-place mutation")
struct InPlaceMutationTests {
    @Test func unobservedAppends_mutateInPlace() {
        let inbox = Inbox()
        inbox.messages.reserveCapacity(64)
        let before = bufferAddress(inbox.messages)
        for value in 0..<32 { inbox.messages.append(value) }
        #expect(bufferAddress(inbox.messages) == before, "each append copied the array")
    }

    @Test func observedWithoutOld_appendsInPlace_andDeliversTheNewValue() {
        let inbox = Inbox()
        let listener = Listener()
        inbox.messages.reserveCapacity(64)
        inbox.safeObserve(\.messages, by: listener) { listener, _, change in
            listener.record("\(change.newValue!.count)")
        }
        let before = bufferAddress(inbox.messages)
        for value in 0..<3 { inbox.messages.append(value) }
        #expect(bufferAddress(inbox.messages) == before, "an append copied although no relation needs the old value")
        #expect(listener.log == ["1", "2", "3"])
    }

    @Test func observedWithOldAndPrior_deliversTheValuesBeforeAndAfter() {
        let inbox = Inbox()
        let listener = Listener()
        inbox.safeObserve(\.text, by: listener, options: [.old, .new, .prior]) { listener, _, change in
            listener.record(describe(change))
        }
        inbox.text += "a"
        inbox.text += "b"
        inbox.count += 1  // unobserved neighbour: nothing delivered
        #expect(listener.log == ["->nil prior", "->a", "a->nil prior", "a->ab"])
    }

    /// Swift writes an `inout` argument back even when the callee throws, so
    /// the mutation made before the throw is a change, delivered as such.
    @Test func aThrowingInPlaceAccess_isStillAChange_becauseTheValueIsWrittenBack() {
        func mutate(_ value: inout [Int]) throws {
            value.append(1)
            throw Rejected()
        }
        let inbox = Inbox()
        let listener = Listener()
        inbox.safeObserve(\.messages, by: listener, options: [.new, .prior]) { listener, _, change in
            listener.record(change.isPrior ? "prior" : "change")
        }
        #expect(throws: Rejected.self) { try mutate(&inbox.messages) }
        #expect(inbox.messages == [1])
        #expect(listener.log == ["prior", "change"])
    }

    @Test func aHandlerMutatingInPlaceAgain_isANestedChange() {
        let inbox = Inbox()
        let listener = Listener()
        inbox.safeObserve(\.messages, by: listener, options: [.old, .new]) { listener, inbox, change in
            listener.record("\(change.oldValue!.count)->\(change.newValue!.count)")
            if inbox.messages.count < 3 { inbox.messages.append(0) }
        }
        inbox.messages.append(0)
        #expect(inbox.messages.count == 3)
        #expect(listener.log.count == 3)
    }
}
