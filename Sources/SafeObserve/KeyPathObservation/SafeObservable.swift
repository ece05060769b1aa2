import Observation

/// A class whose `@Observed` properties can be observed safely.
///
/// Adopt it and mark properties with ``Observed``:
///
/// ```swift
/// final class Counter: SafeObservable {
///     @Observed var count = 0
/// }
///
/// let token = counter.safeObserve(\.count, by: label, options: [.initial, .new]) { label, counter, change in
///     label.text = "\(change.newValue!)"
/// }
/// ```
///
/// The relation ends by itself when either the listener or the object dies,
/// so there is nothing to remove in `deinit`; removing too often is a no-op.
///
/// The protocol has no requirements for you to implement: the bookkeeping
/// lives in the `@Observed` storage and dies with the object.
///
/// A class that also conforms to `Observable` is seen by Observation too:
/// `withObservationTracking`, `Observations` and SwiftUI track its
/// `@Observed` properties as they track an `@Observable` class's.
///
/// ```swift
/// final class Counter: SafeObservable, Observable {
///     @Observed var count = 0
/// }
/// ```
public protocol SafeObservable: AnyObject {
    /// Whether the class's `@Observed` properties report to Observation
    /// (the class also conforms to `Observable`). SafeObserve implements
    /// it; don't implement it.
    static var _reportsToObservation: Bool { get }

    /// Reports `event` of the `@Observed` property at `keyPath` (a
    /// `KeyPath<Self, Member>`, type-erased: a requirement of a protocol
    /// that non-final classes adopt cannot spell `Self` there) to
    /// `registrar`. SafeObserve implements it; don't implement or call it.
    func _report<Member>(
        _ event: _ObservationEvent, of keyPath: AnyKeyPath, as member: Member.Type,
        to registrar: ObservationRegistrar)
}

extension SafeObservable {
    /// Observes `keyPath` on this object on behalf of `listener`.
    ///
    /// The handler receives the listener and the object as parameters, so it
    /// never needs to capture either (capturing them strongly would keep them
    /// alive for as long as the relation). It never runs while SafeObserve
    /// holds a lock: it may observe, unobserve, mutate or release anything.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: label, options: [.initial, .old, .new]) { label, counter, change in
    ///     label.text = "\(change.oldValue ?? 0) → \(change.newValue!)"
    /// }
    /// ```
    ///
    /// Where the handler runs is the caller's isolation (`isolation`, which
    /// defaults to it):
    /// - Registered from an actor (a `@MainActor` view model, an actor's
    ///   method), the handler is isolated to that actor and may use its state
    ///   directly. A change made on the actor is delivered synchronously,
    ///   after the new value is stored; a change made elsewhere is delivered
    ///   on the actor, in the order the changes were made, and is dropped if
    ///   by then the relation ended or either side died (see ``ObservationOptions/coalesced``
    ///   to merge waiting changes, and "Observing from actors and async code").
    /// - Registered from nonisolated code, the handler runs synchronously on
    ///   the thread that changed the property, after the new value is stored.
    ///
    /// ```swift
    /// @MainActor final class BadgeModel {
    ///     var text = ""
    ///     func show(_ inbox: Inbox) {   // `inbox` may be changed on any thread
    ///         inbox.safeObserve(\.unread, by: self, options: [.initial, .new]) { model, _, change in
    ///             model.text = "\(change.newValue!)"   // on the main actor
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// Guarantees:
    /// - The handler is never called after `listener` died, after the relation
    ///   was removed (even from inside another handler of the same change), or
    ///   for changes made inside this object's own `deinit`.
    /// - Observing the same (listener, object, key path) again is a no-op that
    ///   keeps the first handler and returns the first token. Key paths of
    ///   one stored property formed on different root types (`\Base.count`,
    ///   `\Sub.count`) are the same key path here.
    /// - Changes of a property reach the handler in the order they were
    ///   stored, and the last new value it is told is the current one: if
    ///   another handler changes the property while a change is delivered,
    ///   this handler may be told only the newer change (see "Getting
    ///   started").
    /// - When either side dies, the relation and its handler are released:
    ///   at once for an object or a ``SafeObserver`` listener; for any other
    ///   listener, by the next change that reaches it, the object's death, or
    ///   the amortized sweep that each registration performs.
    ///
    /// - Parameters:
    ///   - keyPath: An `@Observed` property of this object (`\.count`).
    ///     Any other key path is a programmer error: debug builds stop with a
    ///     message naming the type and the key path; release builds return an
    ///     inert token.
    ///   - listener: The object on whose behalf the handler runs. Never
    ///     retained: the relation only keeps its memory allocated until cleanup.
    ///   - options: What the handler receives; `[.new]` by default.
    ///   - isolation: The actor the handler is isolated to, or `nil` for
    ///     synchronous delivery on any thread; the caller's by default.
    ///   - changeHandler: Called with the listener, this object and the change.
    /// - Returns: The relation's token. Keeping it is optional.
    /// - Complexity: Amortized O(*k*), *k* being the key paths `listener`
    ///   observes on this object.
    @discardableResult
    @inlinable
    public func safeObserve<Listener: AnyObject, Value>(
        _ keyPath: KeyPath<Self, Value>,
        by listener: Listener,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        changeHandler: @escaping (Listener, Self, ObservedChange<Value>) -> Void
    ) -> ObservationToken {
        _safeObserve(
            keyPath, by: listener, options: options, isolation: isolation, isDistinct: false,
            changeHandler: changeHandler)
    }

