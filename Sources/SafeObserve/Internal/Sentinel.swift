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

/// Takes the lock that serializes every write of a sentinel field (the
/// ``_Registry``'s): registrations only read the object, so several may run
/// at once, but the first observation of a property writes its storage.
///
/// For the `@Observed` getter's tracking branch, which must not pass a
/// closure (capturing its key paths would keep the optimizer from folding
/// the getter's own storage access): pair it with
/// ``_unlockSentinelCreation()``, and run no user code in between.
@usableFromInline
func _lockSentinelCreation() {
    _Registry.lock()
}

/// Releases the lock taken by ``_lockSentinelCreation()``.
@usableFromInline
func _unlockSentinelCreation() {
    _Registry.unlock()
}
