/// The reference model: a few arrays that say which relations are live and
/// which deliveries must happen, written from the documented semantics and
/// independent of how the library stores anything.
///
/// Derived key paths (2…5) follow the DocC article "Observing chains and
/// computed properties": a relation depends on the properties its key path's
/// last evaluation read; each change of one of them evaluates the key path
/// again (in the change's prior phase too, for the old value, when the
/// relation asks for `.old` or `.prior`), re-binds to what was read, and
/// delivers.
///
/// A change reaches each single-property relation in store order: when a
/// handler changes the property it observes, the nested (newer) change is
/// delivered at once. A relation later in the list that asks for neither
/// `.old` nor `.prior` is told the newer change and skips the older one; one
/// that asks for either is told the older change first (its deliveries
/// chain: each old value is the new value it was told before, and each
/// change follows its own prior).
///
/// Notifications follow the DocC article "Notifications": a post reaches the
/// name's unfiltered observers, then those filtered on its sender, each list
/// as it is when its turn comes, in registration order; a nested post is
/// delivered at once; nothing is skipped. A relation filtered on a sender
/// that died matches nothing more and ends when the hub's amortized sweep
/// reaches it (undecided here).
public struct ReferenceModel {
    struct Entity {
        var isHeld = true  // the world's slot still references it
        var pins = 0  // references on the stack: a mutation, a handler's parameter
        var isAlive = true
        var endsRelationsInDeinit = false  // a SafeObserver, or removeAll in deinit
        var values = [0, 0]
        /// Objects only: the linked object, and how many live objects link here.
        var link: Int?
        var linkedBy = 0
    }

    /// One observable property of one object: 0 `first`, 1 `second`, 2 `link`.
    struct Channel: Hashable {
        let object: Int
        let property: Int
    }

    /// A place in a channel's relation list, in the order they were added: a
    /// single-property relation, or one dependency of a derived relation.
    struct Entry {
        let relation: Int
        let channel: Channel
        let isDependency: Bool
        var isEnded = false
    }

    /// A notification channel: a name, and a sender's serial (0: none).
    struct NotificationChannel: Hashable {
        let name: Int
        let sender: Int
    }

    struct Relation {
        let handler: Int
        let listener: Int
        /// The observed object; for a notification relation, the sender (0: none).
        let object: Int
        /// The key path; -1 for a notification relation.
        let property: Int
        let options: UInt8
        let reaction: ModelOperation?
        var isEnded = false
        /// A plain listener died; the relation ends when a change next reaches it,
        /// when its object dies, or by the library's amortized sweep.
        var isListenerGone = false
        /// Notification relations: the name.
        var notificationName: Int?
        /// Notification relations: the sender filtered on died.
        var isSenderGone = false
        /// Single-property relations: the store number of the newest change
        /// delivered, or of the last one stored before the relation was made
        /// (an older one reaching the relation later is skipped).
        var lastChange = 0
        /// Single-property relations asking for `.prior`: told a prior
        /// whose change it was not told yet.
        var awaitsChangeOfPrior = false
        /// Derived only: the dependency entries, in the order they were bound.
        var dependencies: [Int] = []
        /// Derived only: old values evaluated in a prior phase, waiting for
        /// the change of that channel, most recent last.
        var pendingOld: [(channel: Channel, value: Int)] = []

        var isDerived: Bool { property >= ModelOperation.propertyCount }
        /// Whether a derived relation's dependencies get the prior phase.
        var capturesOld: Bool { options & (2 | 8) != 0 }
    }

