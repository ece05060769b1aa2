import SafeObserve
import Synchronization

/// What a run observes: every delivery and every observation's result, in order.
public enum ModelEvent: Hashable, Sendable, CustomStringConvertible {
    /// A handler ran: which handler, for which listener and object (by serial), with what change.
    case delivery(handler: Int, listener: Int, object: Int, new: Int?, old: Int?, isPrior: Bool, isInitial: Bool)
    /// An observation returned the token of relation `relation` (a new one, or a dedupe hit).
    case observed(relation: Int)

    /// One line, for failure reports.
    public var description: String {
        switch self {
        case .delivery(let handler, let listener, let object, let new, let old, let isPrior, let isInitial):
            let value = "\(old.map(String.init) ?? "nil")->\(new.map(String.init) ?? "nil")"
            return "handler #\(handler) (listener \(listener), object \(object)) got \(value)"
                + (isPrior ? " prior" : "") + (isInitial ? " initial" : "")
        case .observed(let relation):
            return "observe returned relation #\(relation)"
        }
    }
}

/// Deinit counters of the world's objects, listeners and handler captures.
final class ModelCensus: Sendable {
    let deadObjects = Mutex<Set<Int>>([])
    let deadListeners = Mutex<Set<Int>>([])
    let releasedHandlers = Mutex<Set<Int>>([])
    /// Handlers that ran for a listener whose deinit had started (must stay empty).
    let callsToTheDead = Mutex<[Int]>([])
}

final class ModelObject: SafeObservable {
    @Observed var first: Int
    @Observed var second: Int
    /// Strong: a linked object lives as long as something links to it.
    @Observed var link: ModelObject?
    let serial: Int
    let mutatesInDeinit: Bool
    let census: ModelCensus

    init(serial: Int, values: (Int, Int), mutatesInDeinit: Bool, census: ModelCensus) {
        self.serial = serial
        self.mutatesInDeinit = mutatesInDeinit
        self.census = census
        first = values.0
        second = values.1
    }

    deinit {
        if mutatesInDeinit {  // must not be delivered
            first = -1
            second = -2
        }
        _ = census.deadObjects.withLock { $0.insert(serial) }
    }

    /// Computed from two properties.
    var sum: Int { first + second }
    /// Computed with a branch: an even `first`, or else the linked object's
    /// `second` (-1 without a link).
    var pick: Int { first % 2 == 0 ? first : (link?.second ?? -1) }

    /// Key path `index` of `ModelOperation.keyPathCount`, with its value type.
    enum TypedKeyPath {
        case plain(KeyPath<ModelObject, Int>)
        case optional(KeyPath<ModelObject, Int?>)
    }

    static func keyPath(_ index: Int) -> TypedKeyPath {
        switch index {
        case 0: .plain(\.first)
        case 1: .plain(\.second)
        case 2: .plain(\.sum)
        case 3: .optional(\.link?.first)
        case 4: .optional(\.link?.link?.second)
        default: .plain(\.pick)
        }
    }

    static func anyKeyPath(_ index: Int) -> AnyKeyPath {
        switch keyPath(index) {
        case .plain(let keyPath): keyPath
        case .optional(let keyPath): keyPath
        }
    }
}

/// A weak reference to an object of the world, by serial.
struct WeakObject {
    weak var object: ModelObject?
}

class ModelListener {
    let serial: Int
    let census: ModelCensus
    let isDying = Atomic<Bool>(false)

    init(serial: Int, census: ModelCensus) {
        self.serial = serial
        self.census = census
    }

    deinit {
        isDying.store(true, ordering: .releasing)
        _ = census.deadListeners.withLock { $0.insert(serial) }
    }
}

final class ModelPlainListener: ModelListener {}

final class ModelTidyListener: ModelListener {
    deinit { SafeObservation.removeAll(observedBy: self) }
}

final class ModelSafeListener: ModelListener, SafeObserver {
    let observerLifetime = ObserverLifetime()
}

/// What each handler captures, to prove the handler was released.
final class ModelCapture: Sendable {
    let handler: Int
    let census: ModelCensus

