// The operations the benchmarks compare, for SafeObserve and each peer.
//
// Each scenario sets up outside `measure` and runs exactly `iterations`
// operations inside it, so that callgrind can count the instructions of
// `measure` alone (instructions.sh toggles collection on that symbol).

import CCallgrind
import Foundation
import Observation
import OpenCombine
import SafeObserve

/// One measurable operation.
public struct Scenario: Sendable {
    /// The row of the report, e.g. "notify 1 observer".
    public let operation: String
    /// Who performs it: "SafeObserve", "NotificationCenter", ...
    public let peer: String
    /// Operations per `run` call's unit of `iterations` (e.g. 100 deliveries per set).
    public let operationsPerIteration: Int
    /// The symbol pattern callgrind counts inside (`--toggle-collect`), or
    /// "" for the region `measure` brackets.
    public let collect: String
    /// Sets up, then calls `measure(iterations) { ... }` around the timed part.
    public let run: @Sendable (_ iterations: Int) -> Void

    /// Creates a scenario; `collect` defaults to the region `measure` brackets.
    public init(
        operation: String, peer: String, operationsPerIteration: Int, collect: String = "",
        run: @escaping @Sendable (_ iterations: Int) -> Void
    ) {
        self.operation = operation
        self.peer = peer
        self.operationsPerIteration = operationsPerIteration
        self.collect = collect
        self.run = run
    }

    /// "operation — peer", the benchmark's name.
    public var name: String { "\(operation) — \(peer)" }
}

/// The timed region: callgrind counts what runs between its two toggles
/// (client requests, so inlining or merging this function cannot hide the
/// region from it, as matching its symbol once did).
@inline(never)
public func measure(_ iterations: Int, _ body: (Int) -> Void) {
    ccallgrind_toggle_collect()
    body(iterations)
    ccallgrind_toggle_collect()
}

/// Releases `object` inside the timed region (teardown scenarios).
@inline(never)
public func measure<T: AnyObject>(releasing object: inout T?) {
    object = nil
    // A call after the release keeps it from being a tail call, which
    // callgrind would count as leaving this function.
    blackHole(0)
}

@inline(never)
func setOpaque(_ model: PlainModel, _ value: Int) { model.value = value }

@inline(never)
func setOpaque(_ model: SafeModel, _ value: Int) { model.value = value }

@inline(never)
func appendOpaque(_ list: PlainList, _ value: Int) { list.items.append(value) }

@inline(never)
func appendOpaque(_ list: SafeList, _ value: Int) { list.items.append(value) }

/// Keeps a value alive and opaque to the optimizer.
@inline(never)
public func blackHole<T>(_ value: T) {
    withExtendedLifetime(value) {}
}

// MARK: - Fixtures

/// The smallest object holding one reference: what "one allocation" costs.
public final class OneAllocation: Sendable {
    /// The reference it holds.
    public let reference: AnyObject & Sendable
    /// Creates an object holding `reference`.
    public init(_ reference: AnyObject & Sendable) { self.reference = reference }
}

/// What KVO-style code keeps its observation in: a property of an object.
public final class ObservationOwner: @unchecked Sendable {  // @unchecked: one thread at a time touches it
    /// The observation this owner keeps alive.
    public var observation: KeyValueObservation?
    /// An object this owner keeps alive (a bound's one allocation).
    public var allocation: OneAllocation?
    /// Creates an owner with no observation.
    public init() {}
}

/// The observed model.
public final class SafeModel: SafeObservable {
    /// The observed property.
    @Observed public var value = 0
    /// Creates a model.
    public init() {}
}

/// A model with many cells, each observable as a derived key path.
public final class CellsModel: SafeObservable {
    /// The observed cells.
    @Observed public var cells = Array(repeating: 0, count: 40_000)
    /// Creates a model.
    public init() {}
}

/// A model that generic code observes through a class constraint.
public class OpenModel: SafeObservable {
    /// Gives the class a layout of its own: with `SafeModel`'s, the
    /// optimizer merges the two setters and `setOpaque` no longer inlines one.
    public let tag = 0
    /// The observed property.
    @Observed public var value = 0
    /// Creates a model.
    public init() {}
}

/// A model observed from the main actor.
public final class MainActorModel: SafeObservable {
    /// Gives the class a layout of its own (see `OpenModel.tag`).
    public let tag = 1
    /// The observed property.
    @Observed public var value = 0
    /// Creates a model.
    public init() {}
}

/// Notify 1 with a handler registered from the main actor, told about a
/// change made on the main actor. (A model type of its own: with
/// `SafeModel`'s, the optimizer merges this loop with the nonisolated row's.)
@MainActor
func measureMainActorNotify(_ n: Int) {
    let model = MainActorModel()
    let sink = Sink()
    model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
    measure(n) { n in for i in 0..<n { model.value = i } }
    blackHole(sink)
}

/// A subclass: `\SubModel.value` is `OpenModel.value` spelled from it.
public final class SubModel: OpenModel {}

/// Observes `value` with a key-path literal formed in generic code: a new
/// key-path object on every call.
@inline(never)
func observeValueGenerically<Model: OpenModel>(of model: Model, by sink: Sink) -> ObservationToken {
    model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
}

/// Only forms the key path `observeValueGenerically` forms (and drops it):
/// what the runtime charges generic code before any registration runs.
@inline(never)
func formValueKeyPathGenerically<Model: OpenModel>(of model: Model) -> Int {
    let keyPath: KeyPath<Model, Int> = \.value
    return ObjectIdentifier(keyPath).hashValue
}

/// Forms `\CellsModel.cells[index]` and drops it: the derived row's key
/// path, with no registration.
@inline(never)
func formCellKeyPath(_ index: Int) -> Int {
    let keyPath = \CellsModel.cells[index]
    return ObjectIdentifier(keyPath).hashValue
}

/// `keyPath`, hidden from the optimizer.
@inline(never)
func opaqueKeyPath<Root, Value>(_ keyPath: KeyPath<Root, Value>) -> KeyPath<Root, Value> {
    keyPath
}

/// The same registration with a literal formed in non-generic code.
@inline(never)
func observeValue(of model: OpenModel, by sink: Sink) -> ObservationToken {
    model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
}