    var objects: [Int: Entity] = [:]
    var listeners: [Int: Entity] = [:]
    var objectSlots: [Int?] = Array(repeating: nil, count: ModelOperation.objectSlots)
    var listenerSlots: [Int?] = Array(repeating: nil, count: ModelOperation.listenerSlots)
    var relations: [Relation] = []
    var entries: [Entry] = []
    var channelLists: [Channel: [Int]] = [:]
    /// Changes stored per channel: each change's number, in store order.
    var storeCounts: [Channel: Int] = [:]
    /// The changes one of whose phases is being delivered, innermost last:
    /// their channel, number and values (a prior phase: the number of the
    /// last change stored before it, and the entries it is delivered to).
    var inFlight: [(channel: Channel, sequence: Int, old: Int, new: Int?, prior: [Int]?)] = []
    /// The notification channels that exist (made by a registration, kept
    /// for the hub's life, or until a sweep finds their sender dead), with
    /// their relations in the order they were added.
    var notificationLists: [NotificationChannel: [Int]] = [:]
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
            observe(listener, object, property, options, reaction)
        case .unobserveKeyPath(let listenerSlot, let objectSlot, let property):
            guard let listener = listenerSlots[listenerSlot], let object = objectSlots[objectSlot] else { return }
            end { $0.listener == listener && $0.object == object && $0.property == property }
        case .unobserveListener(let listenerSlot, let objectSlot):
            guard let listener = listenerSlots[listenerSlot], let object = objectSlots[objectSlot] else { return }
            end { $0.listener == listener && $0.object == object && $0.notificationName == nil }
        case .removeAll(let listenerSlot):
            guard let listener = listenerSlots[listenerSlot] else { return }
            end { $0.listener == listener }
        case .invalidate(let relation):
            guard !relations.isEmpty else { return }
            endRelation(relation % relations.count)
        case .mutate(let objectSlot, let property):
            guard let object = objectSlots[objectSlot] else { return }
            let value = nextValue
            nextValue += 1
            change(object, property, to: value)
        case .setLink(let objectSlot, let target):
            guard let object = objectSlots[objectSlot] else { return }
            change(object, 2, to: target.flatMap { objectSlots[$0] })
        case .unlinkAll:
            for object in objects.keys.sorted() where objects[object]!.isAlive {
                change(object, 2, to: nil)
            }
        case .observeNotification(let listenerSlot, let name, let senderSlot, let reaction):
            guard let listener = listenerSlots[listenerSlot], let sender = senderSerial(senderSlot) else { return }
            observeNotification(listener, NotificationChannel(name: name, sender: sender), reaction)
        case .post(let name, let senderSlot):
            guard let sender = senderSerial(senderSlot) else { return }
            post(name, from: sender)
        case .unobserveNotification(let listenerSlot, let name, let senderSlot):
            guard let listener = listenerSlots[listenerSlot] else { return }
            guard senderSlot != nil else {
                // Without a sender: the name's relations, whatever their sender filter.
                end { $0.notificationName == name && $0.listener == listener }
                return
            }
            guard let sender = senderSerial(senderSlot) else { return }
            end { $0.notificationName == name && $0.object == sender && $0.listener == listener }
        case .unobserveHub(let listenerSlot):
            guard let listener = listenerSlots[listenerSlot] else { return }
            end { $0.notificationName != nil && $0.listener == listener }
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

    // MARK: Key paths

    /// The value of key path `keyPath` on `root`, and the properties reading
    /// it reads, in order (as the key path's getters run).
    func evaluate(_ root: Int, _ keyPath: Int) -> (value: Int, reads: [Channel]) {
        var reads: [Channel] = []
        func read(_ object: Int, _ property: Int) -> Int {
            reads.append(Channel(object: object, property: property))
            return objects[object]!.values[property]
        }
        func link(of object: Int) -> Int? {
            reads.append(Channel(object: object, property: 2))
            return objects[object]!.link
        }
        let value: Int
        switch keyPath {
        case 0: value = read(root, 0)
        case 1: value = read(root, 1)
        case 2: value = read(root, 0) + read(root, 1)  // \.sum
        case 3: value = link(of: root).map { read($0, 0) } ?? ModelOperation.nilValue  // \.link?.first
        case 4: value = link(of: root).flatMap { link(of: $0) }.map { read($0, 1) } ?? ModelOperation.nilValue
        default:  // \.pick
            let first = read(root, 0)
            value = first % 2 == 0 ? first : (link(of: root).map { read($0, 1) } ?? -1)
        }
        return (value, reads)
    }

    private mutating func observe(
        _ listener: Int, _ object: Int, _ property: Int, _ options: UInt8, _ reaction: ModelOperation?
    ) {
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
        let index = relations.count - 1
        relations[index].lastChange = storeCounts[Channel(object: object, property: property)] ?? 0
        let (value, reads) = evaluate(object, property)
        if relations[index].isDerived {
            rebind(index, to: reads)
        } else {
            addEntry(relation: index, channel: Channel(object: object, property: property), isDependency: false)
        }
        if options & 4 != 0 {  // .initial
            deliver(index, new: value, old: nil, prior: false, initial: true)
        }
        events.append(.observed(relation: index))
    }

    // MARK: Relations

