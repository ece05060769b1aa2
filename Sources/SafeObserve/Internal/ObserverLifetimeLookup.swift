/// Finds a listener's ``ObserverLifetime`` without a dynamic protocol cast
/// per registration.
///
/// `listener as? any SafeObserver` asks the runtime's conformance cache
/// (about 280 instructions). A class either adopts ``SafeObserver`` or not, for
/// good, so the answer is cached per class in a small direct-mapped table: the
/// class's conformance as an existential metatype (two pointers, nothing to
/// retain), which is then opened to read `observerLifetime` statically.
enum _ObserverLifetimeLookup {
    struct Entry {
        /// The class (its metadata's identity; metadata is never freed).
        var type: ObjectIdentifier?
        /// The class as a `SafeObserver`; `nil` when it does not adopt it.
        var observerType: (any SafeObserver.Type)?
    }

    private static let slotCount = 64

    private static let table = _Mutex(ContiguousArray(repeating: Entry(), count: slotCount))

    /// The listener's lifetime if its class adopts ``SafeObserver``.
    ///
    /// - Complexity: O(1).
    static func lifetime(of listener: AnyObject) -> ObserverLifetime? {
        let type = ObjectIdentifier(Swift.type(of: listener))
        let slot = Int(truncatingIfNeeded: ((UInt(bitPattern: type) &>> 4) &* 0x9E37_79B9_7F4A_7C15) &>> 58)
        let cached = table.withLock { table -> Entry? in
            table[slot].type == type ? table[slot] : nil
        }
        let observerType: (any SafeObserver.Type)?
        if let cached {
            observerType = cached.observerType
        } else {
            observerType = (listener as? any SafeObserver).map { Swift.type(of: $0) }
            table.withLock { table in table[slot] = Entry(type: type, observerType: observerType) }
        }
        guard let observerType else { return nil }
        return lifetime(of: listener, as: observerType)
    }

    private static func lifetime<Observer: SafeObserver>(of listener: AnyObject, as _: Observer.Type)
        -> ObserverLifetime
    {
        // unsafeDowncast: `Observer` is the listener's own class (the cache key).
        unsafeDowncast(listener, to: Observer.self).observerLifetime
    }
}
