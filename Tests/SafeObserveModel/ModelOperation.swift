import SafeObserve

/// One step of a model-based run over a small world of observed objects and
/// listeners, addressed by slot (`objectSlots` × `keyPathCount` × `listenerSlots`).
///
/// Objects link to each other (`link`, a strong `@Observed` reference), so
/// key paths 2…5 are derived: a computed property, optional chains of depth
/// two and three, and a computed property whose branch reads through a link.
///
/// A step that names an empty slot does nothing, so any sequence is valid and
/// a failing one can be shrunk by dropping steps.
public enum ModelOperation: Hashable, Sendable, CustomStringConvertible {
    /// Puts a new observed object in a slot (releasing the one there).
    case makeObject(slot: Int, mutatesInDeinit: Bool)
    /// Puts a new listener of some kind in a slot.
    case makeListener(slot: Int, kind: ListenerKind)
    /// Observes a key path (`keyPathCount` of them); the handler runs `reaction` on each change it
    /// receives (not on `.initial`), while fewer than `maxHandlerDepth`
    /// handlers are on the stack.
    indirect case observe(listener: Int, object: Int, property: Int, options: UInt8, reaction: ModelOperation?)
    /// `object.safeUnobserve(keyPath, by: listener)`.
    case unobserveKeyPath(listener: Int, object: Int, property: Int)
    /// `object.safeUnobserve(by: listener)`.
    case unobserveListener(listener: Int, object: Int)
    /// `SafeObservation.removeAll(observedBy: listener)`.
    case removeAll(listener: Int)
    /// Invalidates the token of the relation made `relation` (modulo the count) observations ago.
    case invalidate(relation: Int)
    /// Sets a property (`first` or `second`) to the next value of the world's counter.
    case mutate(object: Int, property: Int)
    /// Sets an object's `link` to the object in slot `target`, or to `nil`
    /// (an empty slot or a `nil` target).
    case setLink(object: Int, target: Int?)
    /// Sets every live object's `link` to `nil`, in creation order (the
    /// final teardown: a cycle of links would otherwise outlive the world).
    case unlinkAll
    /// `hub.observe(name, from: sender, by: listener)` on the world's hub
    /// (`name` 0 or 1; `sender` an object slot, or `nil` for no filter); the
    /// handler runs `reaction` on each notification, as for `observe`.
    indirect case observeNotification(listener: Int, name: Int, sender: Int?, reaction: ModelOperation?)
    /// `hub.post(name, payload: counter, from: sender)`.
    case post(name: Int, sender: Int?)
    /// `hub.unobserve(name, from: sender, by: listener)`.
    case unobserveNotification(listener: Int, name: Int, sender: Int?)
    /// `hub.unobserve(by: listener)`.
    case unobserveHub(listener: Int)
    /// Drops the world's reference to a listener.
    case releaseListener(slot: Int)
    /// Drops the world's reference to an observed object.
    case releaseObject(slot: Int)

    /// The notification names: `n0` and `n1`.
    public static let notificationNameCount = 2
    /// The number of object slots (O0, O1, …).
    public static let objectSlots = 3
    /// The number of listener slots (L0, L1, …).
    public static let listenerSlots = 3
    /// The mutable `@Observed` `Int` properties of each object: `first` and `second`.
    public static let propertyCount = 2
    /// The observable key paths: `\.first`, `\.second`, `\.sum`,
    /// `\.link?.first`, `\.link?.link?.second`, `\.pick`.
    public static let keyPathCount = 6
    /// What a handler records for an optional chain's `nil`.
    public static let nilValue = Int.min
    /// Handlers on the stack beyond which a handler no longer reacts.
    public static let maxHandlerDepth = 2

    /// Swift-like, for reproductions.
    public var description: String {
        func from(_ sender: Int?) -> String { sender.map { ", from: O\($0)" } ?? "" }
        func property(_ index: Int) -> String {
            ["\\.first", "\\.second", "\\.sum", "\\.link?.first", "\\.link?.link?.second", "\\.pick"][index]
        }
        switch self {
        case .makeObject(let slot, let mutates):
            return "makeObject(O\(slot)\(mutates ? ", mutatesInDeinit" : ""))"
        case .makeListener(let slot, let kind):
            return "makeListener(L\(slot), .\(kind))"
        case .observe(let listener, let object, let prop, let options, let reaction):
            let then = reaction.map { ", then: \($0)" } ?? ""
            return "observe(O\(object)\(property(prop)), by: L\(listener), "
                + "\(ObservationOptions(rawValue: options))\(then))"
        case .unobserveKeyPath(let listener, let object, let prop):
            return "unobserve(O\(object)\(property(prop)), by: L\(listener))"
        case .unobserveListener(let listener, let object):
            return "unobserve(O\(object), by: L\(listener))"
        case .removeAll(let listener):
            return "removeAll(observedBy: L\(listener))"
        case .invalidate(let relation):
            return "invalidate(relation #\(relation))"
        case .mutate(let object, let prop):
            return "mutate(O\(object)\(property(prop)))"
        case .setLink(let object, let target):
            return "link(O\(object), to: \(target.map { "O\($0)" } ?? "nil"))"
        case .unlinkAll:
            return "unlinkAll"
        case .observeNotification(let listener, let name, let sender, let reaction):
            let then = reaction.map { ", then: \($0)" } ?? ""
            return "hub.observe(n\(name)\(from(sender)), by: L\(listener)\(then))"
        case .post(let name, let sender):
            return "hub.post(n\(name)\(from(sender)))"
        case .unobserveNotification(let listener, let name, let sender):
            return "hub.unobserve(n\(name)\(from(sender)), by: L\(listener))"
        case .unobserveHub(let listener):
            return "hub.unobserve(by: L\(listener))"
        case .releaseListener(let slot):
            return "release(L\(slot))"
        case .releaseObject(let slot):
            return "release(O\(slot))"
        }
    }
}

