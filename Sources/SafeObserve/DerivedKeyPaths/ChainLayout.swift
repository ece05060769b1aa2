/// Where each link of a chain of stored `@Observed` links (`\.b.c.value`)
/// keeps its value and its sentinel, so that a derivation re-reads the chain
/// from storage — object by object, as the links' getters would — instead of
/// applying the whole key path with a tracker installed.
///
/// Replacing an intermediate object (`root.b = B()`) changes which objects
/// the later links are on: the derivation must re-read them, and re-bind its
/// dependencies to their properties. A chain's links are the same properties
/// whatever objects they are on, so the reads need no tracking and no
/// key-path application (about 1,000 instructions per link through the
/// runtime); each is one load at an offset the class metadata gave.
///
/// Made once per derivation, from its first tracked evaluation, and only if
/// everything it relies on is confirmed (otherwise the derivation keeps
/// re-tracking, always correct):
/// - every link's sentinel offset is an `@Observed` field in the type
///   metadata of the class declaring the link (the root type of its key
///   path), so it is the same field in every instance of that class and its
///   subclasses — every object the link can be on;
/// - every link but the last holds a class reference (its value is the next
///   link's object), and the last holds the key path's value type;
/// - the root is an instance of exactly the class declaring the first link
///   (the root never changes, and a walk needs that of every object).
///
/// And one fact per walk, since a replaced link may bring an object of
/// another class: every object holding a link is an instance of exactly the
/// class declaring that link, so its getter is the one `@Observed`
/// synthesized, which returns what is stored. An instance of a subclass may
/// override the getter (Swift tells no one whether it does), so a walk
/// reaching one gives up, and the derivation evaluates the key path through
/// the getters instead.
///
/// Like ``Observed``'s getter, a read here is of the `@Observed` storage
/// alone: no other stored property, and no user code (so a walk may run
/// under the registry lock, which sentinel creation needs).
struct _ChainLayout {
    struct Link {
        /// The link's sentinel field (validated in its declaring class),
        /// with the link's key path as declared (`\B.c`).
        let field: _SentinelField
        /// The byte offset of the link's `_value` field.
        let valueOffset: Int
        /// The class declaring the link (the root type of `field.keyPath`).
        let declaringClass: ObjectIdentifier
    }

    /// The links, in key-path order (at least two).
    let links: [Link]

    /// The layout of the chain `accesses` read from `root`, if every fact
    /// listed above holds; `valueType` is the key path's value type.
    ///
    /// - Complexity: O(*d*) in the links, the first time each class is seen
    ///   O(*p*) in its stored properties (``_ObservedFields``).
    init?(reads accesses: [_Access], root: AnyObject, valueType: Any.Type) {
        guard accesses.count >= 2, accesses[0].object === root,
            accesses[0].isOnItsDeclaringClass
        else { return nil }
        var links: [Link] = []
        links.reserveCapacity(accesses.count)
        for (index, access) in accesses.enumerated() {
            guard let declaring = type(of: access.wrappedKeyPath).rootType as? AnyClass,
                let offset = access.sentinelFieldOffset,
                let stored = _ObservedFields.field(withSentinelAt: offset, in: declaring)
            else { return nil }
            if index == accesses.count - 1 {
                guard stored.valueType == valueType else { return nil }
            } else {
                guard stored.valueType is AnyObject.Type else { return nil }
            }
            links.append(
                Link(
                    field: _SentinelField(stored, keyPath: access.wrappedKeyPath), valueOffset: stored.valueOffset,
                    declaringClass: ObjectIdentifier(declaring))
            )
        }
        self.links = links
    }

    /// What a tracked evaluation from `root` would record — each link's
    /// object (retained), key path and channel, creating sentinels as the
    /// getters do — and the address of the last link's value, inside
    /// `accesses.last!.object`; `nil` if an object is being destroyed or a
    /// link is held by an instance of a subclass (then the caller evaluates
    /// the key path).
    ///
    /// - Complexity: O(*d*) in the links, under the registry lock.
    func walk(from root: AnyObject) -> (accesses: [_Access], leaf: UnsafeRawPointer)? {
        var accesses: [_Access] = []
        accesses.reserveCapacity(links.count)
        // Nothing is released inside: every object loaded stays referenced
        // by the link that stores it (the root by the caller).
        let isComplete = _Registry.withLock { _ -> Bool in
            var object = root
            for index in links.indices {
                guard let channel = links[index].field.channelCreatingSentinel(in: object) else { return false }
                accesses.append(
                    _Access(
                        object: object, channel: consume channel, knownSentinelFieldOffset: links[index].field.offset))
                if index < links.count - 1 {
                    guard let next = next(after: index, in: object) else { return false }
                    object = next
                } else if !holdsExactly(links[index], object) {
                    return false
                }
            }
            return true
        }
        guard isComplete, let last = accesses.last else { return nil }
        return (accesses, Self.address(of: links[links.count - 1].valueOffset, in: last.object))
    }

    /// Runs `body` with the address of the last link's value reached from
    /// `root`, without creating sentinels (a value captured before a change);
    /// `nil` without calling it if a link is held by an instance of a
    /// subclass (then the caller evaluates the key path).
    func withLeaf<Result>(from root: AnyObject, _ body: (UnsafeRawPointer) -> Result) -> Result? {
        var object = root
        for index in links.indices.dropLast() {
            guard let next = next(after: index, in: object) else { return nil }
            object = next
        }
        guard holdsExactly(links[links.count - 1], object) else { return nil }
        return withExtendedLifetime(object) { body(Self.address(of: links[links.count - 1].valueOffset, in: object)) }
    }

    /// The object link `index` (not the last) stores in `object`, if
    /// `object` is an instance of exactly the class declaring the link:
    /// then the link's getter is `@Observed`'s, which returns what is stored.
    @inline(__always)
    private func next(after index: Int, in object: AnyObject) -> AnyObject? {
        guard holdsExactly(links[index], object) else { return nil }
        return Self.object(at: links[index].valueOffset, in: object)
    }

    /// Whether `object` is an instance of exactly the class declaring `link`.
    @inline(__always)
    private func holdsExactly(_ link: Link, _ object: AnyObject) -> Bool {
        ObjectIdentifier(type(of: object)) == link.declaringClass
    }

    // MARK: Reading the storage

    /// The address `offset` bytes into `object`, which the caller holds.
    private static func address(of offset: Int, in object: AnyObject) -> UnsafeRawPointer {
        // Unmanaged without a retain: only an address is formed.
        UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque()) + offset
    }

    /// The object a link stores at `offset` in `object` (retained: `load`
    /// copies). Its `_value` is a class reference (the metadata said so),
    /// and a class reference is an `AnyObject`'s representation.
    private static func object(at offset: Int, in object: AnyObject) -> AnyObject {
        address(of: offset, in: object).load(as: AnyObject.self)
    }
}
