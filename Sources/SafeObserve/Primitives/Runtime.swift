// Every call into the Swift runtime lives in this file: the liveness probes
// and the executor checks, through the entry points the CSafeObserveRuntime
// target declares (and links directly, so static-stdlib builds and static
// executables work). Calls into the C library are in Platform.swift.

internal import CSafeObserveRuntime

// MARK: - Liveness probes
//
// Two implementations of the same three things: `_swift_isDeallocating`,
// `_Probe` (the delivery loop's listener loads) and `_UnretainedReference`
// (a reference that never keeps its object alive).
//
// - The native one (Linux, by default) asks the Swift runtime directly,
//   through entry points declared in the CSafeObserveRuntime target and
//   linked statically, so static-stdlib builds and static executables work;
//   that header says what is relied on.
// - The portable one uses weak references. Apple platforms use it, because an
//   NSObject subclass is reference-counted by the Objective-C runtime, where
//   the native probes do not apply; on Linux `-Xswiftc
//   -DSAFEOBSERVE_PORTABLE_PROBES` selects it, and CI runs the whole suite
//   with it so that it never goes uncompiled.
//
// Why the portable path asks Objective-C objects with `objc_initWeakOrNil`:
// the Objective-C runtime traps ("Cannot form weak reference to instance ...
// in the process of deallocation") when an ordinary weak reference is formed
// to an object inside `dealloc`, and that is exactly the moment the probes
// exist for (observing from a deinit, a setter inside the deinit of an
// NSObject-derived `SafeObservable`, a lazily created controller touched in
// `dealloc`). The `OrNil` variant stores nil instead. Native Swift objects are
// asked with the native probes there; on Linux every object is native, and a
// weak reference formed to a deinitializing native object is simply nil.

#if SAFEOBSERVE_PORTABLE_PROBES || canImport(ObjectiveC)

    #if canImport(ObjectiveC)
        /// Whether `object` is reference-counted by the Objective-C runtime.
        @inline(__always)
        private func _isObjectiveCObject(_ object: AnyObject) -> Bool {
            // unsafeBitCast: a class object is a pointer to its metadata.
            !swift_objc_class_usesNativeSwiftReferenceCounting(
                unsafeBitCast(type(of: object) as AnyClass, to: UnsafeRawPointer.self))
        }

        /// `object`, +1, unless it is deallocating (then `nil`); never traps.
        private func _objectiveCTryRetain(_ object: AnyObject) -> UnsafeMutableRawPointer? {
            var slot: UnsafeMutableRawPointer?
            // Unmanaged without a retain: the caller holds `object` for the call.
            guard objc_initWeakOrNil(&slot, Unmanaged.passUnretained(object).toOpaque()) != nil else { return nil }
            defer { objc_destroyWeak(&slot) }
            return objc_loadWeakRetained(&slot)
        }
    #endif

    /// Whether `object` has started deinitialization (its strong count reached zero).
    func _swift_isDeallocating(_ object: AnyObject) -> Bool {
        #if canImport(ObjectiveC)
            if _isObjectiveCObject(object) {
                guard let retained = _objectiveCTryRetain(object) else { return true }
                objc_release(retained)
                return false
            }
            // Unmanaged without a retain: the caller holds `object` for the call.
            return swift_isDeallocating(Unmanaged.passUnretained(object).toOpaque())
        #else
            // Assigned after its declaration: `weak let` needs Swift 6.2, and
            // an initialized `weak var` that is never mutated warns in 6.2+.
            weak var probe: AnyObject?
            probe = object
            return probe == nil
        #endif
    }

    /// The liveness probes, as the delivery loop uses them.
    struct _Probe {
        static var current: _Probe { _Probe() }

        func load(_ reference: _UnretainedReference) -> AnyObject? { reference.load() }
    }

    /// A relation's reference to its listener (see the native variant): here,
    /// a copy of the proxy's weak reference.
    typealias _UnretainedHandle = _UnretainedReference

    extension _UnretainedReference {
        init(_ reference: _UnretainedReference) { self = reference }
    }

    /// A reference to an object that never keeps it alive.
    @usableFromInline
    // @unchecked Sendable: a weak reference is safe to load from any thread,
    // and `address` is immutable.
    struct _UnretainedReference: @unchecked Sendable {
        private weak var object: AnyObject?
        /// The object's address, for identity only: unique only while the
        /// object is alive (a weak reference does not keep the allocation).
        @usableFromInline let address: UnsafeMutableRawPointer

        /// Formed while the caller holds `object`, which is not deallocating
        /// (registration refuses objects in their deinit before this point).
        init(_ object: AnyObject) {
            self.object = object
            // Unmanaged without a retain: only the address is kept.
            address = Unmanaged.passUnretained(object).toOpaque()
        }

        /// A strong reference unless deinitialization began. Call it outside
        /// locks: dropping the result may run the object's deinit.
        @usableFromInline
        func load() -> AnyObject? { object }

        /// Whether deinitialization began. Loads weakly: call it outside locks.
        var isGone: Bool { object == nil }

        /// Whether this is a reference to `object`, which the caller holds
        /// and which has this reference's address (safe under a lock).
        ///
        /// A weak reference does not keep the allocation, so a dead object's
        /// address may have been reused by `object`: then the reference reads
        /// nil. It also reads nil while `object` itself is in its deinit; that
        /// case counts as a match (a caller in a deinit only ends relations,
        /// which is right for either object).
        func refers(to object: AnyObject) -> Bool {
            self.object === object || (self.object == nil && _swift_isDeallocating(object))
        }
    }

