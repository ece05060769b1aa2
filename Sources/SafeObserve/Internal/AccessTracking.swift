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
    /// The key path of the `@Observed` property as declared (`\Counter.count`).
    let wrappedKeyPath: AnyKeyPath
    /// The property's relation list (already created: tracking runs only when
    /// an observation is being registered).
    let channel: _Channel
    /// The byte offset of the property's sentinel field in `object`, for
    /// `@Observed` storage (`nil` for registrar-backed properties). Only a
    /// registration that finds the key path to be exactly this property
    /// validates it into a ``_SentinelField``, while `object` is still held.
    var sentinelFieldOffset: Int? = nil

    /// Where the property's sentinel field sits in `object`, if known and valid.
    var sentinelField: _SentinelField? {
        sentinelFieldOffset.flatMap { _SentinelField(validating: $0, in: object) }
    }
}

/// Records which `@Observed` properties a key path reads.
///
/// Registration installs a tracker on the current thread, reads
/// `root[keyPath: keyPath]`, and inspects the recorded accesses.
final class _AccessTracker {
    private(set) var accesses: [_Access]
    private var previous: UnsafeMutableRawPointer?

    private init() {
        // Room for a short chain without regrowing.
        accesses = []
        accesses.reserveCapacity(4)
    }

    /// Runs `read` while recording every `@Observed` access it makes.
    static func resolve(_ read: () -> Void) -> [_Access] {
        let tracker = _AccessTracker()
        tracker.previous = _currentTracker.value
        // Unmanaged without a retain: `tracker` is alive until this function returns.
        _currentTracker.value = Unmanaged.passUnretained(tracker).toOpaque()
        _activeTrackers.add(1, ordering: .relaxed)
        defer {
            _activeTrackers.subtract(1, ordering: .relaxed)
            _currentTracker.value = tracker.previous
        }
        read()
        return tracker.accesses
    }

    /// The tracker of the registration running on this thread, if any.
    static var current: _AccessTracker? {
        guard let pointer = _currentTracker.value else { return nil }
        // Unmanaged: the pointer was set by `resolve`, whose frame keeps the tracker alive.
        return Unmanaged<_AccessTracker>.fromOpaque(pointer).takeUnretainedValue()
    }

    func record(_ access: _Access) {
        accesses.append(access)
    }
}

/// Whether a registration is resolving a key path on this thread (checked
/// before the getter takes the sentinel creation lock).
@usableFromInline
func _isTrackingOnThisThread() -> Bool {
    _AccessTracker.current != nil
}