    @discardableResult
    private mutating func addEntry(relation: Int, channel: Channel, isDependency: Bool) -> Int {
        entries.append(Entry(relation: relation, channel: channel, isDependency: isDependency))
        channelLists[channel, default: []].append(entries.count - 1)
        return entries.count - 1
    }

    /// Makes a derived relation's dependencies exactly `reads`: drops the
    /// others (with the old values waiting for them), binds the new ones after
    /// every relation already on their channels.
    private mutating func rebind(_ index: Int, to reads: [Channel]) {
        guard !relations[index].isEnded else { return }
        for entry in relations[index].dependencies where !reads.contains(entries[entry].channel) {
            forget(entry)
        }
        for channel in reads
        where !relations[index].dependencies.contains(where: { entries[$0].channel == channel }) {
            relations[index].dependencies.append(addEntry(relation: index, channel: channel, isDependency: true))
        }
    }

    /// A dependency no longer delivers: it was dropped, or its object died.
    private mutating func forget(_ entry: Int) {
        let index = entries[entry].relation
        let channel = entries[entry].channel
        entries[entry].isEnded = true
        relations[index].dependencies.removeAll { $0 == entry }
        relations[index].pendingOld.removeAll { $0.channel == channel }
    }

    private mutating func endRelation(_ index: Int) {
        relations[index].isEnded = true
        for entry in relations[index].dependencies {
            entries[entry].isEnded = true
        }
        relations[index].dependencies = []
        relations[index].pendingOld = []
    }

    private mutating func end(where predicate: (Relation) -> Bool) {
        for index in relations.indices where !relations[index].isEnded && predicate(relations[index]) {
            endRelation(index)
        }
    }

    // MARK: Changes

    /// A set: delivered to the entries on the property's channel when it
    /// starts (prior, store, change), in the order they were added.
    private mutating func change(_ object: Int, _ property: Int, to value: Int?) {
        objects[object]!.pins += 1
        // A new link is the setter's argument: held until the setter returns.
        let newLink = property == 2 ? value : nil
        if let newLink { objects[newLink]!.pins += 1 }
        let channel = Channel(object: object, property: property)
        let snapshot = channelLists[channel] ?? []
        let old = property < 2 ? objects[object]!.values[property] : 0  // single relations: `first`/`second` only
        let priorStart = storeCounts[channel] ?? 0
        // In flight while delivered: a change a prior handler nests in it
        // announces this one again when it ends.
        inFlight.append((channel, priorStart, old, nil, snapshot))
        for entry in snapshot {
            let index = entries[entry].relation
            if entries[entry].isDependency {
                if relations[index].capturesOld { dependencyChanged(entry, isPrior: true) }
            } else if relations[index].options & 8 != 0 {  // .prior
                reach(index, new: nil, old: old, prior: true, sequence: priorStart, channel: channel)
            }
        }
        inFlight.removeLast()
        // A prior handler may have changed the property: the change starts
        // from the value stored now.
        let changeOld = property < 2 ? objects[object]!.values[property] : 0
        if property < 2 {
            objects[object]!.values[property] = value!
        } else {
            let previous = objects[object]!.link
            objects[object]!.link = value
            if let value { objects[value]!.linkedBy += 1 }
            if let previous {
                objects[previous]!.linkedBy -= 1
                releaseObject(previous, unpinning: true)
            }
        }
        storeCounts[channel, default: 0] += 1
        let sequence = storeCounts[channel]!
        inFlight.append((channel, sequence, changeOld, value, nil))
        for entry in snapshot {
            if entries[entry].isDependency {
                dependencyChanged(entry, isPrior: false)
            } else {
                reach(
                    entries[entry].relation, new: value, old: changeOld, prior: false, sequence: sequence,
                    channel: channel)
            }
        }
        inFlight.removeLast()
        // Made in the prior phase of another change of the property (the
        // innermost in flight): that change is announced again, from the
        // value stored now, to the relations that consumed its prior since.
        if let enclosing = inFlight.last(where: { $0.channel == channel }), let priorSnapshot = enclosing.prior {
            let current = property < 2 ? objects[object]!.values[property] : 0
            for entry in priorSnapshot where !entries[entry].isDependency {
                let index = entries[entry].relation
                guard relations[index].options & 8 != 0 else { continue }
                reach(
                    index, new: nil, old: current, prior: true, sequence: enclosing.sequence, channel: channel,
                    renewing: true)
            }
        }
        if let newLink {
            objects[newLink]!.pins -= 1
            releaseObject(newLink, unpinning: true)
        }
        objects[object]!.pins -= 1
        releaseObject(object, unpinning: true)
    }

