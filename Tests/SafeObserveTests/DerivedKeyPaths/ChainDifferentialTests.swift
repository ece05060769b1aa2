import Testing

@testable import SafeObserve

// A chain `\DifferentialRoot.a.b.value` whose links may be held by instances
// of subclasses: some override nothing, one overrides a link's getter to
// return another object than the one stored, one the last link's getter to
// double the stored value. Whatever path the derivation
// takes (the last link forwarding, a walk of storage, a tracked
// evaluation), what it delivers must be what reading the key path gives.

class DifferentialB: SafeObservable {
    @Observed var value = 0
}
final class DifferentialPlainB: DifferentialB {}
/// Its getter for `value` doubles what is stored.
final class DifferentialDoublingB: DifferentialB {
    override var value: Int {
        get { super.value * 2 }
        set { super.value = newValue }
    }
}

class DifferentialA: SafeObservable {
    @Observed var b: DifferentialB
    init(b: DifferentialB) { self.b = b }
}
final class DifferentialPlainA: DifferentialA {}
/// Its getter for `b` returns `other` whatever is stored.
final class DifferentialRedirectingA: DifferentialA {
    let other: DifferentialB
    init(b: DifferentialB, other: DifferentialB) {
        self.other = other
        super.init(b: b)
    }
    override var b: DifferentialB {
        get {
            _ = super.b
            return other
        }
        set { super.b = newValue }
    }
}

final class DifferentialRoot: SafeObservable {
    @Observed var a: DifferentialA
    @Observed var maybe: DifferentialA?
    init(a: DifferentialA) { self.a = a }
    /// Reads both chains, the second only when it is there.
    var sum: Int { a.b.value + (maybe?.b.value ?? -100) }
}

/// One key path's deliveries, checked against reading it.
private final class DifferentialProbe<Value: Equatable> {
    let name: String
    let read: () -> Value
    var delivered: [(old: Value?, new: Value)] = []
    var before: Value
    var countBefore = 0

    init(_ name: String, read: @escaping () -> Value) {
        self.name = name
        self.read = read
        before = read()
    }

    func willMutate() {
        before = read()
        countBefore = delivered.count
    }

    /// Whether the change (if any) was delivered with the values read.
    func didMutate(step: Int, operation: String, withOld: Bool) -> Bool {
        let after = read()
        guard before != after else { return true }
        guard let last = delivered.last, delivered.count > countBefore else {
            Issue.record("\(name), step \(step), \(operation): \(before)->\(after) was not delivered")
            return false
        }
        #expect(last.new == after, "\(name), step \(step), \(operation)")
        if withOld { #expect(last.old == before, "\(name), step \(step), \(operation)") }
        return last.new == after && (!withOld || last.old == before)
    }
}

@Suite("Chains through subclass instances deliver what the key path reads")
struct ChainDifferentialTests {
    @Test(arguments: [(1 as UInt64, false), (2, true), (3, false), (4, true)])
    func randomMutations_deliverEveryChangeOfTheKeyPathsValue(seed: UInt64, withOld: Bool) {
        var random = SplitMix64(seed: seed)
        let bs: [DifferentialB] = (0..<6).map { index in
            switch index % 3 {
            case 0: DifferentialB()
            case 1: DifferentialPlainB()
            default: DifferentialDoublingB()
            }
        }
        let `as`: [DifferentialA] = (0..<6).map { index in
            switch index % 3 {
            case 0: DifferentialA(b: bs[index])
            case 1: DifferentialPlainA(b: bs[index])
            default: DifferentialRedirectingA(b: bs[index], other: bs[(index + 1) % bs.count])
            }
        }
        let root = DifferentialRoot(a: `as`[0])
        let listener = Listener()
        let options: ObservationOptions = withOld ? [.old, .new] : [.new]
        let chain = DifferentialProbe("\\.a.b.value") { root.a.b.value }
        let optional = DifferentialProbe("\\.maybe?.b.value") { root.maybe?.b.value }
        let computed = DifferentialProbe("\\.sum") { root.sum }
        let tokens = [
            root.safeObserve(\.a.b.value, by: listener, options: options) { _, _, change in
                chain.delivered.append((change.oldValue, change.newValue!))
            },
            root.safeObserve(\.maybe?.b.value, by: listener, options: options) { _, _, change in
                optional.delivered.append((change.oldValue, change.newValue!))
            },
            root.safeObserve(\.sum, by: listener, options: options) { _, _, change in
                computed.delivered.append((change.oldValue, change.newValue!))
            },
        ]
        for step in 0..<2_000 {
            chain.willMutate()
            optional.willMutate()
            computed.willMutate()
            var operation = ""
            switch random.next() % 4 {
            case 0:
                let a = `as`[Int(random.next() % 6)]
                operation = "root.a = \(type(of: a))"
                root.a = a
            case 1:
                let a = random.next() % 3 == 0 ? nil : `as`[Int(random.next() % 6)]
                operation = "root.maybe = \(a.map { "\(type(of: $0))" } ?? "nil")"
                root.maybe = a
            case 2:
                let a = `as`[Int(random.next() % 6)]
                let b = bs[Int(random.next() % 6)]
                operation = "\(type(of: a)).b = \(type(of: b))"
                a.b = b
            default:
                let b = bs[Int(random.next() % 6)]
                let value = Int(random.next() % 50)
                operation = "\(type(of: b)).value = \(value)"
                b.value = value
            }
            let allDelivered = [
                chain.didMutate(step: step, operation: operation, withOld: withOld),
                optional.didMutate(step: step, operation: operation, withOld: withOld),
                computed.didMutate(step: step, operation: operation, withOld: withOld),
            ]
            if allDelivered.contains(false) { return }
        }
        let allActive = tokens.allSatisfy { $0.isActive }
        #expect(allActive)
        // The handlers hold the probes, which read `root`: end the relations.
        for token in tokens { token.invalidate() }
        withExtendedLifetime(listener) {}
    }
}