#else

    /// Whether `object` has started deinitialization (its strong count reached zero).
    ///
    /// Used to refuse new relations on an object that is being destroyed and to
    /// drop changes made inside an observed object's own `deinit`.
    @inline(__always)
    func _swift_isDeallocating(_ object: AnyObject) -> Bool {
        // Unmanaged without a retain: the caller holds `object` for the call.
        swift_isDeallocating(Unmanaged.passUnretained(object).toOpaque())
    }

    /// The liveness probes, as the delivery loop uses them: direct calls
    /// into the runtime.
    struct _Probe {
        @inline(__always)
        static var current: _Probe { _Probe() }

        /// `reference.load()`.
        @inline(__always)
        func load(_ reference: _UnretainedHandle) -> AnyObject? { reference.load() }
    }

    /// An object's address, probed with the runtime like an
    /// ``_UnretainedReference``, so copying it costs nothing (copying an
    /// unowned reference counts its allocation once more, and back). Valid
    /// while an `_UnretainedReference` to the same object keeps its
    /// allocation: a relation's listener is kept by the listener's proxy's,
    /// which every relation holds; a ``KeyValueObservation``'s relation by
    /// the observation's own.
    struct _UnretainedHandle: @unchecked Sendable {
        // @unchecked Sendable: an immutable address, only passed to the runtime's atomic probes.
        @usableFromInline let address: UnsafeMutableRawPointer

        init(_ reference: borrowing _UnretainedReference) {
            address = reference.address
        }

        /// A strong reference unless deinitialization began. Call it outside
        /// locks: dropping the result may run the object's deinit.
        @inline(__always)
        func load() -> AnyObject? {
            guard swift_tryRetain(address) != nil else { return nil }
            // Unmanaged: balances the +1 that swift_tryRetain just took.
            return Unmanaged<AnyObject>.fromOpaque(address).takeRetainedValue()
        }

        /// Whether deinitialization began. Never retains: safe under locks.
        var isGone: Bool { swift_isDeallocating(address) }
    }

    /// A reference to an object that never keeps it alive: an unowned
    /// reference (which keeps the object's allocation, not the object) and its
    /// address, probed with the runtime. A weak reference would do the same but
    /// move the object's reference counts into a side table for the rest of its
    /// life, slowing every retain of it.
    @usableFromInline
    // @unchecked Sendable: both fields are immutable; the object is only
    // reached through the runtime's atomic probes.
    struct _UnretainedReference: @unchecked Sendable {

        /// Keeps the allocation (never read: reading an unowned reference to a
        /// dead object traps). Also: no new object can take this address.
        private unowned let memory: AnyObject
        /// The object's address: its identity, unique while this reference exists.
        @usableFromInline let address: UnsafeMutableRawPointer

        init(_ object: AnyObject) {
            memory = object
            // Unmanaged without a retain: only the address is kept; `memory`
            // keeps it allocated.
            address = Unmanaged.passUnretained(object).toOpaque()
        }

        /// A strong reference unless deinitialization began. Call it outside
        /// locks: dropping the result may run the object's deinit.
        @inline(__always) @usableFromInline
        func load() -> AnyObject? { _UnretainedHandle(self).load() }

        /// Whether deinitialization began. Never retains: safe under locks.
        var isGone: Bool { swift_isDeallocating(address) }

        /// Whether this is a reference to `object`, which the caller holds
        /// and which has this reference's address (safe under a lock).
        /// Always: `memory` keeps the address from being reused, so the
        /// caller's object is this one.
        func refers(to object: AnyObject) -> Bool { true }
    }