    /// A change reaching a relation: delivered if it is live and its listener
    /// alive; a relation whose plain listener died ends here.
    ///
    /// `sequence`: the change's number; for a prior, the number of the last
    /// change stored before its phase began.
    private mutating func reach(
        _ index: Int, new: Int?, old: Int, prior: Bool, sequence: Int, channel: Channel, renewing: Bool = false
    ) {
        guard !relations[index].isEnded else { return }
        guard listeners[relations[index].listener]!.isAlive else {
            endRelation(index)
            return
        }
        // A nested change stored later was delivered first: skip this one.
        if !prior { guard relations[index].lastChange < sequence else { return } }
        guard relations[index].options & (2 | 8) != 0 else {
            if !prior { relations[index].lastChange = sequence }
            deliver(
                index, new: relations[index].options & 1 != 0 && !prior ? new : nil, old: nil, prior: prior,
                initial: false)
            return
        }
        // Chained: first the enclosing changes it was not told, outermost first.
        for record in inFlight.dropLast(prior ? 0 : 1)
        where record.channel == channel && record.prior == nil && relations[index].lastChange < record.sequence {
            guard !relations[index].isEnded else { return }
            tell(index, new: record.new, old: record.old, sequence: record.sequence)
        }
        guard !relations[index].isEnded else { return }
        if prior {
            // The phase skips a relation told a change stored since it began;
            // renewed, it is for those alone.
            guard !relations[index].awaitsChangeOfPrior, (relations[index].lastChange > sequence) == renewing
            else { return }
            relations[index].awaitsChangeOfPrior = true
            deliver(index, new: nil, old: relations[index].options & 2 != 0 ? old : nil, prior: true, initial: false)
        } else {
            tell(index, new: new, old: old, sequence: sequence)
        }
    }

    /// Tells a chained relation one change, after its prior if it asks for
    /// one and was not told it (told late: the prior comes just before it).
    private mutating func tell(_ index: Int, new: Int?, old: Int, sequence: Int) {
        let options = relations[index].options
        if options & 8 != 0, !relations[index].awaitsChangeOfPrior {
            relations[index].awaitsChangeOfPrior = true
            deliver(index, new: nil, old: options & 2 != 0 ? old : nil, prior: true, initial: false)
            guard !relations[index].isEnded, relations[index].lastChange < sequence else { return }
        }
        relations[index].lastChange = sequence
        relations[index].awaitsChangeOfPrior = false
        deliver(
            index, new: options & 1 != 0 ? new : nil, old: options & 2 != 0 ? old : nil, prior: false, initial: false)
    }

    /// A change reaching a dependency: the prior phase evaluates the old
    /// value (and delivers `.prior`); the change evaluates the key path,
    /// re-binds, and delivers. The root is held meanwhile.
    private mutating func dependencyChanged(_ entry: Int, isPrior: Bool) {
        let index = entries[entry].relation
        guard !entries[entry].isEnded, !relations[index].isEnded else { return }
        let root = relations[index].object
        guard objects[root]!.isAlive else {
            endRelation(index)
            return
        }
        objects[root]!.pins += 1
        let options = relations[index].options
        let listenerIsAlive = listeners[relations[index].listener]!.isAlive
        if isPrior {
            let old = evaluate(root, relations[index].property).value
            relations[index].pendingOld.append((entries[entry].channel, old))
            if options & 8 != 0, listenerIsAlive {
                deliver(index, new: nil, old: options & 2 != 0 ? old : nil, prior: true, initial: false)
            }
        } else {
            let channel = entries[entry].channel
            var old: Int?
            if let waiting = relations[index].pendingOld.lastIndex(where: { $0.channel == channel }) {
                old = relations[index].pendingOld.remove(at: waiting).value
            }
            let (value, reads) = evaluate(root, relations[index].property)
            rebind(index, to: reads)
            if !relations[index].isEnded {
                if listenerIsAlive {
                    deliver(
                        index, new: options & 1 != 0 ? value : nil, old: options & 2 != 0 ? old : nil, prior: false,
                        initial: false)
                } else {
                    endRelation(index)
                }
            }
        }
        objects[root]!.pins -= 1
        releaseObject(root, unpinning: true)
    }