/// The same model with a plain stored property (the floor).
public final class PlainModel {
    /// A plain stored property.
    public var value = 0
    /// Creates a model.
    public init() {}
}

/// A list whose items are appended to in place (the floor).
public final class PlainList {
    /// A plain stored array.
    public var items: [Int] = []
    /// Creates an empty list.
    public init() {}
}

/// The same list with an `@Observed` array.
public final class SafeList: SafeObservable {
    /// An observable array.
    @Observed public var items: [Int] = []
    /// Creates an empty list.
    public init() {}
}

/// A SafeObserve model that Observation sees too (issue 32, part 2).
public final class SafeObservableModel: SafeObservable, Observable {
    /// An observable property, reported to Observation as well.
    @Observed public var value = 0
    /// Creates a model.
    public init() {}
}

/// The same model with the Observation module (a peer).
@Observable
// @unchecked Sendable: each scenario uses it on one thread at a time (the rows
// that observe it from nonisolated code pass `isolation: nil`, which takes a
// `Sendable` model).
public final class ObservableModel: @unchecked Sendable {
    /// An `@Observable` property.
    public var value = 0
    /// Creates a model.
    public init() {}
}

/// An accumulator behind a pointer: adding to it costs two instructions and
/// no dynamic exclusivity check (a class's stored `var` would cost about 57
/// instructions per `+=`, the same for every peer, hiding what the mechanisms
/// themselves cost).
public struct Accumulator {
    private let storage: UnsafeMutablePointer<Int>

    init() {
        storage = .allocate(capacity: 1)
        storage.initialize(to: 0)
    }

    func deallocate() { storage.deallocate() }

    /// The sum so far.
    public var total: Int { storage.pointee }

    /// Adds `value`.
    @inline(__always)
    public func add(_ value: Int) { storage.pointee &+= value }
}

/// A plain listener that accumulates what it receives.
public final class Sink: @unchecked Sendable {  // @unchecked: one thread at a time touches a sink

    private let accumulator = Accumulator()
    /// The sum of the values received.
    public var total: Int { accumulator.total }
    /// Adds `value` to the total.
    @inline(__always) public func add(_ value: Int) { accumulator.add(value) }
    /// Creates a sink.
    public init() {}
    deinit { accumulator.deallocate() }
}

/// A `SafeObserver` listener that accumulates what it receives.
public final class OptInSink: SafeObserver, @unchecked Sendable {  // @unchecked: one thread at a time

    /// Ends the sink's relations in its deinit.
    public let observerLifetime = ObserverLifetime()
    private let accumulator = Accumulator()
    /// The sum of the values received.
    public var total: Int { accumulator.total }
    /// Adds `value` to the total.
    @inline(__always) public func add(_ value: Int) { accumulator.add(value) }
    /// Creates a sink.
    public init() {}
    deinit { accumulator.deallocate() }
}

/// Closures stored where the optimizer cannot see through them.
final class ClosureBox: @unchecked Sendable {
    // @unchecked Sendable: used from one thread.
    var closures: [(Int) -> Void] = []
}

private let notification = Notification.Name("SafeObserveBenchmark")

/// Holds subscriptions so that releasing one object cancels them all.
final class CancellableBox {
    let cancellables: [AnyCancellable]
    init(_ cancellables: [AnyCancellable]) { self.cancellables = cancellables }
}

// MARK: - Scenarios

/// A computed property over two `@Observed` ones.
public final class ComputedModel: SafeObservable {
    /// Not observed; only moves `a` to another offset, so that its setter is
    /// not merged with `SafeModel.value`'s (which would add a jump to that
    /// row).
    public var label = ""
    /// The first term.
    @Observed public var a = 0
    /// The second term.
    @Observed public var b = 1
    /// Computed: reads both.
    public var sum: Int { a + b }
    /// Creates a model.
    public init() {}
}

/// The same with `@Observable`.
@Observable
public final class ObservableComputedModel {
    /// The first term.
    public var a = 0
    /// The second term.
    public var b = 1
    /// Computed: reads both.
    public var sum: Int { a + b }
    /// Creates a model.
    public init() {}
}

/// Every scenario, in report order.
public enum Scenarios {
    /// The scenarios `InstructionCounts list` numbers.
    public static let all: [Scenario] =
        setUnobserved + get + notifyOne + notifyHundred + addRemove + teardown + scaling + chains + rebinding
        + computed + cliffs + notifications + controller

    /// Synchronous scenarios added after the asynchronous ones
    /// (``concurrent``), numbered after them: from ``laterStart`` on.
    public static let later: [Scenario] = observationSeesSafeModels + cellReuse + observableRegistration + keyPathFloors

    /// The number of the first of ``later``.
    public static var laterStart: Int { all.count + concurrent.count }

    // (issue 33) What the derived row's caller pays before SafeObserve
    // runs: `\.cells[index]` is a key path with a subscript argument, which
    // the runtime instantiates anew on every evaluation of the literal
    // (resolving its argument's type by mangled name each time).
    static let keyPathFloors: [Scenario] = [
        Scenario(
            operation: "observe \\.cells[i], derived", peer: "forming \\.cells[i] alone (floor)",
            operationsPerIteration: 1
        ) { n in
            var total = 0
            measure(n) { n in
                for index in 0..<n { total &+= formCellKeyPath(index) }
            }
            blackHole(total)
        },
        // The chain row's change, unobserved, and one read of its key path:
        // what any observer of an optional chain must at least do per change
        // (the standard library projects an optional-chaining key path
        // component by component).
        Scenario(
            operation: "chain of depth 8: first link replaced",
            peer: "unobserved: the set and one read of the key path (floor)", operationsPerIteration: 1
        ) { n in
            let root = ChainNode()
            // Opaque, as the key path an observer is handed: a literal the
            // optimizer sees is folded into plain property reads.
            let keyPath = opaqueKeyPath(\ChainNode.next?.next?.next?.next?.next?.next?.next?.value)
            let tails = [ChainNode.chain(length: 7), ChainNode.chain(length: 7)]
            var total = 0
            measure(n) { n in
                for i in 0..<n {
                    root.next = tails[i & 1]
                    total &+= root[keyPath: keyPath] ?? 0
                }
            }
            blackHole((root, tails, total))
        },
    ]