    /// ``safeObserve(_:by:options:isolation:changeHandler:)``, optionally
    /// never deduplicated when `isDistinct` (see
    /// `_SafeObserveRegistration.register`).
    @inlinable
    func _safeObserve<Listener: AnyObject, Value>(
        _ keyPath: KeyPath<Self, Value>,
        by listener: Listener,
        options: ObservationOptions,
        isolation: isolated (any Actor)?,
        isDistinct: Bool,
        changeHandler: @escaping (Listener, Self, ObservedChange<Value>) -> Void
    ) -> ObservationToken {
        // The handler thunk is built here, in the caller's module, so delivery
        // runs specialized code; registration itself is not generic.
        let hop: _Hop<Listener, Self, Value>?
        let deliver: _Deliver
        if let isolation {
            let actorHop = _Hop(actor: isolation, root: self, options: options, handler: changeHandler)
            hop = actorHop
            deliver = _makeDeliver(hopping: actorHop)
        } else {
            hop = nil
            deliver = _makeDeliver(options, unisolated: changeHandler)
        }
        let (token, deliversInitial) = _register(
            keyPath, by: listener, listenerType: Listener.self, options: options, deliver: deliver,
            isDistinct: isDistinct)
        hop?.attach(token)
        if deliversInitial, let hop {
            // On the actor (`isolation` is the caller's): changes made
            // elsewhere since the relation began are queued; the value read
            // supersedes them.
            hop.deliverInitial(to: listener, self, token: token) { self[keyPath: keyPath] }
        } else if deliversInitial {
            let current = self[keyPath: keyPath]
            // Reading ran user code (a computed property), which may have unobserved.
            if token.isActive {
                changeHandler(listener, self, ObservedChange(newValue: current, oldValue: nil, isInitial: true))
            }
        }
        return token
    }

    /// Observes `keyPath` on this object on behalf of an actor, whose
    /// handler runs isolated to that actor.
    ///
    /// The handler receives the actor as an `isolated` parameter, so it
    /// reaches the actor's state synchronously without capturing it (a
    /// capture would keep the actor alive for as long as the relation):
    ///
    /// ```swift
    /// actor Cache {
    ///     var count = 0
    ///     func watch(_ counter: Counter) {
    ///         counter.safeObserve(\.count, by: self) { cache, _, change in
    ///             cache.count = change.newValue!
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// A change made on the actor is delivered synchronously, after the store;
    /// a change made elsewhere is delivered on the actor, in order, as for a
    /// handler registered from an actor (see
    /// ``safeObserve(_:by:options:isolation:changeHandler:)``). `.initial`
    /// runs during registration when it is made on the actor, and is the
    /// first delivery on the actor otherwise. Every other guarantee of
    /// `safeObserve` holds.
    ///
    /// - Parameters:
    ///   - keyPath: An `@Observed` property of this object, or a key path
    ///     through them.
    ///   - listener: The actor on whose behalf, and on which, the handler runs.
    ///     Never retained.
    ///   - options: What the handler receives; `[.new]` by default.
    ///   - changeHandler: Called on `listener`, with it, this object and the change.
    /// - Returns: The relation's token. Keeping it is optional.
    /// - Complexity: Amortized O(*k*), *k* being the key paths `listener`
    ///   observes on this object.
    @discardableResult
    @inlinable
    public func safeObserve<Listener: Actor, Value>(
        _ keyPath: KeyPath<Self, Value>,
        by listener: Listener,
        options: ObservationOptions = .new,
        changeHandler: @escaping @Sendable (isolated Listener, Self, ObservedChange<Value>) -> Void
    ) -> ObservationToken {
        let handler = _droppingIsolation(changeHandler)
        let hop = _Hop(actor: listener, root: self, options: options, handler: handler)
        let (token, deliversInitial) = _register(
            keyPath, by: listener, listenerType: Listener.self, options: options,
            deliver: _makeDeliver(hopping: hop))
        let initialOnActor = deliversInitial && hop.isOnActor
        if deliversInitial, !initialOnActor {
            // Queued in front of the changes made since the registration,
            // which the hop files only once attached.
            hop.queueInitial(token: token) { self[keyPath: keyPath] }
        }
        hop.attach(token)
        if initialOnActor {
            hop.deliverInitial(to: listener, self, token: token) { self[keyPath: keyPath] }
        }
        return token
    }

