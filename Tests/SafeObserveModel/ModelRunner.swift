import SafeObserve
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A sequence that the library and the reference model disagree on.
public struct ModelFailure: Error, CustomStringConvertible {
    /// The index of the step after which they disagreed (`operations.count` for the final teardown).
    public let step: Int
    /// The failing sequence.
    public let operations: [ModelOperation]
    /// What disagreed.
    public let problems: [String]

    /// The problems and the sequence, one step a line: a reproduction.
    public var description: String {
        var lines = ["SafeObserve model failure after step \(step) of \(operations.count):"]
        lines += problems.prefix(12).map { "  - \($0)" }
        lines.append("Reproduction (the world starts empty; slots O0…O2, L0…L2):")
        lines += operations.enumerated().map { "  \($0.offset): \($0.element)" }
        return lines.joined(separator: "\n")
    }
}

/// Runs operation sequences against the library and the reference model, step by step.
public enum ModelRunner {
    /// Runs `operations`, then releases everything; `nil` when the library
    /// matched the model after every step and nothing leaked.
    public static func run(_ operations: [ModelOperation]) -> ModelFailure? {
        var problems: [String] = []
        var failedStep = operations.count
        do {
            let world = ModelWorld()
            var model = ReferenceModel()
            for (step, operation) in operations.enumerated() {
                world.perform(operation)
                model.perform(operation)
                problems = checkInvariants(world, against: model)
                model.events = []
                if !problems.isEmpty {
                    failedStep = step
                    break
                }
            }
            if problems.isEmpty {
                // Teardown: every listener released, every link cut (a cycle
                // of links would keep its objects alive), every object
                // released, every token dropped.
                for slot in 0..<ModelOperation.listenerSlots {
                    world.perform(.releaseListener(slot: slot))
                    model.perform(.releaseListener(slot: slot))
                }
                // Before the next mutations, as between steps (see `awaitDeaths`).
                awaitDeaths(
                    objects: [], listeners: Set(model.listeners.filter { !$0.value.isAlive }.keys),
                    in: world.census)
                world.perform(.unlinkAll)
                model.perform(.unlinkAll)
                for slot in 0..<ModelOperation.objectSlots {
                    world.perform(.releaseObject(slot: slot))
                    model.perform(.releaseObject(slot: slot))
                }
                problems = checkInvariants(world, against: model)
                world.tokens = []
                world.relationOfToken = [:]
                // The hub's deinit ends what the hub still holds: relations
                // filtered on a dead sender that no sweep reached yet.
                world.hub = nil
                // As in `checkInvariants`: a sweep of dead plain listeners run
                // by another thread (a test in parallel) may have ended one of
                // these relations first, and releases its handler on that
                // thread just after unlocking. So wait briefly.
                let released = awaitRelease(of: Set(0..<world.nextHandler), in: world.census).count
                if released != world.nextHandler {
                    problems.append("\(world.nextHandler - released) handler(s) leaked after teardown")
                }
            }
        }
        return problems.isEmpty ? nil : ModelFailure(step: failedStep, operations: operations, problems: problems)
    }

    /// Drops steps (and reactions) while the sequence still fails: a minimal reproduction.
    public static func shrink(_ failure: ModelFailure) -> ModelFailure {
        var best = failure
        var progress = true
        while progress {
            progress = false
            var index = 0
            while index < best.operations.count {
                var candidate = best.operations
                if case .observe(let l, let o, let p, let options, .some) = candidate[index] {
                    candidate[index] = .observe(listener: l, object: o, property: p, options: options, reaction: nil)
                } else if case .observeNotification(let l, let name, let sender, .some) = candidate[index] {
                    candidate[index] = .observeNotification(listener: l, name: name, sender: sender, reaction: nil)
                } else {
                    candidate.remove(at: index)
                }
                if let smaller = run(candidate) {
                    best = smaller
                    progress = true
                } else {
                    index += 1
                }
            }
        }
        return best
    }

