// Every call into the C library or the Swift runtime lives in this file, so
// that porting SafeObserve to another platform means reading one page.

import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#elseif canImport(Android)
    import Android
#endif

/// A per-thread slot holding one raw pointer, backed by a pthread key.
///
/// Only registration uses it (to find the tracker of the key path being
/// resolved on this thread), so its cost never reaches the property setters.
struct _ThreadLocalPointer: ~Copyable, @unchecked Sendable {
    // @unchecked Sendable: a pthread key is an immutable process-wide handle;
    // every thread reads and writes only its own slot through it.
    private let key: pthread_key_t

    init() {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "SafeObserve: pthread_key_create failed (\(status))")
        self.key = key
    }

    var value: UnsafeMutableRawPointer? {
        get { pthread_getspecific(key) }
        nonmutating set { _ = pthread_setspecific(key, newValue) }
    }
}

#if canImport(ObjectiveC)

    // On platforms with Objective-C interop a listener or an observed object may
    // be refcounted by the Objective-C runtime (an NSObject subclass), where the
    // native probes below do not apply: use weak references there instead.

    /// Whether `object` has started deinitialization (its strong count reached zero).
    func _swift_isDeallocating(_ object: AnyObject) -> Bool {
        weak let probe = object
        return probe == nil
    }

    /// Retains `object` (+1, for the caller to release) unless its
    /// deinitialization began.
    func _tryRetain(_ object: AnyObject) -> Bool {
        weak let probe = object
        guard let strong = probe else { return false }
        // Unmanaged: the +1 the caller releases.
        _ = Unmanaged.passRetained(strong)
        return true
    }

    /// The liveness probes, fetched once per emission (see the native variant).
    struct _Probe {
        static var current: _Probe { _Probe() }

        func tryRetain(_ object: AnyObject) -> Bool { _tryRetain(object) }

        func load(_ reference: _UnretainedReference) -> AnyObject? { reference.load() }
    }

    /// A relation's reference to its listener (see the native variant): here,
    /// a copy of the proxy's weak reference.
    typealias _ListenerHandle = _UnretainedReference

    extension _UnretainedReference {
        init(_ reference: _UnretainedReference) { self = reference }
    }

    /// A reference to a listener that never keeps it alive.
    struct _UnretainedReference: @unchecked Sendable {
        // @unchecked Sendable: a weak reference is safe to load from any thread.
        private weak let object: AnyObject?
        /// The object's address, for identity only.
        let address: UnsafeMutableRawPointer

        init(_ object: AnyObject) {
            self.object = object
            // Unmanaged without a retain: only the address is kept.
            address = Unmanaged.passUnretained(object).toOpaque()
        }

        /// A strong reference unless deinitialization began. Call it outside
        /// locks: dropping the result may run the object's deinit.
        func load() -> AnyObject? { object }

        /// Whether deinitialization began. Loads weakly: call it outside locks.
        var isGone: Bool { object == nil }

        /// Whether the object is alive, given that the caller holds a strong
        /// reference to the object with this identity (safe under a lock).
        func isAlive(heldByCaller listener: AnyObject) -> Bool { object === listener }
    }