/// How a listener ends its relations when it dies.
public enum ListenerKind: Int, Hashable, Sendable {
    /// A plain class: its relations end lazily (next change, object death, sweep).
    case plain
    /// A `SafeObserver`: its relations end inside its deinit.
    case safeObserver
    /// A plain class that calls `SafeObservation.removeAll(observedBy: self)` in its deinit.
    case removesAllInDeinit
}

/// Where a generator's choices come from: a seeded generator, or fuzzer bytes.
public protocol ModelEntropy {
    /// A number in `0..<bound` (`bound` is at most 256).
    mutating func next(_ bound: Int) -> Int
}

/// SplitMix64, recording each choice as one byte so that a generated sequence
/// can be saved as a fuzzing corpus file that decodes to the same sequence.
public struct SeededEntropy: ModelEntropy {
    private var state: UInt64
    /// Every choice made so far, one byte each.
    public private(set) var bytes: [UInt8] = []

    /// A generator whose choices depend only on `seed`.
    public init(seed: UInt64) { state = seed }

    /// A number in `0..<bound`, recorded.
    public mutating func next(_ bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        let choice = Int((z ^ (z >> 31)) % UInt64(bound))
        bytes.append(UInt8(choice))
        return choice
    }
}

/// Fuzzer bytes, one per choice; zeros once they run out.
public struct ByteEntropy: ModelEntropy {
    private let bytes: [UInt8]
    private var position = 0

    /// Choices read from `bytes`.
    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Whether every byte was used.
    public var isExhausted: Bool { position >= bytes.count }

    /// The next byte modulo `bound`.
    public mutating func next(_ bound: Int) -> Int {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return Int(bytes[position]) % bound
    }
}

extension ModelOperation {
    /// Draws one operation; `reactions` says whether an observation may carry one.
    public static func generate(from entropy: inout some ModelEntropy, reactions: Bool = true) -> ModelOperation {
        let object = entropy.next(objectSlots)
        let listener = entropy.next(listenerSlots)
        let keyPath = entropy.next(keyPathCount)
        // Weights out of 40: slots refill three times as often as they empty,
        // so most steps find both sides alive; 32…39 are notifications.
        switch entropy.next(40) {
        case 0..<3:
            return .makeObject(slot: object, mutatesInDeinit: entropy.next(2) == 0)
        case 3..<6:
            return .makeListener(slot: listener, kind: ListenerKind(rawValue: entropy.next(3))!)
        case 6..<15:
            let options = UInt8(entropy.next(16))
            let reaction = reactions && entropy.next(3) == 0 ? generate(from: &entropy, reactions: false) : nil
            return .observe(
                listener: listener, object: object, property: keyPath, options: options, reaction: reaction)
        case 15..<17:
            return .unobserveKeyPath(listener: listener, object: object, property: keyPath)
        case 17:
            return .unobserveListener(listener: listener, object: object)
        case 18:
            return .removeAll(listener: listener)
        case 19..<21:
            return .invalidate(relation: entropy.next(256))
        case 21..<27:
            return .mutate(object: object, property: keyPath % propertyCount)
        case 27..<30:
            let target = entropy.next(objectSlots + 1)
            return .setLink(object: object, target: target < objectSlots ? target : nil)
        case 30:
            return .releaseListener(slot: listener)
        case 31:
            return .releaseObject(slot: object)
        case 32..<35:
            let sender = entropy.next(objectSlots + 1)
            let reaction = reactions && entropy.next(3) == 0 ? generate(from: &entropy, reactions: false) : nil
            return .observeNotification(
                listener: listener, name: keyPath % notificationNameCount,
                sender: sender < objectSlots ? sender : nil, reaction: reaction)
        case 35..<38:
            let sender = entropy.next(objectSlots + 1)
            return .post(name: keyPath % notificationNameCount, sender: sender < objectSlots ? sender : nil)
        case 38:
            let sender = entropy.next(objectSlots + 1)
            return .unobserveNotification(
                listener: listener, name: keyPath % notificationNameCount, sender: sender < objectSlots ? sender : nil)
        default:
            return .unobserveHub(listener: listener)
        }
    }

    /// A seeded sequence: the world's slots filled first, then `length` random steps.
    public static func sequence(seed: UInt64, length: Int) -> (operations: [ModelOperation], bytes: [UInt8]) {
        var entropy = SeededEntropy(seed: seed)
        let operations = (0..<length).map { _ in generate(from: &entropy) }
        return (setUp + operations, entropy.bytes)
    }

    /// Decodes fuzzer bytes: the same set-up, then steps until the bytes run out.
    public static func sequence(decoding bytes: [UInt8], maxLength: Int = 400) -> [ModelOperation] {
        var entropy = ByteEntropy(bytes)
        var operations = setUp
        while !entropy.isExhausted, operations.count < maxLength + setUp.count {
            operations.append(generate(from: &entropy))
        }
        return operations
    }

    /// Every slot filled: plain and `SafeObserver` listeners mixed.
    /// (Computed: a global holding enum boxes reads as a leak to LeakSanitizer.)
    public static var setUp: [ModelOperation] {
        (0..<objectSlots).map { .makeObject(slot: $0, mutatesInDeinit: $0 == 2) }
            + (0..<listenerSlots).map { .makeListener(slot: $0, kind: ListenerKind(rawValue: $0)!) }
    }
}