    // (issue 16) A computed property is re-tracked on every change: it may
    // read other properties after it.
    static let computed: [Scenario] = [
        Scenario(operation: "computed property re-tracked", peer: "SafeObserve", operationsPerIteration: 1) { n in
            let model = ComputedModel()
            let sink = Sink()
            model.safeObserve(\.sum, by: sink) { sink, _, change in sink.add(change.newValue!) }
            measure(n) { n in for i in 0..<n { model.a = i } }
            blackHole((model, sink))
        },
        Scenario(
            operation: "computed property re-tracked", peer: "Observation (track + mutate)", operationsPerIteration: 1
        ) { n in
            let model = ObservableComputedModel()
            let sink = Sink()
            measure(n) { n in
                for i in 0..<n {
                    withObservationTracking {
                        _ = model.sum
                    } onChange: {
                        sink.add(1)
                    }
                    model.a = i
                }
            }
            blackHole((model, sink))
        },
    ]

    // (issue 16) The controller's bookkeeping stays O(k) in the key paths of
    // the one object, whatever else it observes.
    static let controller: [Scenario] = [
        Scenario(
            operation: "controller observe + unobserve", peer: "SafeObserve, no other relation",
            operationsPerIteration: 1
        ) { n in
            let owner = Sink()
            let controller = ObservationController(observer: owner)
            let model = SafeModel()
            measure(n) { n in
                for _ in 0..<n {
                    controller.observe(model, keyPath: \.value, isolation: nil) { owner, _, change in
                        owner.add(change.newValue!)
                    }
                    controller.unobserve(model, keyPath: \.value)
                }
            }
            blackHole((controller, owner))
        },
        Scenario(
            operation: "controller observe + unobserve", peer: "SafeObserve, 10,000 other relations",
            operationsPerIteration: 1
        ) { n in
            let owner = Sink()
            let controller = ObservationController(observer: owner)
            let others = (0..<10_000).map { _ in SafeModel() }
            for other in others {
                controller.observe(other, keyPath: \.value, isolation: nil) { owner, _, change in
                    owner.add(change.newValue!)
                }
            }
            let model = SafeModel()
            measure(n) { n in
                for _ in 0..<n {
                    controller.observe(model, keyPath: \.value, isolation: nil) { owner, _, change in
                        owner.add(change.newValue!)
                    }
                    controller.unobserve(model, keyPath: \.value)
                }
            }
            blackHole((controller, owner, others))
        },
    ]

    // (issue 13) Patterns whose cost must stay proportional to live relations.
    static let cliffs: [Scenario] = [
        Scenario(operation: "append to an [Int] property", peer: "plain stored property", operationsPerIteration: 1) {
            n in
            let list = PlainList()
            measure(n) { n in for i in 0..<n { list.items.append(i) } }
            blackHole(list)
        },
        Scenario(operation: "append to an [Int] property", peer: "SafeObserve @Observed", operationsPerIteration: 1) {
            n in
            let list = SafeList()
            measure(n) { n in for i in 0..<n { list.items.append(i) } }
            blackHole(list)
        },
        // Each append behind one non-inlined call, so that the optimizer
        // cannot merge the loop's accesses into one: the fair comparison
        // (as for "set, unobserved, opaque call").
        Scenario(
            operation: "append to an [Int] property, opaque call", peer: "plain stored property",
            operationsPerIteration: 1
        ) { n in
            let list = PlainList()
            measure(n) { n in for i in 0..<n { appendOpaque(list, i) } }
            blackHole(list)
        },
        Scenario(
            operation: "append to an [Int] property, opaque call", peer: "SafeObserve @Observed",
            operationsPerIteration: 1
        ) { n in
            let list = SafeList()
            measure(n) { n in for i in 0..<n { appendOpaque(list, i) } }
            blackHole(list)
        },
        Scenario(
            operation: "append to an [Int] property", peer: "SafeObserve @Observed, observed [.new]",
            operationsPerIteration: 1
        ) { n in
            let list = SafeList()
            let sink = Sink()
            list.safeObserve(\.items, by: sink) { sink, _, change in sink.add(change.newValue!.count) }
            measure(n) { n in for i in 0..<n { list.items.append(i) } }
            blackHole((list, sink))
        },
        // Issue 14: a change handed to an asynchronous sequence (the consumer
        // side, `next()`, is not counted: it needs a task).
        Scenario(
            operation: "yield a change to an async sequence", peer: "AsyncStream yield, newest 1 (floor)",
            operationsPerIteration: 1
        ) { n in
            // The same element type as SafeObserve's, so the generic stream
            // does the same work per element.
            let (stream, continuation) = AsyncStream.makeStream(
                of: ObservedChange<Int>.self, bufferingPolicy: .bufferingNewest(1))
            measure(n) { n in for i in 0..<n { continuation.yield(ObservedChange(newValue: i, oldValue: nil)) } }
            blackHole(stream)
        },
        Scenario(
            operation: "yield a change to an async sequence", peer: "SafeObserve values(), newest 1",
            operationsPerIteration: 1
        ) { n in
            let model = SafeModel()
            let values = model.values(\.value).makeAsyncIterator()
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole((model, values))
        },
        registerNewListener(afterPeak: 0),
        registerNewListener(afterPeak: 100_000),
    ]

    /// Registers `n` new plain listeners, after `peak` others observed an
    /// object and died with it (0: a cold process).
    static func registerNewListener(afterPeak peak: Int) -> Scenario {
        Scenario(
            operation: "register a new plain listener",
            peer: peak == 0 ? "SafeObserve, cold" : "SafeObserve, after a \(peak) listener peak",
            operationsPerIteration: 1
        ) { n in
            if peak > 0 {
                var object: SafeModel? = SafeModel()
                var sinks: [Sink]? = (0..<peak).map { _ in Sink() }
                for sink in sinks! { object!.safeObserve(\.value, by: sink) { _, _, _ in } }
                sinks = nil
                object = nil
            }
            let model = SafeModel()
            let sinks = (0..<n).map { _ in Sink() }
            model.safeObserve(\.value, by: Sink()) { _, _, _ in }.invalidate()  // first observation: sentinel
            measure(n) { n in
                for index in 0..<n { model.safeObserve(\.value, by: sinks[index]) { _, _, _ in } }
            }
            blackHole((model, sinks))
        }
    }

