import Synchronization

/// The number of registrations resolving a key path right now, on any thread.
///
/// `@Observed` getters read it (one relaxed load and one branch) and only look
/// at the thread-local tracker when it is non-zero.
@usableFromInline
let _activeTrackers = Atomic<Int>(0)

private let _currentTracker = _ThreadLocalPointer()

/// One property read recorded while a key path was resolved.
struct _Access {
    /// The object whose property was read.
    let object: AnyObject
    /// The property's relation list (already created: tracking runs only when
    /// an observation is being registered).
    let channel: _Channel
    /// The byte offset of the property's sentinel field in `object`, when
    /// the reader knew it (a chain's walk, or the tracked read that created
    /// the sentinel); otherwise ``sentinelFieldOffset`` finds it.
    var knownSentinelFieldOffset: Int? = nil

    /// The key path of the property as declared (`\Counter.count`), which
    /// its channel keeps.
    var wrappedKeyPath: AnyKeyPath {
        // Every recorded channel is a property's (a sentinel's), made with
        // its key path; only a notification hub's channels have none.
        channel.keyPath!
    }

    /// The byte offset of the property's sentinel field in `object`, for
    /// `@Observed` storage (`nil` for registrar-backed properties): known,
    /// or found among the `@Observed` fields that the metadata of `object`'s
    /// class lists — the one holding this property's sentinel. Only a
    /// registration that finds the key path to be exactly this property, a
    /// chain's layout and names use it (cold paths), while `object` is still
    /// held.
    var sentinelFieldOffset: Int? {
        knownSentinelFieldOffset ?? _ObservedFields.sentinelOffset(of: channel, in: object)
    }

    /// Where the property's sentinel field sits in `object`, if known and valid.
    var sentinelField: _SentinelField? {
        sentinelFieldOffset.flatMap { _SentinelField(validating: $0, in: object, keyPath: wrappedKeyPath) }
    }

    /// Whether `object` is an instance of exactly the class declaring the
    /// property: then reading the property runs its declared getter, never
    /// a subclass's override of it.
    var isOnItsDeclaringClass: Bool {
        ObjectIdentifier(type(of: object)) == ObjectIdentifier(type(of: wrappedKeyPath).rootType)
    }
}

/// Records which `@Observed` properties a key path reads.
///
/// Registration (and a derived key path's re-evaluation) installs a tracker
/// on the current thread, reads `root[keyPath: keyPath]`, and inspects the
/// recorded accesses. The tracker lives on the stack of ``resolve(_:)``; the
/// thread-local slot points to it while `read` runs (trackers nest: a
/// getter may register an observation).
struct _AccessTracker {
    private(set) var accesses: [_Access] = []
    /// What keeps the recorded channels of ``SafeObservationRegistrar``
    /// properties filed: their sentinels, which the registrar forgets (in a
    /// sweep) only while nothing else holds them. Whoever adds relations to
    /// the recorded channels holds these until it has (`@Observed` storage
    /// keeps its sentinels: none for those, and no array).
    private(set) var pins: [AnyObject]?

    /// Runs `read` while recording every `@Observed` access it makes.
    static func resolve(_ read: () -> Void) -> [_Access] {
        resolvePinning(read).accesses
    }

    /// ``resolve(_:)``, with what the caller must hold until the relations
    /// on the recorded channels are added (see ``pins``).
    static func resolvePinning(_ read: () -> Void) -> (accesses: [_Access], pins: [AnyObject]?) {
        var tracker = _AccessTracker()
        // Room for a chain of eight links without regrowing (one allocation
        // either way).
        tracker.accesses.reserveCapacity(8)
        let previous = _currentTracker.value
        withUnsafeMutablePointer(to: &tracker) { pointer in
            _currentTracker.value = UnsafeMutableRawPointer(pointer)
            _activeTrackers.add(1, ordering: .relaxed)
            defer {
                _activeTrackers.subtract(1, ordering: .relaxed)
                _currentTracker.value = previous
            }
            read()
        }
        return (tracker.accesses, tracker.pins)
    }

    /// Records `access` in the tracker of the registration running on this
    /// thread, if any.
    static func record(_ access: @autoclosure () -> _Access) {
        guard let tracker = _currentTracker.value else { return }
        record(access(), into: tracker)
    }

    /// Records `access`, and `pin` (see ``pins``), in the tracker of the
    /// registration running on this thread, if any.
    static func record(_ access: _Access, pinning pin: AnyObject) {
        guard let tracker = _currentTracker.value else { return }
        // The slot points to the tracker of the `resolve` running on this
        // thread, which outlives the call (it restores the slot before returning).
        let pointer = tracker.assumingMemoryBound(to: _AccessTracker.self)
        pointer.pointee.accesses.append(access)
        if pointer.pointee.pins == nil {
            pointer.pointee.pins = [pin]
        } else {
            pointer.pointee.pins!.append(pin)
        }
    }

    /// Records `access` in `tracker`, the thread-local slot's value (see
    /// ``_trackerOnThisThread()``), read on this thread during the
    /// `resolve` it belongs to.
    static func record(_ access: _Access, into tracker: UnsafeMutableRawPointer) {
        // The slot points to the tracker of the `resolve` running on this
        // thread, which outlives the call (it restores the slot before returning).
        tracker.assumingMemoryBound(to: _AccessTracker.self).pointee.accesses.append(access)
    }

    /// Whether a registration is resolving a key path on this thread.
    static var isActive: Bool { _currentTracker.value != nil }
}

/// The tracker of the registration resolving a key path on this thread, if
/// any: the `@Observed` getter's one look-up of the thread-local slot, handed
/// to ``Observed/_recordAccess(_:sentinelBits:into:)`` (opaque to the
/// caller's module).
@usableFromInline
func _trackerOnThisThread() -> UnsafeMutableRawPointer? {
    _currentTracker.value
}