#else

    /// A Swift runtime entry point taking one object, looked up once with
    /// `dlsym` (the compiler reserves `@_silgen_name` for its own use of runtime
    /// symbols) and kept in `cache`. Both functions used here are part of the
    /// runtime's stable ABI.
    ///
    /// The caches are statically initialized atomic words, so a call costs one
    /// load more than a direct call (a lazy global would check its once-token
    /// each time). Relaxed ordering suffices: the word publishes nothing but
    /// itself, and every thread that looks the symbol up stores the same value.
    @inline(never)
    private func _runtimeFunctionAddress(_ name: StaticString, cache: borrowing Atomic<UInt>) -> UInt {
        let handle: UnsafeMutableRawPointer? = nil  // RTLD_DEFAULT
        guard
            let symbol = name.withUTF8Buffer({
                dlsym(handle, UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self))
            })
        else {
            preconditionFailure("SafeObserve: the Swift runtime does not export \(name)")
        }
        let address = UInt(bitPattern: symbol)
        cache.store(address, ordering: .relaxed)
        return address
    }

    private typealias _IsDeallocatingFunction = @convention(c) (UnsafeMutableRawPointer) -> Bool
    private typealias _TryRetainFunction = @convention(c) (UnsafeMutableRawPointer) -> UnsafeMutableRawPointer?

    private let _isDeallocatingAddress = Atomic<UInt>(0)
    private let _tryRetainAddress = Atomic<UInt>(0)

    /// `bool swift_isDeallocating(HeapObject *)`.
    private var _isDeallocatingFunction: _IsDeallocatingFunction {
        @inline(__always) get {
            var address = _isDeallocatingAddress.load(ordering: .relaxed)
            if address == 0 { address = _runtimeFunctionAddress("swift_isDeallocating", cache: _isDeallocatingAddress) }
            // unsafeBitCast: the symbol's address, to the runtime's documented C signature.
            return unsafeBitCast(address, to: _IsDeallocatingFunction.self)
        }
    }

    /// `HeapObject *swift_tryRetain(HeapObject *)`: the object, +1, unless its
    /// deinitialization began (then `NULL`).
    private var _tryRetainFunction: _TryRetainFunction {
        @inline(__always) get {
            var address = _tryRetainAddress.load(ordering: .relaxed)
            if address == 0 { address = _runtimeFunctionAddress("swift_tryRetain", cache: _tryRetainAddress) }
            // unsafeBitCast: the symbol's address, to the runtime's documented C signature.
            return unsafeBitCast(address, to: _TryRetainFunction.self)
        }
    }

    /// Whether `object` has started deinitialization (its strong count reached zero).
    ///
    /// Used to refuse new relations on an object that is being destroyed and to
    /// drop changes made inside an observed object's own `deinit`.
    @inline(__always)
    func _swift_isDeallocating(_ object: AnyObject) -> Bool {
        // Unmanaged without a retain: the caller holds `object` for the call.
        _isDeallocatingFunction(Unmanaged.passUnretained(object).toOpaque())
    }

    /// Retains `object` (+1, for the caller to release) unless its
    /// deinitialization began.
    @inline(__always)
    func _tryRetain(_ object: AnyObject) -> Bool {
        // Unmanaged without a retain: the caller holds `object` for the call.
        _tryRetainFunction(Unmanaged.passUnretained(object).toOpaque()) != nil
    }

    /// The runtime's `swift_tryRetain`, fetched once by a caller that probes
    /// many objects in a row (a delivery loop), so that each probe is a plain
    /// indirect call rather than one more check that a global is initialized.
    struct _Probe {
        private let tryRetainFunction: @convention(c) (UnsafeMutableRawPointer) -> UnsafeMutableRawPointer?

        @inline(__always)
        static var current: _Probe { _Probe(tryRetainFunction: _tryRetainFunction) }

        /// Retains `object` (+1, for the caller to release) unless its
        /// deinitialization began.
        @inline(__always)
        func tryRetain(_ object: AnyObject) -> Bool {
            // Unmanaged without a retain: the caller holds `object` for the call.
            tryRetainFunction(Unmanaged.passUnretained(object).toOpaque()) != nil
        }

        /// `reference.load()`.
        @inline(__always)
        func load(_ reference: _ListenerHandle) -> AnyObject? {
            guard tryRetainFunction(reference.address) != nil else { return nil }
            // Unmanaged: balances the +1 that swift_tryRetain just took.
            return Unmanaged<AnyObject>.fromOpaque(reference.address).takeRetainedValue()
        }
    }

    /// A relation's reference to its listener: only the address, probed with
    /// the runtime like an ``_UnretainedReference``, so copying it costs
    /// nothing. Valid while an `_UnretainedReference` to the same object keeps
    /// its allocation: the listener's proxy's, which every relation holds.
    struct _ListenerHandle: @unchecked Sendable {
        // @unchecked Sendable: an immutable address, only passed to the runtime's atomic probes.
        let address: UnsafeMutableRawPointer

        init(_ reference: borrowing _UnretainedReference) {
            address = reference.address
        }

        /// A strong reference unless deinitialization began. Call it outside
        /// locks: dropping the result may run the object's deinit.
        @inline(__always)
        func load() -> AnyObject? {
            _Probe.current.load(self)
        }

        /// Whether deinitialization began. Never retains: safe under locks.
        var isGone: Bool { _isDeallocatingFunction(address) }
    }

    /// A reference to a listener that never keeps it alive: an unowned
    /// reference (which keeps the object's allocation, not the object) and its
    /// address, probed with the runtime. A weak reference would do the same but
    /// move the object's reference counts into a side table for the rest of its
    /// life, slowing every retain of it.
    struct _UnretainedReference: @unchecked Sendable {
        // @unchecked Sendable: both fields are immutable; the object is only
        // reached through the runtime's atomic probes.

        /// Keeps the allocation (never read: reading an unowned reference to a
        /// dead object traps). Also: no new object can take this address.
        private unowned let memory: AnyObject
        /// The object's address: its identity, unique while this reference exists.
        let address: UnsafeMutableRawPointer

        init(_ object: AnyObject) {
            memory = object
            // Unmanaged without a retain: only the address is kept; `memory`
            // keeps it allocated.
            address = Unmanaged.passUnretained(object).toOpaque()
        }

        /// A strong reference unless deinitialization began. Call it outside
        /// locks: dropping the result may run the object's deinit.
        @inline(__always)
        func load() -> AnyObject? {
            guard _tryRetainFunction(address) != nil else { return nil }
            // Unmanaged: balances the +1 that swift_tryRetain just took.
            return Unmanaged<AnyObject>.fromOpaque(address).takeRetainedValue()
        }

        /// Whether deinitialization began. Never retains: safe under locks.
        var isGone: Bool { _isDeallocatingFunction(address) }

        /// Whether the object is alive, given that the caller holds a strong
        /// reference to the object with this identity (safe under a lock).
        /// Always: `memory` keeps the address from being reused, so the
        /// caller's object is this one.
        func isAlive(heldByCaller listener: AnyObject) -> Bool { true }
    }