    // (1) A property set that nobody observes.
    static let setUnobserved: [Scenario] = [
        // The same store, each behind one non-inlined call, so the optimizer
        // cannot fold the loop away: the fair comparison for target (1).
        Scenario(operation: "set, unobserved, opaque call", peer: "plain stored property", operationsPerIteration: 1) {
            n in
            let model = PlainModel()
            measure(n) { n in for i in 0..<n { setOpaque(model, i) } }
            blackHole(model)
        },
        Scenario(operation: "set, unobserved, opaque call", peer: "SafeObserve @Observed", operationsPerIteration: 1) {
            n in
            let model = SafeModel()
            measure(n) { n in for i in 0..<n { setOpaque(model, i) } }
            blackHole(model)
        },
        Scenario(operation: "set, unobserved", peer: "plain stored property", operationsPerIteration: 1) { n in
            let model = PlainModel()
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(model)
        },
        Scenario(operation: "set, unobserved", peer: "SafeObserve @Observed", operationsPerIteration: 1) { n in
            let model = SafeModel()
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(model)
        },
        Scenario(operation: "set, unobserved", peer: "SafeObserve @Observed, was observed", operationsPerIteration: 1) {
            n in
            let model = SafeModel()
            let sink = Sink()
            model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate()
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(model)
        },
        Scenario(operation: "set, unobserved", peer: "Observation @Observable", operationsPerIteration: 1) { n in
            let model = ObservableModel()
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(model)
        },
    ]

    // Reads (not a target, but every read pays it).
    static let get: [Scenario] = [
        Scenario(operation: "get", peer: "plain stored property", operationsPerIteration: 1) { n in
            let model = PlainModel()
            let sink = Sink()
            measure(n) { n in for _ in 0..<n { sink.add(model.value) } }
            blackHole(sink)
        },
        Scenario(operation: "get", peer: "SafeObserve @Observed", operationsPerIteration: 1) { n in
            let model = SafeModel()
            let sink = Sink()
            measure(n) { n in for _ in 0..<n { sink.add(model.value) } }
            blackHole(sink)
        },
        Scenario(operation: "get", peer: "Observation @Observable", operationsPerIteration: 1) { n in
            let model = ObservableModel()
            let sink = Sink()
            measure(n) { n in for _ in 0..<n { sink.add(model.value) } }
            blackHole(sink)
        },
    ]

