import Synchronization

/// A listener whose relations are torn down inside its own `deinit`.
///
/// Any class can listen. A listener that adopts this protocol — one stored
/// property — has every relation it holds removed, and every handler
/// released, the moment it is destroyed. Other listeners are cleaned up
/// lazily (see ``SafeObservable/safeObserve(_:by:options:isolation:changeHandler:)``).
///
/// ```swift
/// final class CounterLabel: SafeObserver {
///     let observerLifetime = ObserverLifetime()
///     var text = ""
/// }
/// ```
public protocol SafeObserver: AnyObject {
    /// The listener's side of its relations; declare it as a stored `let`.
    ///
    /// ```swift
    /// let observerLifetime = ObserverLifetime()
    /// ```
    var observerLifetime: ObserverLifetime { get }
}

/// The storage a ``SafeObserver`` carries; its `deinit` ends every relation
/// of the listener.
///
/// Keep it as a stored `let` of the listener and nowhere else: its lifetime
/// is what tells SafeObserve that the listener is gone.
///
/// ```swift
/// final class CounterLabel: SafeObserver {
///     let observerLifetime = ObserverLifetime()
/// }
/// ```
public final class ObserverLifetime: Sendable {
    /// The listener's proxy as the bits of an `Unmanaged` +1 that this
    /// lifetime owns (given back by `deinit`), or 0 until the listener first
    /// observes something. Set once, by compare-and-exchange; never replaced.
    private let proxyBits = Atomic<UInt>(0)

    /// Creates the (empty) storage; nothing else is allocated until the
    /// listener first observes something.
    ///
    /// ```swift
    /// let observerLifetime = ObserverLifetime()
    /// ```
    public init() {}

    deinit {
        let bits = proxyBits.load(ordering: .acquiring)
        guard let address = UnsafeRawPointer(bitPattern: bits) else { return }
        Unmanaged<_ListenerProxy>.fromOpaque(address).takeRetainedValue().removeAll(final: true)
    }

    /// The proxy of `listener` — the object this lifetime is stored in —
    /// created on first use with `create`; `nil` if the lifetime is already
    /// another object's (reported when `create` is set).
    ///
    /// - Complexity: O(1): one atomic load once created.
    @inline(__always)
    func proxy(for listener: AnyObject, create: Bool) -> _ListenerProxy? {
        guard let address = UnsafeRawPointer(bitPattern: proxyBits.load(ordering: .acquiring)) else {
            return create ? makeProxy(for: listener) : nil
        }
        let proxy = Unmanaged<_ListenerProxy>.fromOpaque(address).takeUnretainedValue()
        guard proxy.listener.address == Unmanaged.passUnretained(listener).toOpaque() else {
            if create { Self.reportShared(by: listener) }
            return nil
        }
        return proxy
    }

    @inline(never)
    private func makeProxy(for listener: AnyObject) -> _ListenerProxy? {
        let candidate = Unmanaged.passRetained(_ListenerProxy(listener: listener))
        let bits = UInt(bitPattern: candidate.toOpaque())
        if proxyBits.compareExchange(expected: 0, desired: bits, ordering: .acquiringAndReleasing).exchanged {
            return candidate.takeUnretainedValue()
        }
        // Another thread's registration created it first.
        candidate.release()
        return proxy(for: listener, create: true)
    }

    @inline(never)
    private static func reportShared(by listener: AnyObject) {
        _Diagnostics.reportProgrammerError(
            "SafeObserve: a \(type(of: listener)) returns an ObserverLifetime that another object already "
                + "uses; each SafeObserver needs its own, declared as a stored `let`")
    }
}