#endif

/// The usable size of the heap block starting at `pointer` (a Swift object's
/// allocation), to validate addresses said to lie inside it.
func _allocationSize(of pointer: UnsafeRawPointer) -> Int {
    #if canImport(Darwin)
        return Int(malloc_size(pointer))
    #else
        return Int(_mallocUsableSizeFunction(UnsafeMutableRawPointer(mutating: pointer)))
    #endif
}

#if !canImport(Darwin)
    /// `size_t malloc_usable_size(void *)` (glibc and musl; not in their Swift
    /// module maps), looked up once. Under AddressSanitizer this finds its
    /// interceptor, which answers for its own allocations.
    private let _mallocUsableSizeFunction: @convention(c) (UnsafeMutableRawPointer) -> Int = {
        guard let symbol = dlsym(nil, "malloc_usable_size") else {
            preconditionFailure("SafeObserve: the C library does not export malloc_usable_size")
        }
        // unsafeBitCast: a C function pointer, to its documented C signature.
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutableRawPointer) -> Int).self)
    }()
#endif

/// The calling thread's identity (for values that wait for a change on the
/// same thread).
func _currentThreadID() -> UInt {
    #if canImport(Darwin)
        return UInt(bitPattern: pthread_self())
    #else
        return UInt(pthread_self())
    #endif
}

/// Writes a line to standard error (diagnostics of release builds).
func _writeToStandardError(_ message: String) {
    var line = message
    line.append("\n")
    line.withUTF8 { bytes in
        _ = write(2, bytes.baseAddress, bytes.count)
    }
}

// MARK: - Parking primitives (the slow path of `_Mutex`)

/// The platform mutex of a ``_ParkingLot`` bucket.
typealias _PlatformMutex = pthread_mutex_t

/// The platform condition variable of a ``_ParkingLot`` bucket.
typealias _PlatformCondition = pthread_cond_t

func _platformMutexInitialize(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_init(mutex, nil)
    precondition(status == 0, "SafeObserve: pthread_mutex_init failed (\(status))")
}

func _platformMutexLock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_lock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_lock failed (\(status))")
}

func _platformMutexUnlock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_unlock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_unlock failed (\(status))")
}

func _platformConditionInitialize(_ condition: UnsafeMutablePointer<_PlatformCondition>) {
    let status = pthread_cond_init(condition, nil)
    precondition(status == 0, "SafeObserve: pthread_cond_init failed (\(status))")
}

/// Waits on `condition`; `mutex` must be held, and is held again on return.
func _platformConditionWait(
    _ condition: UnsafeMutablePointer<_PlatformCondition>, _ mutex: UnsafeMutablePointer<_PlatformMutex>
) {
    let status = pthread_cond_wait(condition, mutex)
    assert(status == 0, "SafeObserve: pthread_cond_wait failed (\(status))")
}

func _platformConditionBroadcast(_ condition: UnsafeMutablePointer<_PlatformCondition>) {
    let status = pthread_cond_broadcast(condition)
    assert(status == 0, "SafeObserve: pthread_cond_broadcast failed (\(status))")
}