    // (2) One change delivered to one observer.
    static let notifyOne: [Scenario] = [
        Scenario(operation: "notify 1 observer", peer: "closure call (floor)", operationsPerIteration: 1) { n in
            let sink = Sink()
            let box = ClosureBox()
            box.closures = [{ sink.add($0) }]
            measure(n) { n in
                let closure = box.closures[0]
                for i in 0..<n { closure(i) }
            }
            blackHole(sink)
        },
        Scenario(operation: "notify 1 observer", peer: "SafeObserve", operationsPerIteration: 1) { n in
            let model = SafeModel()
            let sink = Sink()
            model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(sink)
        },
        // Issue 13 (5): one listener registered through the superclass's and
        // the subclass's key path: one relation, one delivery.
        Scenario(
            operation: "notify 1 observer", peer: "SafeObserve, as \\Base.value and \\Sub.value",
            operationsPerIteration: 1
        ) { n in
            let model = SubModel()
            let sink = Sink()
            (model as OpenModel).safeObserve(\OpenModel.value, by: sink) { sink, _, change in
                sink.add(change.newValue!)
            }
            model.safeObserve(\SubModel.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(sink)
        },
        // Issue 14: a handler registered from the main actor, told about a
        // change made on the main actor (synchronous, as a nonisolated one).
        Scenario(
            operation: "notify 1 observer", peer: "SafeObserve, main-actor handler, same actor",
            operationsPerIteration: 1
        ) { n in
            MainActor.assumeIsolated { measureMainActorNotify(n) }
        },
        Scenario(operation: "notify 1 observer", peer: "SafeObserve, SafeObserver listener", operationsPerIteration: 1)
        {
            n in
            let model = SafeModel()
            let sink = OptInSink()
            model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(sink)
        },
        Scenario(operation: "notify 1 observer", peer: "NotificationCenter", operationsPerIteration: 1) { n in
            let center = NotificationCenter()
            let sink = Sink()
            let observer = center.addObserver(forName: notification, object: nil, queue: nil) { _ in
                sink.add(1)
            }
            measure(n) { n in for _ in 0..<n { center.post(name: notification, object: nil) } }
            center.removeObserver(observer)
            blackHole(sink)
        },
        Scenario(operation: "notify 1 observer", peer: "OpenCombine CurrentValueSubject", operationsPerIteration: 1) {
            n in
            let subject = CurrentValueSubject<Int, Never>(0)
            let sink = Sink()
            let cancellable = subject.sink { sink.add($0) }
            measure(n) { n in for i in 0..<n { subject.send(i) } }
            cancellable.cancel()
            blackHole(sink)
        },
        Scenario(operation: "notify 1 observer", peer: "Observation (track + mutate)", operationsPerIteration: 1) {
            n in
            let model = ObservableModel()
            let sink = Sink()
            measure(n) { n in
                for i in 0..<n {
                    withObservationTracking {
                        _ = model.value
                    } onChange: {
                        sink.add(1)
                    }
                    model.value = i
                }
            }
            blackHole(sink)
        },
    ]

    // (2) One change delivered to 100 observers (per delivery).
    static let notifyHundred: [Scenario] = [
        Scenario(operation: "notify 100 observers", peer: "loop over 100 closures (floor)", operationsPerIteration: 100)
        {
            n in
            let sink = Sink()
            let box = ClosureBox()
            box.closures = (0..<100).map { _ in { sink.add($0) } }
            measure(n) { n in
                let closures = box.closures
                for i in 0..<n { for closure in closures { closure(i) } }
            }
            blackHole(sink)
        },
        Scenario(operation: "notify 100 observers", peer: "SafeObserve", operationsPerIteration: 100) { n in
            let model = SafeModel()
            let sinks = (0..<100).map { _ in Sink() }
            for sink in sinks {
                model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            }
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(sinks)
        },
        Scenario(operation: "notify 100 observers", peer: "NotificationCenter", operationsPerIteration: 100) { n in
            let center = NotificationCenter()
            let sink = Sink()
            let observers = (0..<100).map { _ in
                center.addObserver(forName: notification, object: nil, queue: nil) { _ in sink.add(1) }
            }
            measure(n) { n in for _ in 0..<n { center.post(name: notification, object: nil) } }
            observers.forEach(center.removeObserver)
            blackHole(sink)
        },
        Scenario(
            operation: "notify 100 observers", peer: "OpenCombine CurrentValueSubject", operationsPerIteration: 100
        ) {
            n in
            let subject = CurrentValueSubject<Int, Never>(0)
            let sink = Sink()
            let cancellables = (0..<100).map { _ in subject.sink { sink.add($0) } }
            measure(n) { n in for i in 0..<n { subject.send(i) } }
            for cancellable in cancellables { cancellable.cancel() }
            blackHole(sink)
        },
    ]

    // (3) Add + remove one observation.
    static let addRemove: [Scenario] = [
        Scenario(operation: "add + remove", peer: "SafeObserve (safeUnobserve)", operationsPerIteration: 1) { n in
            let model = SafeModel()
            let sink = Sink()
            model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate()  // first observation: sentinel
            measure(n) { n in
                for _ in 0..<n {
                    model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
                    model.safeUnobserve(\.value, by: sink)
                }
            }
            blackHole(sink)
        },
        Scenario(operation: "add + remove", peer: "SafeObserve (token.invalidate)", operationsPerIteration: 1) { n in
            let model = SafeModel()
            let sink = Sink()
            model.safeObserve(\.value, by: sink, isolation: nil) { _, _, _ in }.invalidate()
            measure(n) { n in
                for _ in 0..<n {
                    model.safeObserve(\.value, by: sink, isolation: nil) { sink, _, change in
                        sink.add(change.newValue!)
                    }
                    .invalidate()
                }
            }
            blackHole(sink)
        },
        Scenario(operation: "add + remove", peer: "SafeObserve, literal in a function", operationsPerIteration: 1) {
            n in
            let model = OpenModel()
            let sink = Sink()
            observeValue(of: model, by: sink).invalidate()
            measure(n) { n in
                for _ in 0..<n { observeValue(of: model, by: sink).invalidate() }
            }
            blackHole(sink)
        },
        // Issue 13 (3): the k-th derived key path of one listener on one
        // object (k from n to 3n) against one per listener.
        Scenario(
            operation: "observe \\.cells[i], derived", peer: "SafeObserve, one listener, k on the object",
            operationsPerIteration: 1
        ) { n in
            let model = CellsModel()
            let sink = Sink()
            measure(n) { n in
                for index in 0..<n { model.safeObserve(\.cells[index], by: sink) { _, _, _ in } }
            }
            blackHole((model, sink))
        },
        Scenario(
            operation: "observe \\.cells[i], derived", peer: "SafeObserve, a listener each", operationsPerIteration: 1
        ) { n in
            let model = CellsModel()
            let sinks = (0..<(3 * n)).map { _ in Sink() }
            measure(n) { n in
                for index in 0..<n { model.safeObserve(\.cells[index], by: sinks[index]) { _, _, _ in } }
            }
            blackHole((model, sinks))
        },
        Scenario(
            operation: "add + remove", peer: "SafeObserve, literal in a generic function", operationsPerIteration: 1
        ) { n in
            let model = OpenModel()
            let sink = Sink()
            observeValue(of: model as OpenModel, by: sink).invalidate()
            measure(n) { n in
                for _ in 0..<n { observeValueGenerically(of: model, by: sink).invalidate() }
            }
            blackHole(sink)
        },
        Scenario(
            operation: "add + remove", peer: "forming that generic key path alone (floor)", operationsPerIteration: 1
        ) { n in
            let model = OpenModel()
            var total = 0
            measure(n) { n in
                for _ in 0..<n { total &+= formValueKeyPathGenerically(of: model) }
            }
            blackHole(total)
        },
        // What a KVO-shaped handler is compared with: its handler has no
        // listener parameter, so it captures what it uses, like this one.
        Scenario(
            operation: "add + remove", peer: "SafeObserve (token.invalidate), capturing handler",
            operationsPerIteration: 1
        ) { n in
            let model = SafeModel()
            let sink = Sink()
            model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate()
            measure(n) { n in
                for _ in 0..<n {
                    model.safeObserve(\.value, by: sink) { _, _, change in sink.add(change.newValue!) }.invalidate()
                }
            }
            blackHole(sink)
        },
        // Issue 17's bounds for a KeyValueObservation: a token-based add +
        // remove plus one allocation of a small object kept in a property
        // (replaced each time), with a handler capturing nothing and with one
        // capturing the sink.
        Scenario(
            operation: "add + remove", peer: "bound: token.invalidate + one allocation", operationsPerIteration: 1
        ) { n in
            let model = SafeModel()
            let sink = Sink()
            let owner = ObservationOwner()
            model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate()
            owner.allocation = OneAllocation(sink)
            measure(n) { n in
                for _ in 0..<n {
                    model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
                        .invalidate()
                    owner.allocation = OneAllocation(sink)
                }
            }
            blackHole((sink, owner))
        },
        Scenario(
            operation: "add + remove",
            peer: "bound: capturing handler's token + one allocation", operationsPerIteration: 1
        ) { n in
            let model = SafeModel()
            let sink = Sink()
            let owner = ObservationOwner()
            model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate()
            owner.allocation = OneAllocation(sink)
            measure(n) { n in
                for _ in 0..<n {
                    model.safeObserve(\.value, by: sink) { _, _, change in sink.add(change.newValue!) }.invalidate()
                    owner.allocation = OneAllocation(sink)
                }
            }
            blackHole((sink, owner))
        },
        // Issue 17: KVO's shape, an observation object owning the relation.
        Scenario(
            operation: "add + remove", peer: "SafeObserve, KeyValueObservation (observe + invalidate)",
            operationsPerIteration: 1
        ) { n in
            let model = SafeModel()
            let sink = Sink()
            model.observe(\.value, options: .new, isolation: nil) { _, _ in }.invalidate()
            measure(n) { n in
                for _ in 0..<n {
                    model.observe(\.value, options: .new, isolation: nil) { _, change in sink.add(change.newValue!) }
                        .invalidate()
                }
            }
            blackHole(sink)
        },
        // KVO code mostly keeps an observation in a property and ends it by
        // releasing it (`self.observation = nil`): stored there, the
        // observation is a heap object, never promoted to the stack. Released
        // before the next one is made, as every add + remove row leaves no
        // other relation on the property.
        Scenario(
            operation: "add + remove", peer: "SafeObserve, KeyValueObservation (observe + release)",
            operationsPerIteration: 1
        ) { n in
            let model = SafeModel()
            let sink = Sink()
            let owner = ObservationOwner()
            owner.observation = model.observe(\.value, options: .new, isolation: nil) { _, _ in }
            owner.observation = nil
            measure(n) { n in
                for _ in 0..<n {
                    owner.observation = model.observe(\.value, options: .new, isolation: nil) { _, change in
                        sink.add(change.newValue!)
                    }
                    owner.observation = nil
                }
            }
            blackHole((sink, owner))
        },
        // The same with a handler that uses only its arguments, as the token
        // rows' handlers do: no closure context is allocated.
        Scenario(
            operation: "add + remove",
            peer: "SafeObserve, KeyValueObservation (release), non-capturing",
            operationsPerIteration: 1
        ) { n in
            let model = SafeModel()
            let owner = ObservationOwner()
            owner.observation = model.observe(\.value, options: .new, isolation: nil) { _, _ in }
            owner.observation = nil
            measure(n) { n in
                for _ in 0..<n {
                    owner.observation = model.observe(\.value, options: .new, isolation: nil) { _, change in
                        blackHole(change.newValue!)
                    }
                    owner.observation = nil
                }
            }
            blackHole(owner)
        },
        Scenario(operation: "add + remove", peer: "SafeObserve, SafeObserver listener", operationsPerIteration: 1) {
            n in
            let model = SafeModel()
            let sink = OptInSink()
            model.safeObserve(\.value, by: sink, isolation: nil) { _, _, _ in }.invalidate()
            measure(n) { n in
                for _ in 0..<n {
                    model.safeObserve(\.value, by: sink, isolation: nil) { sink, _, change in
                        sink.add(change.newValue!)
                    }
                    .invalidate()
                }
            }
            blackHole(sink)
        },
        Scenario(operation: "add + remove", peer: "NotificationCenter", operationsPerIteration: 1) { n in
            let center = NotificationCenter()
            let sink = Sink()
            measure(n) { n in
                for _ in 0..<n {
                    let observer = center.addObserver(forName: notification, object: nil, queue: nil) { _ in
                        sink.add(1)
                    }
                    center.removeObserver(observer)
                }
            }
            blackHole(sink)
        },
        Scenario(operation: "add + remove", peer: "OpenCombine CurrentValueSubject", operationsPerIteration: 1) { n in
            let subject = CurrentValueSubject<Int, Never>(0)
            let sink = Sink()
            measure(n) { n in
                for _ in 0..<n {
                    subject.sink { sink.add($0) }.cancel()
                }
            }
            blackHole(sink)
        },
    ]

    // (4) Teardown of 1,000 relations (per relation).
    static let teardown: [Scenario] = [
        Scenario(
            operation: "teardown: object with 1,000 relations", peer: "SafeObserve", operationsPerIteration: 1_000,
            collect: "*SafeModelCfD*"
        ) {
            n in
            let sinks = (0..<1_000).map { _ in Sink() }
            for _ in 0..<n {
                var model: SafeModel? = SafeModel()
                for sink in sinks { model!.safeObserve(\.value, by: sink) { _, _, _ in } }
                measure(releasing: &model)
            }
            blackHole(sinks)
        },
        Scenario(
            operation: "teardown: listener with 1,000 relations", peer: "SafeObserve", operationsPerIteration: 1_000,
            collect: "*OptInSinkCfD*"
        ) {
            n in
            let models = (0..<1_000).map { _ in SafeModel() }
            for _ in 0..<n {
                var sink: OptInSink? = OptInSink()
                for model in models { model.safeObserve(\.value, by: sink!) { _, _, _ in } }
                measure(releasing: &sink)
            }
            blackHole(models)
        },
        Scenario(
            operation: "teardown: object with 1,000 relations", peer: "NotificationCenter",
            operationsPerIteration: 1_000, collect: "*NotificationCenterCfD*"
        ) {
            n in
            let sink = Sink()
            for _ in 0..<n {
                var center: NotificationCenter? = NotificationCenter()
                for _ in 0..<1_000 {
                    _ = center!.addObserver(forName: notification, object: nil, queue: nil) { _ in sink.add(1) }
                }
                measure(releasing: &center)
            }
        },
        Scenario(
            operation: "teardown: object with 1,000 relations", peer: "OpenCombine CurrentValueSubject",
            operationsPerIteration: 1_000, collect: "*CancellableBoxCfD*"
        ) {
            n in
            let sink = Sink()
            for _ in 0..<n {
                var subject: CurrentValueSubject<Int, Never>? = CurrentValueSubject(0)
                var cancellables = (0..<1_000).map { _ in subject!.sink { sink.add($0) } }
                let box = CancellableBox(cancellables)
                cancellables = []
                var boxed: CancellableBox? = box
                measure(releasing: &boxed)
                subject = nil
            }
        },
    ]

    // (6) Scaling: 10,000 relations on unrelated objects must not slow a delivery.
    static let scaling: [Scenario] = [
        Scenario(
            operation: "notify 1 observer, 10,000 unrelated relations", peer: "SafeObserve", operationsPerIteration: 1
        ) {
            n in
            let others = (0..<10_000).map { _ in SafeModel() }
            let otherSinks = (0..<100).map { _ in Sink() }
            for (index, other) in others.enumerated() {
                other.safeObserve(\.value, by: otherSinks[index % 100]) { _, _, _ in }
            }
            let model = SafeModel()
            let sink = Sink()
            model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole((others, otherSinks, sink))
        },
        // Two threads, each changing its own object: per delivery, summed
        // over both threads (callgrind counts each thread's `measure`).
        Scenario(
            operation: "notify 1 observer, 2 threads on different objects", peer: "SafeObserve",
            operationsPerIteration: 2
        ) {
            n in
            let models = [SafeModel(), SafeModel()]
            let sinks = [Sink(), Sink()]
            for (model, sink) in zip(models, sinks) {
                model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            }
            let done = DispatchGroup()
            for model in models.map(UncheckedBox.init) {
                done.enter()
                Thread {
                    measure(n) { n in for i in 0..<n { model.value.value = i } }
                    done.leave()
                }.start()
            }
            // Bounded (issue 31, item 19): a thread that never finishes fails
            // the scenario instead of hanging it.
            if done.wait(timeout: .now() + .seconds(Watchdog.waitLimit)) == .timedOut {
                Watchdog.fail("waited more than \(Watchdog.waitLimit) s for both threads (BENCHMARK_WAIT_LIMIT)")
            }
            blackHole((models, sinks))
        },
    ]

    // (7) A change at the end of a chain `\.b.c.value`, and the replacement of
    // an intermediate (which re-binds the chain).
    static let chains: [Scenario] = [
        Scenario(operation: "chain \\.b.c.value: leaf change", peer: "SafeObserve", operationsPerIteration: 1) { n in
            let root = ChainRoot()
            let sink = Sink()
            root.safeObserve(\.b.c.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            let leaf = root.b.c
            measure(n) { n in for i in 0..<n { leaf.value = i } }
            blackHole((root, sink))
        },
        Scenario(
            operation: "chain \\.b.c.value: leaf change", peer: "Observation (track + mutate)",
            operationsPerIteration: 1
        ) { n in
            let root = ObservableChainRoot()
            let sink = Sink()
            let leaf = root.b.c
            measure(n) { n in
                for i in 0..<n {
                    withObservationTracking {
                        _ = root.b.c.value
                    } onChange: {
                        sink.add(1)
                    }
                    leaf.value = i
                }
            }
            blackHole((root, sink))
        },
        Scenario(
            operation: "chain \\.b.c.value: intermediate replaced", peer: "SafeObserve", operationsPerIteration: 1
        ) { n in
            let root = ChainRoot()
            let sink = Sink()
            root.safeObserve(\.b.c.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            let intermediates = [ChainMiddle(), ChainMiddle()]
            measure(n) { n in for i in 0..<n { root.b = intermediates[i & 1] } }
            blackHole((root, sink))
        },
        Scenario(
            operation: "chain \\.b.c.value: intermediate replaced", peer: "Observation (track + mutate)",
            operationsPerIteration: 1
        ) { n in
            let root = ObservableChainRoot()
            let sink = Sink()
            let intermediates = [ObservableChainMiddle(), ObservableChainMiddle()]
            measure(n) { n in
                for i in 0..<n {
                    withObservationTracking {
                        _ = root.b.c.value
                    } onChange: {
                        sink.add(1)
                    }
                    root.b = intermediates[i & 1]
                }
            }
            blackHole((root, sink))
        },
    ]
}

extension Scenarios {
    // (7) Re-binding is O(d): replacing the first link of a chain of depth d
    // re-binds its d - 1 dependencies below the root.
    static let rebinding: [Scenario] = [
        rebind(depth: 2, \.next?.value),
        rebind(depth: 4, \.next?.next?.next?.value),
        rebind(depth: 8, \.next?.next?.next?.next?.next?.next?.next?.value),
        Scenario(
            operation: "chain of depth 8: first link replaced", peer: "SafeObserve, stored links (no optional)",
            operationsPerIteration: 1
        ) { n in
            let root = Link1()
            let sink = Sink()
            root.safeObserve(\.next.next.next.next.next.next.next.value, by: sink) { sink, _, change in
                sink.add(change.newValue!)
            }
            let tails = [Link2(), Link2()]
            measure(n) { n in for i in 0..<n { root.next = tails[i & 1] } }
            blackHole((root, sink, tails))
        },
    ]

    /// Alternates the root's `next` between two chains, each leaving the key
    /// path `depth` properties long.
    static func rebind(depth: Int, _ keyPath: KeyPath<ChainNode, Int?> & Sendable) -> Scenario {
        Scenario(
            operation: "chain of depth \(depth): first link replaced", peer: "SafeObserve", operationsPerIteration: 1
        ) { n in
            let root = ChainNode()
            let sink = Sink()
            root.safeObserve(keyPath, by: sink) { sink, _, change in sink.add(change.newValue!!) }
            let tails = [ChainNode.chain(length: depth - 1), ChainNode.chain(length: depth - 1)]
            measure(n) { n in for i in 0..<n { root.next = tails[i & 1] } }
            blackHole((root, sink, tails))
        }
    }
}

/// The links of a chain of depth 8 whose every link is a stored, non-optional
/// `@Observed` property (a class per level).
public final class Link1: SafeObservable {
    /// The next link.
    @Observed public var next = Link2()
}
/// See ``Link1``.
public final class Link2: SafeObservable {
    /// The next link.
    @Observed public var next = Link3()
}
/// See ``Link1``.
public final class Link3: SafeObservable {
    /// The next link.
    @Observed public var next = Link4()
}
/// See ``Link1``.
public final class Link4: SafeObservable {
    /// The next link.
    @Observed public var next = Link5()
}
/// See ``Link1``.
public final class Link5: SafeObservable {
    /// The next link.
    @Observed public var next = Link6()
}
/// See ``Link1``.
public final class Link6: SafeObservable {
    /// The next link.
    @Observed public var next = Link7()
}
/// See ``Link1``.
public final class Link7: SafeObservable {
    /// The next link.
    @Observed public var next = Link8()
}
/// See ``Link1``.
public final class Link8: SafeObservable {
    /// Not observed; only moves `value` to another offset, so that its
    /// setter is not merged with `SafeModel.value`'s (which would add a jump
    /// to the unobserved-set rows), as in ``ComputedModel``.
    public var tag = 0
    /// The value at the end of the chain.
    @Observed public var value = 1
}

/// A link of a chain of any depth.
public final class ChainNode: SafeObservable {
    /// The next link.
    @Observed public var next: ChainNode?
    /// The value at the end of the chain.
    @Observed public var value = 1
    /// Creates a link.
    public init() {}

    /// `length` linked nodes; returns the first.
    static func chain(length: Int) -> ChainNode {
        let first = ChainNode()
        var last = first
        for _ in 1..<length {
            let node = ChainNode()
            last.next = node
            last = node
        }
        return first
    }
}

/// Moves a value to another thread (benchmarks only; one thread uses it at a time).
final class UncheckedBox<Value>: @unchecked Sendable {
    // @unchecked Sendable: handed over to one thread, which alone uses it.
    let value: Value
    init(_ value: Value) { self.value = value }
}

// MARK: - Chain fixtures

/// The root of a chain `\.b.c.value`.
public final class ChainRoot: SafeObservable {
    /// The first link.
    @Observed public var b = ChainMiddle()
    /// Creates a root.
    public init() {}
}

/// The middle of a chain.
public final class ChainMiddle: SafeObservable {
    /// The second link.
    @Observed public var c = ChainLeaf()
    /// Creates a middle link.
    public init() {}
}

/// The end of a chain.
///
/// Laid out unlike `SafeModel` (`value` at another offset), so that the
/// compiler does not merge the two otherwise identical `value` setters and
/// turn the one the set-unobserved rows measure into a thunk.
public final class ChainLeaf: SafeObservable {
    /// Not observed; only moves `value` to another offset.
    public var label = ""
    /// The observed value.
    @Observed public var value = 0
    /// Creates a leaf.
    public init() {}
}

/// The same chain with the Observation module.
@Observable
public final class ObservableChainRoot {
    /// The first link.
    public var b = ObservableChainMiddle()
    /// Creates a root.
    public init() {}
}

/// The middle of an `@Observable` chain.
@Observable
public final class ObservableChainMiddle {
    /// The second link.
    public var c = ObservableChainLeaf()
    /// Creates a middle link.
    public init() {}
}

/// The end of an `@Observable` chain.
@Observable
public final class ObservableChainLeaf {
    /// The observed value.
    public var value = 0
    /// Creates a leaf.
    public init() {}
}

extension Scenarios {
    // A `SafeObservable` class that also conforms to `Observable` (issue 32,
    // part 2): its reads and writes report to Observation. Side by side with
    // an `@Observable` class's, each read once before (its registrar is
    // created on the first read), tracked by nothing, then tracked.
    static let observationSeesSafeModels: [Scenario] = [
        Scenario(operation: "get, class also Observable", peer: "SafeObserve @Observed", operationsPerIteration: 1) {
            n in
            let model = SafeObservableModel()
            let sink = Sink()
            sink.add(model.value)
            measure(n) { n in for _ in 0..<n { sink.add(model.value) } }
            blackHole(sink)
        },
        Scenario(operation: "get, class also Observable", peer: "Observation @Observable", operationsPerIteration: 1) {
            n in
            let model = ObservableModel()
            let sink = Sink()
            sink.add(model.value)
            measure(n) { n in for _ in 0..<n { sink.add(model.value) } }
            blackHole(sink)
        },
        Scenario(operation: "set, class also Observable", peer: "SafeObserve @Observed", operationsPerIteration: 1) {
            n in
            let model = SafeObservableModel()
            blackHole(model.value)
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(model)
        },
        Scenario(operation: "set, class also Observable", peer: "Observation @Observable", operationsPerIteration: 1) {
            n in
            let model = ObservableModel()
            blackHole(model.value)
            measure(n) { n in for i in 0..<n { model.value = i } }
            blackHole(model)
        },
        Scenario(
            operation: "tracked read + change (withObservationTracking)",
            peer: "SafeObserve @Observed, class also Observable",
            operationsPerIteration: 1
        ) { n in
            let model = SafeObservableModel()
            let sink = Sink()
            measure(n) { n in
                for i in 0..<n {
                    withObservationTracking {
                        _ = model.value
                    } onChange: {
                        sink.add(1)
                    }
                    model.value = i &+ 1
                }
            }
            blackHole(sink)
        },
        Scenario(
            operation: "tracked read + change (withObservationTracking)", peer: "Observation @Observable",
            operationsPerIteration: 1
        ) { n in
            let model = ObservableModel()
            let sink = Sink()
            measure(n) { n in
                for i in 0..<n {
                    withObservationTracking {
                        _ = model.value
                    } onChange: {
                        sink.add(1)
                    }
                    model.value = i &+ 1
                }
            }
            blackHole(sink)
        },
    ]
}

extension Scenarios {
    // Registration and removal of one relation on an `@Observable` model
    // (issue 32), beside the same on a `SafeObservable` (row 22). Made from
    // nonisolated code, as these closures are. The model's tracker exists
    // (a relation was made and ended before), as a `SafeObservable`'s
    // sentinel does in row 22.
    static let observableRegistration: [Scenario] = [
        Scenario(
            operation: "add + remove, @Observable model", peer: "SafeObserve (token.invalidate)",
            operationsPerIteration: 1
        ) {
            n in
            let model = ObservableModel()
            let sink = Sink()
            model.safeObserve(\.value, by: sink, isolation: nil) { _, _, _ in }.invalidate()
            measure(n) { n in
                for _ in 0..<n {
                    model.safeObserve(\.value, by: sink, isolation: nil) { sink, _, change in
                        sink.add(change.newValue!)
                    }
                    .invalidate()
                }
            }
            blackHole(sink)
        },
        Scenario(
            operation: "add + remove, @Observable model, first on each model",
            peer: "SafeObserve (token.invalidate)", operationsPerIteration: 1
        ) { n in
            // Everything a first relation brings: the model's sentinel, its
            // tracker and its tracking (the tracking stays in the model's
            // registrar until the model changes or dies: documented).
            let models = (0..<n).map { _ in ObservableModel() }
            let sink = Sink()
            measure(n) { n in
                for index in 0..<n {
                    models[index].safeObserve(\.value, by: sink, isolation: nil) { sink, _, change in
                        sink.add(change.newValue!)
                    }
                    .invalidate()
                }
            }
            blackHole((models, sink))
        },
    ]
}
