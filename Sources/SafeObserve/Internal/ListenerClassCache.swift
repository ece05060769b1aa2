/// Which listener classes adopt ``SafeObserver``, so that finding a
/// listener's proxy needs no dynamic protocol cast per registration.
///
/// `listener as? any SafeObserver` asks the runtime's conformance cache
/// (about 280 instructions). A class either adopts ``SafeObserver`` or not, for
/// good, so the answer is cached per class in a small direct-mapped table
/// (part of the ``_Registry``): the class's conformance as an existential
/// metatype (two pointers, nothing to retain), which is then opened to read
/// `observerLifetime` statically.
struct _ListenerClassCache {
    struct Entry {
        /// The class (its metadata's identity; metadata is never freed).
        var type: ObjectIdentifier?
        /// The class as a `SafeObserver`; `nil` when it does not adopt it.
        var observerType: (any SafeObserver.Type)?
    }

    private static let slotCount = 64

    private var slots = ContiguousArray(repeating: Entry(), count: slotCount)

    private static func slot(of type: ObjectIdentifier) -> Int {
        Int(truncatingIfNeeded: ((UInt(bitPattern: type) &>> 4) &* 0x9E37_79B9_7F4A_7C15) &>> 58)
    }

    /// `.some(type)` if `listener`'s class adopts ``SafeObserver``,
    /// `.some(nil)` if it does not, `nil` if the class is not in the table.
    ///
    /// - Complexity: O(1).
    func observerType(of listener: AnyObject) -> (any SafeObserver.Type)?? {
        let type = ObjectIdentifier(Swift.type(of: listener))
        let slot = Self.slot(of: type)
        guard slots[slot].type == type else { return nil }
        return .some(slots[slot].observerType)
    }

    /// Records whether `listener`'s class adopts ``SafeObserver``.
    mutating func record(_ observerType: (any SafeObserver.Type)?, forClassOf listener: AnyObject) {
        let type = ObjectIdentifier(Swift.type(of: listener))
        slots[Self.slot(of: type)] = Entry(type: type, observerType: observerType)
    }

    /// Whether `listener`'s class adopts ``SafeObserver``, computed with a
    /// dynamic cast (runtime work: call it unlocked) and recorded.
    static func lookUpSlowly(_ listener: AnyObject) -> (any SafeObserver.Type)? {
        let observerType = (listener as? any SafeObserver).map { Swift.type(of: $0) }
        _Registry.withLock { $0.listenerClasses.record(observerType, forClassOf: listener) }
        return observerType
    }

    /// `listener`'s lifetime, `Observer` being its class's conformance.
    static func lifetime<Observer: SafeObserver>(of listener: AnyObject, as _: Observer.Type) -> ObserverLifetime {
        // unsafeDowncast: `Observer` is the listener's own class (the cache key).
        unsafeDowncast(listener, to: Observer.self).observerLifetime
    }
}