    /// Runs `count` seeded sequences of `length` steps; the first failure, shrunk.
    public static func runSeeds(_ seeds: Range<UInt64>, length: Int) -> (failure: ModelFailure?, seed: UInt64?) {
        for seed in seeds {
            if let failure = run(ModelOperation.sequence(seed: seed, length: length).operations) {
                return (shrink(failure), seed)
            }
        }
        return (nil, nil)
    }
}

/// The checks made after every step: what the public API shows agrees with
/// itself and with the model, deliveries match exactly, the dead were never
/// called, and every handler that must be released was.
///
/// Also runs the core's own consistency checks on every live object and
/// listener (`SafeObservation._checkInvariants`, compiled with the
/// `SAFEOBSERVE_INTERNAL_CHECKS` define; they stop the process on a broken
/// cross-reference).
func checkInvariants(_ world: ModelWorld, against model: ReferenceModel) -> [String] {
    var problems: [String] = []
    awaitDeaths(
        objects: Set(model.objects.filter { !$0.value.isAlive }.keys),
        listeners: Set(model.listeners.filter { !$0.value.isAlive }.keys), in: world.census)
    for object in world.objects.compactMap({ $0 }) {
        SafeObservation._checkInvariants(of: object)
    }
    for listener in world.listeners.compactMap({ $0 }) {
        SafeObservation._checkInvariants(observedBy: listener)
    }

    // Deliveries and observation results: exact values, exact order.
    if world.events != model.events {
        let common = zip(world.events, model.events).prefix { $0 == $1 }.count
        problems.append(
            "events differ at #\(common): library \(world.events.dropFirst(common).prefix(3)) "
                + "model \(model.events.dropFirst(common).prefix(3))")
    }
    world.events = []  // the runner clears the model's
    let calls = world.census.callsToTheDead.withLock { $0 }
    if !calls.isEmpty { problems.append("handlers \(calls) ran for a listener whose deinit had started") }

    // Lifetimes: exactly the objects and listeners the model says are dead are.
    let deadObjects = world.census.deadObjects.withLock { $0 }
    let deadListeners = world.census.deadListeners.withLock { $0 }
    let modelDeadObjects = Set(model.objects.filter { !$0.value.isAlive }.keys)
    let modelDeadListeners = Set(model.listeners.filter { !$0.value.isAlive }.keys)
    if deadObjects != modelDeadObjects {
        problems.append("dead objects \(deadObjects.sorted()), model \(modelDeadObjects.sorted())")
    }
    if deadListeners != modelDeadListeners {
        problems.append("dead listeners \(deadListeners.sorted()), model \(modelDeadListeners.sorted())")
    }

    // Handlers: released once their relation ended; kept while it is live.
    // Another thread may be releasing one: the process-wide sweep of dead
    // plain listeners (run by any thread's registration, e.g. a test running
    // in parallel) can end a relation of this world first, and then releases
    // its handler on that thread, just after unlocking. So wait briefly.
    let mustBeReleased = Set(
        model.discardedHandlers + model.relations.filter(\.isEnded).map(\.handler))
    let released = awaitRelease(of: mustBeReleased, in: world.census)
    for handler in model.discardedHandlers where !released.contains(handler) {
        problems.append("handler #\(handler), given to a dedupe hit, was not released")
    }
    for (index, relation) in model.relations.enumerated() {
        let token = world.tokens[index]
        // A relation filtered on a dead sender ends when the hub's amortized
        // sweep reaches it: either way is right.
        if relation.isSenderGone && !relation.isEnded { continue }
        if relation.isEnded {
            if !released.contains(relation.handler) {
                problems.append("relation #\(index) ended but its handler #\(relation.handler) was not released")
            }
            if token.isActive { problems.append("relation #\(index) ended but its token is active") }
        } else if !relation.isListenerGone {
            if released.contains(relation.handler) {
                problems.append("relation #\(index) is live but its handler #\(relation.handler) was released")
            }
            if !token.isActive { problems.append("relation #\(index) is live but its token is not active") }
        } else if token.listener != nil {
            problems.append("relation #\(index): its listener died but the token still returns it")
        }
    }

    // Introspection: `relations(of:)` lists, per key path and in registration
    // order, the live relations (plus, maybe, not yet swept ones of dead plain listeners).
    func describe(_ tokens: [ObservationToken]) -> [Int] {
        tokens.map { world.relationOfToken[$0] ?? -1 }
    }
    for (slot, serial) in model.objectSlots.enumerated() {
        guard let serial, let object = world.objects[slot] else { continue }
        let listed = SafeObservation.relations(of: object)
        for property in 0..<ModelOperation.keyPathCount {
            let keyPath = ModelObject.anyKeyPath(property)
            let shown = describe(listed.filter { $0.keyPath == keyPath }).filter {
                $0 < 0 || !model.relations[$0].isListenerGone
            }
            let expected = model.relations.indices.filter {
                let relation = model.relations[$0]
                return !relation.isEnded && !relation.isListenerGone && relation.object == serial
                    && relation.property == property
            }
            // A derived key path is listed with its first dependency on the
            // object, which re-binding moves: its order is not registration order.
            let isDerived = property >= ModelOperation.propertyCount
            if isDerived ? shown.sorted() != expected : shown != expected {
                problems.append("relations(of: O\(slot)) on property \(property): \(shown), model \(expected)")
            }
        }
    }
    // `relations(observedBy:)` agrees with the model and with `relations(of:)`.
    for (slot, serial) in model.listenerSlots.enumerated() {
        guard let serial, let listener = world.listeners[slot] else { continue }
        func isUndecided(_ index: Int) -> Bool {
            index >= 0 && model.relations[index].isSenderGone && !model.relations[index].isEnded
        }
        let shown = Set(describe(SafeObservation.relations(observedBy: listener)).filter { !isUndecided($0) })
        let expected = Set(
            model.relations.indices.filter {
                !model.relations[$0].isEnded && model.relations[$0].listener == serial && !isUndecided($0)
            })
        if shown != expected {
            problems.append("relations(observedBy: L\(slot)): \(shown.sorted()), model \(expected.sorted())")
        }
        for index in shown where index >= 0 && model.relations[index].notificationName == nil {
            let object = model.relations[index].object
            guard let objectSlot = model.objectSlots.firstIndex(of: object), let observed = world.objects[objectSlot]
            else { continue }
            if !SafeObservation.relations(of: observed).contains(world.tokens[index]) {
                problems.append("relation #\(index) is listed by its listener L\(slot) but not by its object")
            }
        }
    }
    return problems
}

/// Returns once the objects and listeners the model says are dead have
/// died, or after a second. A test running in parallel may hold one of
/// them for an instant (the sweep of dead plain listeners probes listeners
/// with a +1 on its own thread), and then the last release, and the
/// `deinit`, happen there, a moment after the step that dropped it.
private func awaitDeaths(objects: Set<Int>, listeners: Set<Int>, in census: ModelCensus) {
    var attempts = 0
    while attempts < 1000,
        !objects.isSubset(of: census.deadObjects.withLock { $0 })
            || !listeners.isSubset(of: census.deadListeners.withLock { $0 })
    {
        usleep(1000)
        attempts += 1
    }
}

/// The released handlers, once they include `handlers` or after a second.
private func awaitRelease(of handlers: Set<Int>, in census: ModelCensus) -> Set<Int> {
    var released = census.releasedHandlers.withLock { $0 }
    var attempts = 0
    while !handlers.isSubset(of: released), attempts < 1000 {
        usleep(1000)
        attempts += 1
        released = census.releasedHandlers.withLock { $0 }
    }
    return released
}
