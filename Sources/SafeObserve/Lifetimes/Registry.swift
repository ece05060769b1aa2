import Synchronization

/// The process-wide tables that registrations consult, behind one lock, so
/// that the common registration takes it once:
///
/// - which key paths are exactly one `@Observed` property, and where that
///   property keeps its sentinel (``_KeyPathResolutionCache``);
/// - which listener classes adopt ``SafeObserver`` (``_ListenerClassCache``);
/// - the proxies of all other listeners (``_ProxyTable``).
///
/// The same lock serializes the creation of sentinels: registrations only
/// read the observed object, so several may run at once, but the first
/// observation of a property writes its storage.
///
/// The tables are created on first use and never freed. They are published
/// through an atomic word that the compiler initializes statically, so
/// reaching them costs one load instead of a lazy global's once-check.
///
/// Held for a few dozen instructions at a time (with one exception: an
/// object's death that retires at least a quarter of the proxy table's
/// proxies takes them out in one pass, see ``_ProxyTable/removeRetired(_:_:)``);
/// never while user code runs, and never while another SafeObserve lock is
/// taken.
enum _Registry {
    struct State {
        var keyPaths = _KeyPathResolutionCache()
        var listenerClasses = _ListenerClassCache()
        var proxies = _ProxyTable()
    }

    /// The address of the `_LockedStorage<State>`, or 0 before first use.
    ///
    /// Unmanaged: set once, by compare-and-exchange, to an object published
    /// with a +1 that is never given back, so every load of a non-zero value
    /// may borrow it for the life of the process.
    private static let storageBits = Atomic<UInt>(0)

    /// Runs `body` with exclusive access to the tables.
    ///
    /// - Complexity: O(1) plus `body`.
    @inline(__always)
    static func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try storage()._withUnsafeGuaranteedRef { storage in
            storage.lock()
            defer { storage.unlock() }
            return try body(&storage.state)
        }
    }

    /// Takes the lock without a closure (the `@Observed` getter's tracking
    /// branch); every `lock()` is followed by ``unlock()``, with no user code
    /// in between.
    static func lock() {
        storage()._withUnsafeGuaranteedRef { $0.lock() }
    }

    /// Releases the lock taken by ``lock()``.
    static func unlock() {
        storage()._withUnsafeGuaranteedRef { $0.unlock() }
    }

    /// The published tables (see `storageBits`).
    @inline(__always)
    private static func storage() -> Unmanaged<_LockedStorage<State>> {
        if let address = UnsafeRawPointer(bitPattern: storageBits.load(ordering: .acquiring)) {
            return Unmanaged.fromOpaque(address)
        }
        return makeStorage()
    }

    @inline(never)
    private static func makeStorage() -> Unmanaged<_LockedStorage<State>> {
        let candidate = Unmanaged.passRetained(_LockedStorage(State()))
        let (exchanged, published) = storageBits.compareExchange(
            expected: 0, desired: UInt(bitPattern: candidate.toOpaque()), ordering: .acquiringAndReleasing)
        if exchanged { return candidate }
        // Another thread published its tables first.
        candidate.release()
        return Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: published)!)
    }

    // MARK: Registration fast path

    /// What registration finds about a key path and a listener, in one
    /// critical section; `nil` if the key path is not known to be exactly one
    /// `@Observed` property on instances of `object`'s class.
    ///
    /// The property's `channel` is created on its first observation (`nil`
    /// inside `object`'s `deinit`); `listener` is what the tables know of the
    /// listener (see ``State/lookUp(_:)``).
    @inline(__always)
    static func lookUp(
        _ keyPath: AnyKeyPath, on object: AnyObject, listener: AnyObject
    ) -> _Registry.Found? {
        withLock { state in
            guard let field = state.keyPaths.field(for: keyPath, on: ObjectIdentifier(type(of: object))) else {
                return nil
            }
            return state.lookUp(field, on: object, listener: listener)
        }
    }
}

extension _Registry.State {
    /// The channel of the property at `field` in `object` (creating its
    /// sentinel on first observation) and what the tables know of
    /// `listener`, both as in ``_Registry/lookUp(_:on:listener:)``.
    @inline(__always)
    func lookUp(
        _ field: _SentinelField, on object: AnyObject, listener: AnyObject
    ) -> _Registry.Found {
        var found = lookUp(listener)
        found.channel = field.channelCreatingSentinel(in: object)
        return found
    }

    /// What the tables know of `listener` (no channel).
    ///
    /// - Complexity: O(1) expected.
    @inline(__always)
    func lookUp(_ listener: AnyObject) -> _Registry.Found {
        let kind = listenerClasses.kind(of: listener)
        guard case .plain = kind else { return _Registry.Found(listenerClass: kind) }
        return _Registry.Found(proxy: proxies.existingProxy(of: listener), listenerClass: kind)
    }
}

extension _Registry {
    /// What one look-up found: the property's channel (when a property was
    /// looked up), the listener's proxy if the proxy table has it, and what
    /// the tables know of the listener's class.
    struct Found {
        var channel: _Channel? = nil
        var proxy: _ListenerProxy? = nil
        var listenerClass: _ListenerClass
    }
}
