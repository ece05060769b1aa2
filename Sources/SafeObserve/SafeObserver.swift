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
    /// The listener's proxy — an `Unmanaged` +1, as bits — or 0 until the
    /// listener first observes something.
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
        // Unmanaged: takes back the +1 that `makeProxy(for:)` stored.
        Unmanaged<_ListenerProxy>.fromOpaque(address).takeRetainedValue().removeAll(final: true)
    }

    /// The proxy of `listener` — the object this lifetime is stored in —
    /// created on first use with `create`, as a +1 for the caller to take;
    /// `nil` if the lifetime is already another object's (reported when
    /// `create` is set).
    ///
    /// - Complexity: O(1): one atomic load once created.
    @inline(__always)
    // Unmanaged: a +1 on the proxy this lifetime owns, for the caller to take.
    func retainedProxy(for listener: AnyObject, create: Bool) -> Unmanaged<_ListenerProxy>? {
        guard let address = UnsafeRawPointer(bitPattern: proxyBits.load(ordering: .acquiring)) else {
            // Unmanaged: +1 for the caller.
            return create ? makeProxy(for: listener).map(Unmanaged.passRetained) : nil
        }
        // Unmanaged: owned by this lifetime (+1 stored), which the caller's
        // listener keeps alive; borrowed to compare, retained to return.
        let proxy = Unmanaged<_ListenerProxy>.fromOpaque(address)
        // Unmanaged without a retain: only the address is compared.
        let listenerAddress = Unmanaged.passUnretained(listener).toOpaque()
        guard proxy._withUnsafeGuaranteedRef({ $0.listener.address == listenerAddress }) else {
            if create { Self.reportShared(by: listener) }
            return nil
        }
        return proxy.retain()
    }

    @inline(never)
    private func makeProxy(for listener: AnyObject) -> _ListenerProxy? {
        // Unmanaged: the +1 this lifetime keeps, given back by `deinit`.
        let candidate = Unmanaged.passRetained(_ListenerProxy(listener: listener))
        let bits = UInt(bitPattern: candidate.toOpaque())
        if proxyBits.compareExchange(expected: 0, desired: bits, ordering: .acquiringAndReleasing).exchanged {
            return candidate.takeUnretainedValue()
        }
        // Another thread's registration created it first.
        candidate.release()
        // Unmanaged: takes the +1 `retainedProxy` returns.
        return retainedProxy(for: listener, create: true)?.takeRetainedValue()
    }

    @inline(never)
    private static func reportShared(by listener: AnyObject) {
        _Diagnostics.reportProgrammerError(
            "SafeObserve: a \(type(of: listener)) returns an ObserverLifetime that another object already "
                + "uses; each SafeObserver needs its own, declared as a stored `let`")
    }
}
