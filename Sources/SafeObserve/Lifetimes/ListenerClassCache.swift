/// What ``_ListenerClassCache`` knows of a listener's class.
enum _ListenerClass {
    /// Not in the table (never seen, or evicted).
    case unknown
    /// It does not adopt ``SafeObserver``: its proxy is in the proxy table.
    case plain
    /// It adopts ``SafeObserver`` with this conformance: its proxy is in its lifetime.
    case observer(any SafeObserver.Type)
}

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
        _fibonacciHash(UInt(bitPattern: type) &>> 4, bits: 6)
    }

    /// What the table knows of `listener`'s class.
    ///
    /// - Complexity: O(1).
    func kind(of listener: AnyObject) -> _ListenerClass {
        let type = ObjectIdentifier(Swift.type(of: listener))
        let slot = Self.slot(of: type)
        guard slots[slot].type == type else { return .unknown }
        return slots[slot].observerType.map(_ListenerClass.observer) ?? .plain
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

    /// The proxy in `listener`'s lifetime, created on first use with `create`.
    ///
    /// Before creating it, checks that `observerLifetime` is stored: a
    /// computed one (a new lifetime on each access) would take the proxy
    /// with it when it dies right after this call, silently ending every
    /// relation. That mistake is reported, and the registration refused.
    ///
    /// - Complexity: O(1); the check reads `observerLifetime` once more, on
    ///   the listener's first observation only.
    @inline(__always)
    static func proxy<Observer: SafeObserver>(
        of listener: AnyObject, as type: Observer.Type, create: Bool
    ) -> _ListenerProxy? {
        if let proxy = lifetime(of: listener, as: type).proxy(for: listener, create: false) { return proxy }
        return create ? newProxy(of: listener, as: type) : nil
    }

    /// The first observation of a ``SafeObserver`` listener: checks that its
    /// lifetime is stored, then creates the proxy.
    @inline(never)
    private static func newProxy<Observer: SafeObserver>(
        of listener: AnyObject, as type: Observer.Type
    ) -> _ListenerProxy? {
        let lifetime = lifetime(of: listener, as: type)
        guard Self.lifetime(of: listener, as: type) === lifetime else {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: a \(Swift.type(of: listener)) returns a new ObserverLifetime each time "
                    + "`observerLifetime` is read, so nothing it observes would last; declare it as a stored "
                    + "`let observerLifetime = ObserverLifetime()`")
            return nil
        }
        return lifetime.proxy(for: listener, create: true)
    }

    /// `listener`'s lifetime, `Observer` being its class's conformance.
    static func lifetime<Observer: SafeObserver>(of listener: AnyObject, as _: Observer.Type) -> ObserverLifetime {
        // unsafeDowncast: `Observer` is the listener's own class (the cache key).
        unsafeDowncast(listener, to: Observer.self).observerLifetime
    }
}