    /// Registers `deliver` for `listener` on `keyPath`; the caller delivers
    /// `.initial` when told to.
    @inlinable
    func _register<Value>(
        _ keyPath: KeyPath<Self, Value>, by listener: AnyObject, listenerType: Any.Type, options: ObservationOptions,
        deliver: @escaping _Deliver, isDistinct: Bool = false
    ) -> (token: ObservationToken, deliversInitial: Bool) {
        _SafeObserveRegistration.register(
            self, keyPath: keyPath, listener: listener, options: options, deliver: deliver,
            types: (Self.self, Value.self, listenerType), isDistinct: isDistinct,
            typed: { _performTypedStep($0, keyPath) })
    }

    /// ``_register(_:by:listenerType:options:deliver:isDistinct:)`` returning
    /// the relation itself (`nil` if the registration was refused).
    ///
    /// A sibling rather than what `_register` wraps: building the token here,
    /// in the caller's module, destroyed it through generic value witnesses
    /// (add + remove measured 1,977 instead of 1,847); the library builds it.
    @inlinable
    func _registerRelation<Value>(
        _ keyPath: KeyPath<Self, Value>, by listener: AnyObject, listenerType: Any.Type, options: ObservationOptions,
        deliver: @escaping _Deliver, isDistinct: Bool = false
    ) -> _Registered {
        _SafeObserveRegistration.registerRelation(
            self, keyPath: keyPath, listener: listener, options: options, deliver: deliver,
            types: (Self.self, Value.self, listenerType), isDistinct: isDistinct,
            typed: { _performTypedStep($0, keyPath) })
    }

    /// Does what registration asks of the concrete types (see
    /// ``_SafeObserveRegistration/_TypedStep``).
    @inlinable
    func _performTypedStep<Value>(_ step: _SafeObserveRegistration._TypedStep, _ keyPath: KeyPath<Self, Value>)
        -> AnyObject?
    {
        switch step {
        case .read:
            _ = self[keyPath: keyPath]
            return nil
        case .makeDerivation:
            return _TypedDerivation(
                keyPath: keyPath,
                makeChange: { newAddress, new, old, body in
                    // Values evaluated from `keyPath`, or read from the storage
                    // of a chain's last link: `Value`s either way.
                    withUnsafePointer(
                        to: ObservedChange(
                            newValue: newAddress.map { $0.load(as: Value.self) } ?? new.map { $0 as! Value },
                            oldValue: old.map { $0 as! Value })
                    ) { body($0) }
                },
                evaluateInto: { anyKeyPath, root, track, body in
                    // unsafeDowncast: the derivation's own key path and root.
                    let keyPath = unsafeDowncast(anyKeyPath, to: KeyPath<Self, Value>.self)
                    let root = unsafeDowncast(root, to: Self.self)
                    var new: Value?
                    track { new = root[keyPath: keyPath] }
                    // Unwrapped: `track` runs its closure once.
                    withUnsafePointer(to: new.unsafelyUnwrapped) { body(UnsafeRawPointer($0)) }
                })
        case .checkSettable:
            return keyPath is ReferenceWritableKeyPath<Self, Value> ? keyPath : nil
        }
    }

    /// Stops `listener` observing `keyPath` on this object.
    ///
    /// Idempotent: removing a relation that does not exist, twice, or after
    /// either side died, does nothing. Safe inside any handler and inside the
    /// listener's own `deinit`.
    ///
    /// ```swift
    /// deinit {
    ///     counter.safeUnobserve(\.count, by: self)   // migrated KVO code: harmless
    /// }
    /// ```
    ///
    /// - Complexity: O(*k*), *k* being the key paths `listener` observes on
    ///   this object.
    public func safeUnobserve<Value>(_ keyPath: KeyPath<Self, Value>, by listener: AnyObject) {
        _ListenerProxy.of(listener, create: false)?.endRelations(on: ObjectIdentifier(self), keyPath: keyPath) {
            // Only when no relation's key path matched, but one is on another
            // single property: `keyPath` may spell that property differently.
            _SafeObserveRegistration.channel(
                of: keyPath, on: self, read: { _ = self[keyPath: keyPath] },
                isSettable: { keyPath is ReferenceWritableKeyPath<Self, Value> })
        }
    }

    /// Stops `listener` observing every key path of this object.
    ///
    /// Idempotent, and safe inside handlers and inside the listener's `deinit`.
    ///
    /// ```swift
    /// counter.safeUnobserve(by: label)
    /// ```
    ///
    /// - Complexity: O(*k*), *k* being the key paths `listener` observes on
    ///   this object.
    public func safeUnobserve(by listener: AnyObject) {
        _ListenerProxy.of(listener, create: false)?.endRelations(on: ObjectIdentifier(self), keyPath: nil)
    }
}
