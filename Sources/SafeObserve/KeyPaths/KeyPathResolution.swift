/// Where an `@Observed` property keeps its sentinel, as a byte offset from
/// the start of its object: the same for every instance of the class that
/// declares the property, and of its subclasses.
///
/// Registration resolves a key path by reading it with a tracker installed
/// (``_AccessTracker``): general, but it costs a key-path application and the
/// getter's bookkeeping, about 2,300 instructions. The first resolution of a
/// key path that is exactly one `@Observed` property records this offset in
/// ``_KeyPathResolutionCache``; later registrations of that key path, on any
/// instance, reach the sentinel directly.
struct _SentinelField {
    let offset: Int
    /// The property's key path as declared, for the sentinel's channel.
    let keyPath: AnyKeyPath

    /// The field `offset` bytes into instances of `object`'s class, or `nil`
    /// if the class's metadata has no `@Observed` sentinel there (then
    /// registrations keep using the general path).
    ///
    /// Validated, never assumed, and without reading the object: the offset
    /// must be where the type metadata of `object`'s class places the
    /// sentinel of one of its `@Observed` properties. The allocator is never
    /// asked (the object may be statically allocated), and no other stored
    /// property is read (see ``_ObservedFields``).
    init?(validating offset: Int, in object: AnyObject, keyPath: AnyKeyPath) {
        guard let field = _ObservedFields.field(withSentinelAt: offset, in: type(of: object)) else { return nil }
        self.init(field, keyPath: keyPath)
    }

    /// The sentinel field of `field`, which the type metadata of a class
    /// described (so it is valid in instances of that class and its
    /// subclasses); `keyPath` is the property's, as declared.
    init(_ field: _ObservedFields.Field, keyPath: AnyKeyPath) {
        offset = field.sentinelOffset
        self.keyPath = keyPath
    }

    /// The channel of the property at this offset in `object`, creating its
    /// sentinel on first observation; `nil` inside the object's `deinit`.
    ///
    /// `object` must be an instance of a class the offset was located in (the
    /// key path's root guarantees it). Call it inside `_Registry.withLock`,
    /// which serializes every write of a sentinel field.
    ///
    /// - Complexity: O(1).
    func channelCreatingSentinel(in object: AnyObject) -> _Channel? {
        // Unmanaged without a retain: the caller holds `object`.
        let base = UnsafeMutableRawPointer(Unmanaged.passUnretained(object).toOpaque())
        // A stored `_Sentinel?` of `Observed<Value>`: memory bound to the
        // storage struct is bound to its fields' types too.
        let field = (base + offset).assumingMemoryBound(to: _Sentinel?.self)
        // Borrowed (see `Observed._sentinel`): the caller holds `object`.
        if let sentinelAddress = UnsafeRawPointer(bitPattern: UnsafeRawPointer(field).load(as: UInt.self)) {
            return Unmanaged<_Sentinel>.fromOpaque(sentinelAddress)._withUnsafeGuaranteedRef { $0.channel }
        }
        // Never create a sentinel inside the object's own deinit.
        guard !_swift_isDeallocating(object) else { return nil }
        // The kind the property's getter would create (an
        // `_ObservableSentinel` for a class that reports to Observation), as
        // the class's metadata says: looked up here, on a property's first
        // observation, so that the cached field stays two words.
        guard let described = _ObservedFields.field(withSentinelAt: offset, in: type(of: object)) else { return nil }
        let sentinel = described.storageType._makeSentinel(
            of: object, keyPath: keyPath, reportingToObservation: described.reportsToObservation)
        field.pointee = sentinel
        return sentinel.channel
    }
}

extension _SentinelField {
    /// ``channelCreatingSentinel(in:)``, taking the registry's lock (tests).
    func channel(in object: AnyObject) -> _Channel? {
        _Registry.withLock { _ in channelCreatingSentinel(in: object) }
    }
}

/// What the first resolution of each key path on each class of object
/// learned (part of the ``_Registry``).
///
/// Per class of object, not per key path alone: what a key path reads
/// depends on the getters of the object it is applied to. `\Base.count` on
/// an instance of `Base` is the `@Observed` property; on an instance of a
/// subclass overriding `count` with a getter that reads another property, it
/// is that other property (a derived key path). So a resolution made on one
/// class is used for instances of exactly that class, and an instance of
/// another class is resolved on its own — once per (key path, class), so
/// that which registration came first never changes what is observed.
///
/// Key-path literals are instantiated once per use site, so a program's
/// registrations keep presenting the same few objects: the first level is
/// direct-mapped by key-path identity and object class and bounded (64
/// entries, each holding its key path so that the identity stays valid).
///
/// A literal in generic code (`\.count` inside `func f<T: Base>(_: T)`) is a
/// new key-path object on every call. The second level finds it by value:
/// its class (`ReferenceWritableKeyPath<T, Int>`, one metadata object per
/// root and value type) picks a short list of candidates — the `@Observed`
/// properties of that root with that value type that were resolved, each on
/// a class of object — and `==` confirms one. Classifying by class costs a
/// load, where hashing the key path would cost about 550 instructions per
/// registration; `==` runs user code for key paths with subscript arguments,
/// so it runs outside locks. Bounded: 8 candidates per key-path class and
/// 512 in all (a program building key paths dynamically evicts an arbitrary
/// list, which only costs its next registration the general path). A miss
/// takes the general path.
struct _KeyPathResolutionCache {
    struct Entry {
        var keyPath: AnyKeyPath?
        /// The class of the objects the resolution holds for.
        var objectClass: ObjectIdentifier?
        var field = _SentinelField?.none
    }

