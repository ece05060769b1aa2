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

/// The runtime's `swift_isDeallocating`, looked up once.
///
/// `bool swift_isDeallocating(HeapObject *)` is exported by the Swift runtime
/// on every platform (Objective-C's `_isDeallocating` is built on it). It is
/// resolved with `dlsym` rather than `@_silgen_name`, which the compiler
/// reserves for its own use of runtime symbols.
private let _isDeallocatingFunction: (@convention(c) (UnsafeMutableRawPointer) -> Bool)? = {
    #if canImport(Darwin)
        let handle = UnsafeMutableRawPointer(bitPattern: -2)  // RTLD_DEFAULT
    #else
        let handle: UnsafeMutableRawPointer? = nil  // RTLD_DEFAULT
    #endif
    guard let symbol = dlsym(handle, "swift_isDeallocating") else { return nil }
    // unsafeBitCast: a C function pointer, to the runtime's documented C signature.
    return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutableRawPointer) -> Bool).self)
}()

/// Whether `object` has started deinitialization (its strong count reached zero).
///
/// Used to refuse new relations on an object that is being destroyed and to
/// drop changes made inside an observed object's own `deinit`. Answers `false`
/// where the runtime does not export the function.
func _swift_isDeallocating(_ object: AnyObject) -> Bool {
    guard let function = _isDeallocatingFunction else { return false }
    return withExtendedLifetime(object) {
        // Unmanaged without a retain: `object` is kept alive by withExtendedLifetime.
        function(Unmanaged.passUnretained(object).toOpaque())
    }
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
typealias _PlatformMutex = pthread_mutex_t

func _platformMutexInitialize(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_init(mutex, nil)
    precondition(status == 0, "SafeObserve: pthread_mutex_init failed (\(status))")
}

func _platformMutexDestroy(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    _ = pthread_mutex_destroy(mutex)
}

@inline(__always)
func _platformMutexLock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_lock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_lock failed (\(status))")
}

@inline(__always)
func _platformMutexUnlock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_unlock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_unlock failed (\(status))")
}