    private mutating func deliver(
        _ index: Int, new: Int?, old: Int?, prior: Bool, initial: Bool, object: Int? = nil
    ) {
        let relation = relations[index]
        listeners[relation.listener]!.pins += 1
        events.append(
            .delivery(
                handler: relation.handler, listener: relation.listener, object: object ?? relation.object, new: new,
                old: old, isPrior: prior, isInitial: initial))
        if let reaction = relation.reaction, !initial, depth < ModelOperation.maxHandlerDepth {
            depth += 1
            perform(reaction)
            depth -= 1
        }
        listeners[relation.listener]!.pins -= 1
        releaseListener(relation.listener, unpinning: true)
    }

    // MARK: Notifications

    /// The serial of the object in `slot`; 0 for no slot; `nil` for an empty one.
    private func senderSerial(_ slot: Int?) -> Int? {
        guard let slot else { return 0 }
        return objectSlots[slot]
    }

    private mutating func observeNotification(
        _ listener: Int, _ channel: NotificationChannel, _ reaction: ModelOperation?
    ) {
        let handler = nextHandler
        nextHandler += 1
        if notificationLists[channel] == nil { notificationLists[channel] = [] }
        if let existing = relations.firstIndex(where: {
            !$0.isEnded && $0.notificationName == channel.name && $0.object == channel.sender
                && $0.listener == listener
        }) {
            discardedHandlers.append(handler)
            events.append(.observed(relation: existing))
            return
        }
        var relation = Relation(
            handler: handler, listener: listener, object: channel.sender, property: -1, options: 1, reaction: reaction)
        relation.notificationName = channel.name
        relations.append(relation)
        notificationLists[channel]!.append(relations.count - 1)
        events.append(.observed(relation: relations.count - 1))
    }

    /// A post: the name's unfiltered channel, then the sender's, each as
    /// its list was when the post began (the hub snapshots every channel a
    /// post reaches first). The sender is held meanwhile.
    private mutating func post(_ name: Int, from sender: Int) {
        let payload = nextValue
        nextValue += 1
        if sender != 0 { objects[sender]!.pins += 1 }
        var channels = [NotificationChannel(name: name, sender: 0)]
        if sender != 0 { channels.append(NotificationChannel(name: name, sender: sender)) }
        // Which relations a post reaches is decided when it starts.
        let lists = channels.compactMap { notificationLists[$0] }
        for list in lists {
            for index in list {
                guard !relations[index].isEnded else { continue }
                guard listeners[relations[index].listener]!.isAlive else {
                    endRelation(index)
                    continue
                }
                deliver(index, new: payload, old: nil, prior: false, initial: false, object: sender)
            }
        }
        if sender != 0 {
            objects[sender]!.pins -= 1
            releaseObject(sender, unpinning: true)
        }
    }

    // MARK: Lifetimes

    /// The world dropped its reference (or a pin or a link was dropped): dies
    /// when nothing holds it, ending the relations rooted at it, forgetting
    /// the dependencies on it, and letting go of its link.
    private mutating func releaseObject(_ object: Int, unpinning: Bool = false) {
        if !unpinning { objects[object]!.isHeld = false }
        guard let entity = objects[object], entity.isAlive, !entity.isHeld, entity.pins == 0, entity.linkedBy == 0
        else { return }
        objects[object]!.isAlive = false
        end { $0.object == object && $0.notificationName == nil }
        for index in relations.indices
        where relations[index].notificationName != nil && relations[index].object == object {
            relations[index].isSenderGone = true
        }
        for property in 0..<3 {
            for entry in channelLists[Channel(object: object, property: property)] ?? []
            where entries[entry].isDependency && !entries[entry].isEnded {
                forget(entry)
            }
        }
        if let link = entity.link {
            objects[link]!.linkedBy -= 1
            releaseObject(link, unpinning: true)
        }
    }

    private mutating func releaseListener(_ listener: Int, unpinning: Bool = false) {
        if !unpinning { listeners[listener]!.isHeld = false }
        guard let entity = listeners[listener], entity.isAlive, !entity.isHeld, entity.pins == 0 else { return }
        listeners[listener]!.isAlive = false
        for index in relations.indices where !relations[index].isEnded && relations[index].listener == listener {
            if entity.endsRelationsInDeinit {
                endRelation(index)
            } else {
                relations[index].isListenerGone = true
            }
        }
    }
}
