/// The deinit listener of one observed property of one object.
///
/// Created on the first observation of the property and stored next to its
/// value (in the `@Observed` storage, or in a ``SafeObservationRegistrar``),
/// a sentinel is held by nothing else: its `deinit` runs while its object is
/// being destroyed, before that memory can be reused, and tears down every
/// relation on the property. Relations hold the ``_Channel`` (the shared
/// state), never the sentinel, so they cannot delay that moment.
// @unchecked Sendable: both stored properties are immutable; `object` is an
// identity-only back-pointer that is never dereferenced as an object.
@usableFromInline final class _Sentinel: @unchecked Sendable {
    /// The observed object, for identity and debugging only.
    // unowned(unsafe): never read after the object dies — the sentinel is owned
    // by the object's own storage, so it cannot outlive it.
    unowned(unsafe) let object: AnyObject

    @usableFromInline
    let channel = _Channel()

    init(object: AnyObject) {
        self.object = object
    }

    deinit {
        channel.tearDown()
    }
}

/// Serializes the first observation of `@Observed` properties: registrations
/// only read the object, so several may run at once, but creating a sentinel
/// writes the property's storage. Held only around that check-and-store,
/// never around user code. (Its state is unused but not empty: a zero-sized
/// state would share its address with the mutex itself, which confuses
/// ThreadSanitizer's access tracking.)
@usableFromInline
let _sentinelCreationLock = _Mutex<UInt8>(0)
