/// The reference model: a few arrays that say which relations are live and
/// which deliveries must happen, written from the documented semantics and
/// independent of how the library stores anything.
public struct ReferenceModel {
    struct Entity {
        var isHeld = true  // the world's slot still references it
        var pins = 0  // references on the stack: a mutation, a handler's parameter
        var isAlive = true
        var endsRelationsInDeinit = false  // a SafeObserver, or removeAll in deinit
        var values = [0, 0]
    }

    struct Relation {
        let handler: Int
        let listener: Int
        let object: Int
        let property: Int
        let options: UInt8
        let reaction: ModelOperation?
        var isEnded = false
        /// A plain listener died; the relation ends when a change next reaches it,
        /// when its object dies, or by the library's amortized sweep.
        var isListenerGone = false
    }

    var objects: [Int: Entity] = [:]
    var listeners: [Int: Entity] = [:]
    var objectSlots: [Int?] = Array(repeating: nil, count: ModelOperation.objectSlots)
    var listenerSlots: [Int?] = Array(repeating: nil, count: ModelOperation.listenerSlots)
    var relations: [Relation] = []
    /// Handlers given to a dedupe hit: never stored.
    var discardedHandlers: [Int] = []
    var events: [ModelEvent] = []
    var nextSerial = 0
    var nextValue = 1
    var nextHandler = 0
    var depth = 0

    /// An empty world, like a new `ModelWorld`.
    public init() {}

    mutating func perform(_ operation: ModelOperation) {
        switch operation {
        case .makeObject(let slot, _):
            nextSerial += 1
            objects[nextSerial] = Entity(values: [nextValue, nextValue + 1])
            nextValue += 2
            let previous = objectSlots[slot]
            objectSlots[slot] = nextSerial
            if let previous { releaseObject(previous) }
        case .makeListener(let slot, let kind):
            nextSerial += 1
            listeners[nextSerial] = Entity(endsRelationsInDeinit: kind != .plain)
            let previous = listenerSlots[slot]
            listenerSlots[slot] = nextSerial
            if let previous { releaseListener(previous) }
        case .observe(let listenerSlot, let objectSlot, let property, let options, let reaction):
            guard let listener = listenerSlots[listenerSlot], let object = objectSlots[objectSlot] else { return }
            let handler = nextHandler
            nextHandler += 1
            if let existing = relations.firstIndex(where: {
                !$0.isEnded && $0.listener == listener && $0.object == object && $0.property == property
            }) {
                discardedHandlers.append(handler)
                events.append(.observed(relation: existing))
                return
            }
            relations.append(
                Relation(
                    handler: handler, listener: listener, object: object, property: property,
                    options: options, reaction: reaction))
            if options & 4 != 0 {  // .initial
                deliver(
                    relations.count - 1, new: objects[object]!.values[property], old: nil, prior: false, initial: true)
            }
            events.append(.observed(relation: relations.count - 1))
        case .unobserveKeyPath(let listenerSlot, let objectSlot, let property):
            guard let listener = listenerSlots[listenerSlot], let object = objectSlots[objectSlot] else { return }
            end { $0.listener == listener && $0.object == object && $0.property == property }
        case .unobserveListener(let listenerSlot, let objectSlot):
            guard let listener = listenerSlots[listenerSlot], let object = objectSlots[objectSlot] else { return }
            end { $0.listener == listener && $0.object == object }
        case .removeAll(let listenerSlot):
            guard let listener = listenerSlots[listenerSlot] else { return }
            end { $0.listener == listener }
        case .invalidate(let relation):
            guard !relations.isEmpty else { return }
            relations[relation % relations.count].isEnded = true
        case .mutate(let objectSlot, let property):
            guard let object = objectSlots[objectSlot] else { return }
            mutate(object, property)
        case .releaseListener(let slot):
            guard let listener = listenerSlots[slot] else { return }
            listenerSlots[slot] = nil
            releaseListener(listener)
        case .releaseObject(let slot):
            guard let object = objectSlots[slot] else { return }
            objectSlots[slot] = nil
            releaseObject(object)
        }
    }

    private mutating func end(where predicate: (Relation) -> Bool) {
        for index in relations.indices where !relations[index].isEnded && predicate(relations[index]) {
            relations[index].isEnded = true
        }
    }

    /// A set: delivered to the relations live when it starts (prior, store, change).
    private mutating func mutate(_ object: Int, _ property: Int) {
        let value = nextValue
        nextValue += 1
        objects[object]!.pins += 1
        let old = objects[object]!.values[property]
        let snapshot = relations.indices.filter {
            !relations[$0].isEnded && relations[$0].object == object && relations[$0].property == property
        }
        for index in snapshot where relations[index].options & 8 != 0 {  // .prior
            reach(index, new: nil, old: old, prior: true)
        }
        objects[object]!.values[property] = value
        for index in snapshot {
            reach(index, new: value, old: old, prior: false)
        }
        objects[object]!.pins -= 1
        releaseObject(object, unpinning: true)
    }

    /// A change reaching a relation: delivered if it is live and its listener
    /// alive; a relation whose plain listener died ends here.
    private mutating func reach(_ index: Int, new: Int?, old: Int, prior: Bool) {
        guard !relations[index].isEnded else { return }
        guard listeners[relations[index].listener]!.isAlive else {
            relations[index].isEnded = true
            return
        }
        let options = relations[index].options
        deliver(
            index, new: options & 1 != 0 && !prior ? new : nil, old: options & 2 != 0 ? old : nil, prior: prior,
            initial: false)
    }

    private mutating func deliver(_ index: Int, new: Int?, old: Int?, prior: Bool, initial: Bool) {
        let relation = relations[index]
        listeners[relation.listener]!.pins += 1
        events.append(
            .delivery(
                handler: relation.handler, listener: relation.listener, object: relation.object, new: new, old: old,
                isPrior: prior, isInitial: initial))
        if let reaction = relation.reaction, !initial, depth < ModelOperation.maxHandlerDepth {
            depth += 1
            perform(reaction)
            depth -= 1
        }
        listeners[relation.listener]!.pins -= 1
        releaseListener(relation.listener, unpinning: true)
    }

    /// The world dropped its reference (or a pin was dropped): dies when nothing holds it.
    private mutating func releaseObject(_ object: Int, unpinning: Bool = false) {
        if !unpinning { objects[object]!.isHeld = false }
        guard let entity = objects[object], entity.isAlive, !entity.isHeld, entity.pins == 0 else { return }
        objects[object]!.isAlive = false
        end { $0.object == object }
    }

    private mutating func releaseListener(_ listener: Int, unpinning: Bool = false) {
        if !unpinning { listeners[listener]!.isHeld = false }
        guard let entity = listeners[listener], entity.isAlive, !entity.isHeld, entity.pins == 0 else { return }
        listeners[listener]!.isAlive = false
        for index in relations.indices where !relations[index].isEnded && relations[index].listener == listener {
            if entity.endsRelationsInDeinit {
                relations[index].isEnded = true
            } else {
                relations[index].isListenerGone = true
            }
        }
    }
}