    init(handler: Int, census: ModelCensus) {
        self.handler = handler
        self.census = census
    }

    deinit { _ = census.releasedHandlers.withLock { $0.insert(handler) } }
}

/// The system under test: real objects, listeners and tokens, driven by
/// `ModelOperation`s, recording `ModelEvent`s.
public final class ModelWorld: @unchecked Sendable {
    // @unchecked Sendable: a model run is single-threaded; handlers capture the
    // world only to record on the thread that is running the sequence.
    var objects: [ModelObject?] = Array(repeating: nil, count: ModelOperation.objectSlots)
    /// Every object ever made, by serial, weakly (to unlink the ones only links keep).
    var everyObject: [Int: WeakObject] = [:]
    var listeners: [ModelListener?] = Array(repeating: nil, count: ModelOperation.listenerSlots)
    /// The token of each relation, in the order the relations were made.
    var tokens: [ObservationToken] = []
    var relationOfToken: [ObservationToken: Int] = [:]
    var events: [ModelEvent] = []
    let census = ModelCensus()
    var nextSerial = 0
    var nextValue = 1
    var nextHandler = 0
    var depth = 0
    /// The hub notification operations use (dropped at the end of a run).
    var hub: NotificationHub? = NotificationHub()
    /// The notification names, by index.
    static let notificationNames = (0..<ModelOperation.notificationNameCount).map {
        NotificationName<Int>("model.n\($0)")
    }

    /// An empty world: every slot empty.
    public init() {}

    func perform(_ operation: ModelOperation) {
        switch operation {
        case .makeObject(let slot, let mutatesInDeinit):
            let values = (nextValue, nextValue + 1)
            nextValue += 2
            nextSerial += 1
            let object = ModelObject(
                serial: nextSerial, values: values, mutatesInDeinit: mutatesInDeinit, census: census)
            everyObject[nextSerial] = WeakObject(object: object)
            objects[slot] = object
        case .makeListener(let slot, let kind):
            nextSerial += 1
            switch kind {
            case .plain: listeners[slot] = ModelPlainListener(serial: nextSerial, census: census)
            case .safeObserver: listeners[slot] = ModelSafeListener(serial: nextSerial, census: census)
            case .removesAllInDeinit: listeners[slot] = ModelTidyListener(serial: nextSerial, census: census)
            }
        case .observe(let listenerSlot, let objectSlot, let property, let options, let reaction):
            guard let listener = listeners[listenerSlot], let object = objects[objectSlot] else { return }
            let handler = nextHandler
            nextHandler += 1
            let capture = ModelCapture(handler: handler, census: census)
            let options = ObservationOptions(rawValue: options)
            let token: ObservationToken
            switch ModelObject.keyPath(property) {
            case .plain(let keyPath):
                token = object.safeObserve(keyPath, by: listener, options: options) { [self] listener, object, change in
                    withExtendedLifetime(capture) {}
                    received(
                        handler: handler, listener: listener, object: object, new: change.newValue,
                        old: change.oldValue, change: change, reaction: reaction)
                }
            case .optional(let keyPath):
                token = object.safeObserve(keyPath, by: listener, options: options) { [self] listener, object, change in
                    withExtendedLifetime(capture) {}
                    let nilValue = ModelOperation.nilValue
                    received(
                        handler: handler, listener: listener, object: object,
                        new: change.newValue.map { $0 ?? nilValue }, old: change.oldValue.map { $0 ?? nilValue },
                        change: change, reaction: reaction)
                }
            }
            record(token)
        case .unobserveKeyPath(let listenerSlot, let objectSlot, let property):
            guard let listener = listeners[listenerSlot], let object = objects[objectSlot] else { return }
            switch ModelObject.keyPath(property) {
            case .plain(let keyPath): object.safeUnobserve(keyPath, by: listener)
            case .optional(let keyPath): object.safeUnobserve(keyPath, by: listener)
            }
        case .unobserveListener(let listenerSlot, let objectSlot):
            guard let listener = listeners[listenerSlot], let object = objects[objectSlot] else { return }
            object.safeUnobserve(by: listener)
        case .removeAll(let listenerSlot):
            guard let listener = listeners[listenerSlot] else { return }
            SafeObservation.removeAll(observedBy: listener)
        case .invalidate(let relation):
            guard !tokens.isEmpty else { return }
            tokens[relation % tokens.count].invalidate()
        case .mutate(let objectSlot, let property):
            // Held here for the whole mutation, as any caller holds what it mutates.
            guard let object = objects[objectSlot] else { return }
            let value = nextValue
            nextValue += 1
            if property == 0 { object.first = value } else { object.second = value }
        case .setLink(let objectSlot, let target):
            guard let object = objects[objectSlot] else { return }
            object.link = target.flatMap { objects[$0] }
        case .unlinkAll:
            for serial in everyObject.keys.sorted() {
                // Held here for the whole mutation, as above.
                guard let object = everyObject[serial]?.object else { continue }
                object.link = nil
            }
        case .observeNotification(let listenerSlot, let name, let senderSlot, let reaction):
            guard let listener = listeners[listenerSlot], let hub else { return }
            let sender = senderSlot.map { objects[$0] }
            if let sender, sender == nil { return }  // an empty slot
            let handler = nextHandler
            nextHandler += 1
            let capture = ModelCapture(handler: handler, census: census)
            let token = hub.observe(Self.notificationNames[name], from: sender ?? nil, by: listener, isolation: nil) {
                [self] listener, notification in
                withExtendedLifetime(capture) {}
                received(
                    handler: handler, listener: listener,
                    sender: (notification.sender as? ModelObject)?.serial ?? 0, payload: notification.payload,
                    reaction: reaction)
            }
            record(token)
        case .post(let name, let senderSlot):
            guard let hub else { return }
            // Held here for the whole post, as any caller holds what it posts from.
            let sender = senderSlot.map { objects[$0] }
            if let sender, sender == nil { return }
            let payload = nextValue
            nextValue += 1
            hub.post(Self.notificationNames[name], payload: payload, from: sender ?? nil)
        case .unobserveNotification(let listenerSlot, let name, let senderSlot):
            guard let listener = listeners[listenerSlot], let hub else { return }
            let sender = senderSlot.map { objects[$0] }
            if let sender, sender == nil { return }
            hub.unobserve(Self.notificationNames[name], from: sender ?? nil, by: listener)
        case .unobserveHub(let listenerSlot):
            guard let listener = listeners[listenerSlot] else { return }
            hub?.unobserve(by: listener)
        case .releaseListener(let slot):
            listeners[slot] = nil
        case .releaseObject(let slot):
            objects[slot] = nil
        }
    }

