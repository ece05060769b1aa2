// Every call into the C library or the Swift runtime lives in this file, so
// that porting SafeObserve to another platform means reading one page.

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

/// A Swift runtime entry point taking one object, looked up once with
/// `dlsym` (the compiler reserves `@_silgen_name` for its own use of runtime
/// symbols). Both functions used here are part of the runtime's stable ABI on
/// every platform.
private func _runtimeFunction<Result>(_ name: String, as type: Result.Type) -> Result {
    #if canImport(Darwin)
        let handle = UnsafeMutableRawPointer(bitPattern: -2)  // RTLD_DEFAULT
    #else
        let handle: UnsafeMutableRawPointer? = nil  // RTLD_DEFAULT
    #endif
    guard let symbol = dlsym(handle, name) else {
        preconditionFailure("SafeObserve: the Swift runtime does not export \(name)")
    }
    // unsafeBitCast: a C function pointer, to the runtime's documented C signature.
    return unsafeBitCast(symbol, to: type)
}

/// `bool swift_isDeallocating(HeapObject *)`.
private let _isDeallocatingFunction = _runtimeFunction(
    "swift_isDeallocating", as: (@convention(c) (UnsafeMutableRawPointer) -> Bool).self)

/// `HeapObject *swift_tryRetain(HeapObject *)`: the object, +1, unless its
/// deinitialization began (then `NULL`).
private let _tryRetainFunction = _runtimeFunction(
    "swift_tryRetain", as: (@convention(c) (UnsafeMutableRawPointer) -> UnsafeMutableRawPointer?).self)

/// Whether `object` has started deinitialization (its strong count reached zero).
///
/// Used to refuse new relations on an object that is being destroyed and to
/// drop changes made inside an observed object's own `deinit`.
@inline(__always)
func _swift_isDeallocating(_ object: AnyObject) -> Bool {
    // Unmanaged without a retain: the caller holds `object` for the call.
    _isDeallocatingFunction(Unmanaged.passUnretained(object).toOpaque())
}

/// Whether the object at `address` started deinitialization, without ever
/// retaining it — safe under a lock, where releasing a last reference could
/// run a user `deinit`.
///
/// `address` must stay allocated: its holder keeps an unowned reference.
@inline(__always)
func _isDeallocating(address: UnsafeMutableRawPointer) -> Bool {
    _isDeallocatingFunction(address)
}

/// A strong reference to the object at `address` unless it started
/// deinitialization — a weak load, without the side table a `weak`
/// reference forces on the object.
///
/// `address` must stay allocated: its holder keeps an unowned reference.
@inline(__always)
func _tryRetain(_ address: UnsafeMutableRawPointer) -> AnyObject? {
    guard _tryRetainFunction(address) != nil else { return nil }
    // Unmanaged: balances the +1 that swift_tryRetain just took.
    return Unmanaged<AnyObject>.fromOpaque(address).takeRetainedValue()
}

/// Writes a line to standard error (diagnostics of release builds).
func _writeToStandardError(_ message: String) {
    var line = message
    line.append("\n")
    line.withUTF8 { bytes in
        _ = write(2, bytes.baseAddress, bytes.count)
    }
}

// MARK: - Mutex primitive

/// The platform mutex that ``_Mutex`` wraps.
@usableFromInline
typealias _PlatformMutex = pthread_mutex_t

func _platformMutexInitialize(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_init(mutex, nil)
    precondition(status == 0, "SafeObserve: pthread_mutex_init failed (\(status))")
}

func _platformMutexDestroy(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    _ = pthread_mutex_destroy(mutex)
}

@usableFromInline
func _platformMutexLock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_lock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_lock failed (\(status))")
}

@usableFromInline
func _platformMutexUnlock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_unlock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_unlock failed (\(status))")
}