    /// A second-level candidate.
    typealias Candidate = (keyPath: AnyKeyPath, objectClass: ObjectIdentifier, field: _SentinelField)

    private static let slotCount = 64
    private static let valueLimit = 512
    private static let candidateLimit = 8

    private var slots = ContiguousArray(repeating: Entry(), count: slotCount)

    /// The second level, by key-path class.
    private var byClass: [ObjectIdentifier: [Candidate]] = [:]
    /// The candidates in `byClass`, all lists together.
    private var candidateCount = 0

    private static func slot(of keyPath: AnyKeyPath, on objectClass: ObjectIdentifier) -> Int {
        let keyPathBits = UInt(bitPattern: ObjectIdentifier(keyPath)) &>> 4
        let classBits = UInt(bitPattern: objectClass) &>> 4
        return _fibonacciHash(keyPathBits ^ (classBits &* 0x9E37), bits: 6)
    }

    /// The sentinel field `keyPath` resolves to on instances of
    /// `objectClass`, if known.
    ///
    /// - Complexity: O(1).
    func field(for keyPath: AnyKeyPath, on objectClass: ObjectIdentifier) -> _SentinelField? {
        let slot = Self.slot(of: keyPath, on: objectClass)
        let entry = slots[slot]
        return entry.keyPath === keyPath && entry.objectClass == objectClass ? entry.field : nil
    }

    /// The sentinel field `keyPath` resolves to on instances of
    /// `objectClass`, if known (takes the lock).
    static func sentinelField(for keyPath: AnyKeyPath, on objectClass: ObjectIdentifier) -> _SentinelField? {
        _Registry.withLock { $0.keyPaths.field(for: keyPath, on: objectClass) }
    }

    /// The sentinel field of a key path equal to `keyPath`, if one was
    /// resolved before (the second level) on instances of `objectClass` —
    /// or, with `nil`, on any class (to name the property). Call it outside
    /// locks.
    ///
    /// - Complexity: O(1) expected, plus at most 8 `==` of `keyPath` (each
    ///   stops at the first component that differs).
    static func sentinelField(equalTo keyPath: AnyKeyPath, on objectClass: ObjectIdentifier?) -> _SentinelField? {
        let keyPathClass = ObjectIdentifier(type(of: keyPath))
        guard let candidates = _Registry.withLock({ $0.keyPaths.byClass[keyPathClass] }) else { return nil }
        return candidates.first { candidate in
            (objectClass == nil || candidate.objectClass == objectClass) && candidate.keyPath == keyPath
        }?.field
    }

    /// Records that `keyPath` is exactly the `@Observed` property at `field`
    /// on instances of `objectClass`. Call it outside locks (it compares key
    /// paths).
    static func record(_ field: _SentinelField, for keyPath: AnyKeyPath, on objectClass: ObjectIdentifier) {
        let slot = slot(of: keyPath, on: objectClass)
        let keyPathClass = ObjectIdentifier(type(of: keyPath))
        // Another object equal to `keyPath` is already a candidate (a literal
        // at another use site): the first level is enough.
        let isKnown = sentinelField(equalTo: keyPath, on: objectClass) != nil
        let replaced = _Registry.withLock { state -> (Entry, [Candidate]?) in
            defer {
                state.keyPaths.slots[slot] = Entry(keyPath: keyPath, objectClass: objectClass, field: field)
            }
            guard !isKnown else { return (state.keyPaths.slots[slot], nil) }
            return (
                state.keyPaths.slots[slot],
                state.keyPaths.addCandidate((keyPath, objectClass, field), to: keyPathClass)
            )
        }
        _ = replaced  // released unlocked
    }

    /// Adds a candidate to the list of `keyPathClass`; returns a list evicted
    /// to stay within the bounds (to release unlocked).
    private mutating func addCandidate(_ candidate: Candidate, to keyPathClass: ObjectIdentifier) -> [Candidate]? {
        var evicted: [Candidate]?
        if byClass[keyPathClass] == nil, candidateCount >= Self.valueLimit, let victim = byClass.first?.key {
            evicted = byClass.removeValue(forKey: victim)
            candidateCount -= evicted?.count ?? 0
        }
        var list = byClass.removeValue(forKey: keyPathClass) ?? []
        if list.count >= Self.candidateLimit {
            // The oldest goes: lists stay short, so `==` runs a few times at most.
            evicted = (evicted ?? []) + [list.removeFirst()]
            candidateCount -= 1
        }
        list.append(candidate)
        candidateCount += 1
        byClass[keyPathClass] = list
        return evicted
    }
}