    /// Records what an observation returned: a new relation, or a dedupe hit.
    private func record(_ token: ObservationToken) {
        if let relation = relationOfToken[token] {
            events.append(.observed(relation: relation))
        } else {
            relationOfToken[token] = tokens.count
            events.append(.observed(relation: tokens.count))
            tokens.append(token)
        }
    }

    private func received(handler: Int, listener: ModelListener, sender: Int, payload: Int, reaction: ModelOperation?) {
        if listener.isDying.load(ordering: .acquiring) {
            census.callsToTheDead.withLock { $0.append(handler) }
        }
        events.append(
            .delivery(
                handler: handler, listener: listener.serial, object: sender, new: payload, old: nil, isPrior: false,
                isInitial: false))
        guard let reaction, depth < ModelOperation.maxHandlerDepth else { return }
        depth += 1
        perform(reaction)
        depth -= 1
    }

    private func received<Value>(
        handler: Int, listener: ModelListener, object: ModelObject, new: Int?, old: Int?,
        change: ObservedChange<Value>, reaction: ModelOperation?
    ) {
        if listener.isDying.load(ordering: .acquiring) {
            census.callsToTheDead.withLock { $0.append(handler) }
        }
        events.append(
            .delivery(
                handler: handler, listener: listener.serial, object: object.serial, new: new,
                old: old, isPrior: change.isPrior, isInitial: change.isInitial))
        guard let reaction, !change.isInitial, depth < ModelOperation.maxHandlerDepth else { return }
        depth += 1
        perform(reaction)
        depth -= 1
    }
}