#endif

/// Reflection shows the address alone. Reflecting the fields would *load*
/// the unowned reference, which traps once the object's deinit ran:
/// `dump(token)` of an ended observation, or a failed `#expect` describing
/// one, stopped the program. Every type that holds an unretained reference
/// (tokens, observations, hops) is safe to reflect through this.
extension _UnretainedReference: CustomReflectable {
    @usableFromInline
    var customMirror: Mirror {
        Mirror(self, children: ["address": address], displayStyle: .struct)
    }
}

/// Whether the calling thread is running on `executor` (an actor's), as
/// `Actor.assumeIsolated` asks the Concurrency runtime, but answering `false`
/// instead of trapping.
///
/// `isMainActor` says `executor` is the main actor's. The main thread is
/// answered `true` first, without asking the runtime (about 160
/// instructions): code on the main thread is never concurrent with a
/// main-actor job, whatever task it runs in (the main actor's jobs run on
/// the main thread, or, once `dispatchMain()` parked it, on a thread
/// standing in for it, which the runtime recognises below). The runtime
/// concludes the same outside tasks; inside a task on the main thread it
/// compares executors, and so may answer `false` for the task of a custom
/// executor that drains on the main thread.
///
/// Off the main thread, a nonisolated task's job (on no serial executor) is
/// answered `false` for the main actor without asking the runtime either
/// (about 240 instructions: the runtime asks the main executor whether it
/// isolates the thread): main-actor code runs as a main-actor job, or
/// outside any task (a block on the main queue, about which the runtime is
/// asked).
@usableFromInline
func _isCurrentExecutor(_ executor: UnownedSerialExecutor, isMainActor: Bool) -> Bool {
    if isMainActor {
        if csafeobserve_isMainThread() { return true }
        if csafeobserve_isOnGenericExecutorInTask() { return false }
    }
    return _runtimeIsCurrentExecutor(executor)
}

/// Whether this thread runs on `actor` (``_isCurrentExecutor(_:isMainActor:)``
/// for its executor).
func _isCurrentActor(_ actor: any Actor) -> Bool {
    _isCurrentExecutor(actor.unownedExecutor, isMainActor: (actor as AnyObject) === MainActor.shared)
}

/// The runtime's own answer, which ``_isCurrentExecutor(_:isMainActor:)``
/// skips where it can (the tests compare the two).
@inline(__always)
func _runtimeIsCurrentExecutor(_ executor: UnownedSerialExecutor) -> Bool {
    // unsafeBitCast: an `UnownedSerialExecutor` is the runtime's two-word
    // `SerialExecutorRef` (identity, implementation), in that order.
    let words = unsafeBitCast(executor, to: (UnsafeMutableRawPointer?, UInt).self)
    return csafeobserve_isCurrentExecutor(words.0, words.1)
}

/// The answer of ``_isCurrentExecutor(_:isMainActor:)`` on runtimes older
/// than Swift 6.2 (exposed for the tests, which run on a newer one).
func _isCurrentExecutorByIdentity(_ executor: UnownedSerialExecutor) -> Bool {
    // unsafeBitCast: as above.
    csafeobserve_isCurrentExecutorByIdentity(unsafeBitCast(executor, to: (UnsafeMutableRawPointer?, UInt).self).0)
}
