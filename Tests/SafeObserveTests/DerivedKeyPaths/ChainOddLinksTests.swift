import Testing

@testable import SafeObserve

protocol OddValued: AnyObject {
    var value: Int { get }
}
final class OddLeafA: SafeObservable, OddValued {
    @Observed var value = 1
}
final class OddLeafB: SafeObservable, OddValued {
    var pad = (0, 0, 0)
    @Observed var value = 100
}
final class OddExistentialRoot: SafeObservable {
    @Observed var leaf: any OddValued = OddLeafA()
}

/// A generic middle link whose payload comes before the link: offsets differ per specialization.
final class OddGenericMiddle<Payload>: SafeObservable {
    var payload: Payload
    @Observed var leaf = OddLeafA()
    init(_ payload: Payload) { self.payload = payload }
}
final class OddGenericRoot<Payload>: SafeObservable {
    var payload: Payload
    @Observed var middle: OddGenericMiddle<Payload>
    init(_ payload: Payload) {
        self.payload = payload
        middle = OddGenericMiddle(payload)
    }
}

/// A middle link holding an unowned back reference before the link.
final class OddUnownedMiddle: SafeObservable {
    unowned let owner: OddUnownedRoot
    @Observed var leaf = OddLeafA()
    init(owner: OddUnownedRoot) { self.owner = owner }
}
final class OddUnownedRoot: SafeObservable {
    @Observed var middle: OddUnownedMiddle? = nil
}

/// Non-final middle with a subclass overriding the *last* link's holder getter.
class OddBaseMiddle: SafeObservable {
    @Observed var leaf = OddLeafA()
}
final class OddObservingMiddle: OddBaseMiddle {
    var sets = 0
    override var leaf: OddLeafA {
        didSet { sets += 1 }
    }
}
final class OddObservingRoot: SafeObservable {
    @Observed var middle: OddBaseMiddle = OddObservingMiddle()
}

final class OddSink {
    var values: [Int?] = []
    var olds: [Int?] = []
}

@Suite("Chains through odd links: existential, generic, unowned-holding and observing links")
struct ChainOddLinksTests {
    @Test func existentialLink() {
        let root = OddExistentialRoot()
        let sink = OddSink()
        let token = root.safeObserve(\.leaf.value, by: sink, options: [.new, .old]) { sink, _, change in
            sink.values.append(change.newValue)
            sink.olds.append(change.oldValue)
        }
        (root.leaf as! OddLeafA).value = 2
        let b = OddLeafB()
        root.leaf = b
        b.value = 101
        let a2 = OddLeafA()
        a2.value = 7
        root.leaf = a2
        a2.value = 8
        // The last component is a protocol requirement: re-tracked, never read from storage.
        #expect(!readsFromStorage(token))
        #expect(sink.values == [2, 100, 101, 7, 8])
        #expect(sink.olds == [1, 2, 100, 101, 7])
        token.invalidate()
    }

    @Test(arguments: [0, 1, 2])
    func genericLinks(kind: Int) {
        func run<P>(_ payload: P) {
            let root = OddGenericRoot(payload)
            let sink = OddSink()
            let token = root.safeObserve(\.middle.leaf.value, by: sink, options: [.new, .old]) { sink, _, change in
                sink.values.append(change.newValue)
                sink.olds.append(change.oldValue)
            }
            root.middle.leaf.value = 2
            let next = OddGenericMiddle(payload)
            next.leaf.value = 50
            root.middle = next
            next.leaf.value = 51
            let leaf = OddLeafA()
            leaf.value = 9
            next.leaf = leaf
            leaf.value = 10
            // Read from storage, at offsets of this specialization's own metadata.
            #expect(readsFromStorage(token))
            #expect(sink.values == [2, 50, 51, 9, 10])
            #expect(sink.olds == [1, 2, 50, 51, 9])
            token.invalidate()
        }
        switch kind {
        case 0: run(UInt8(1))
        case 1: run("a string payload that is long enough to be on the heap")
        default: run((1, 2, 3, 4, 5))
        }
    }

    @Test func unownedFieldBeforeLink() {
        let root = OddUnownedRoot()
        let sink = OddSink()
        let token = root.safeObserve(\.middle?.leaf.value, by: sink, options: [.new]) { sink, _, change in
            sink.values.append(change.newValue ?? nil)
        }
        let middle = OddUnownedMiddle(owner: root)
        root.middle = middle
        middle.leaf.value = 3
        root.middle = nil
        middle.leaf.value = 4
        #expect(sink.values == [1, 3, nil])
        token.invalidate()
    }

    @Test func observingSubclassOfMiddle() {
        let root = OddObservingRoot()
        let sink = OddSink()
        let token = root.safeObserve(\.middle.leaf.value, by: sink, options: [.new]) { sink, _, change in
            sink.values.append(change.newValue)
        }
        let leaf = OddLeafA()
        leaf.value = 5
        root.middle.leaf = leaf
        leaf.value = 6
        let plain = OddBaseMiddle()
        plain.leaf.value = 20
        root.middle = plain
        plain.leaf.value = 21
        #expect(readsFromStorage(token))
        #expect(sink.values == [5, 6, 20, 21])
        #expect((root.middle as? OddObservingMiddle) == nil)
        token.invalidate()
    }
}
