import Observation

extension Observable where Self: AnyObject {
    /// Observes `keyPath` on this `@Observable` model on behalf of
    /// `listener`, with SafeObserve's lifetimes: no change to the model.
    ///
    /// ```swift
    /// @Observable final class Store { var count = 0 }
    ///
    /// @MainActor final class ViewModel {
    ///     var text = ""
    ///     func show(_ store: Store) {
    ///         store.safeObserve(\.count, by: self, options: [.initial, .old, .new]) { model, _, change in
    ///             model.text = "\(change.oldValue ?? 0) → \(change.newValue!)"
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// Whatever `keyPath` reads is tracked: a stored property, a chain
    /// through `@Observable` links (`\.account.balance`, which follows a
    /// replaced link), an optional chain (`\.child?.name`) or a computed
    /// property (`\.fullName`).
    ///
    /// Unlike a ``SafeObservable`` model's, a change is delivered after the
    /// mutating call (the setter) returned, never inside it: asynchronously,
    /// on the actor the handler was registered from (`isolation`), where the
    /// key path is read too. So the model need not be `Sendable`: observing
    /// it from its actor keeps it there. Nonisolated code has no actor to
    /// deliver on: it passes `isolation: nil`, for a `Sendable` model,
    /// listener and handler, which then run on a global executor (the
    /// other `safeObserve(_:by:options:isolation:changeHandler:)`); a
    /// non-`Sendable` model is rejected at compile time there. Changes made
    /// while a delivery waits are one delivery: `oldValue` is the value the
    /// handler was told last (or that was read when it registered),
    /// `newValue` the value when the delivery runs. So each delivery's
    /// `oldValue` is the previous one's `newValue`, and once the model is
    /// left alone the last `newValue` is its value.
    ///
    /// The relation ends when the listener dies (the handler is never
    /// called again, and is released with its captures), when the model
    /// dies (see "Observing @Observable models" for when), on
    /// ``ObservationToken/invalidate()`` and on
    /// ``safeUnobserve(_:by:)``. It never keeps the model or the listener
    /// alive. Observing the same (listener, model, key path) again keeps the
    /// first handler and returns the first token.
    ///
    /// - Parameters:
    ///   - keyPath: What to observe, read on this model.
    ///   - listener: The object on whose behalf the handler runs. Never
    ///     retained.
    ///   - options: What the handler receives; `[.new]` by default.
    ///     `.initial` is delivered before this call returns. `.prior` does
    ///     not apply (Observation reports a change after the store only): it
    ///     is a programmer error, reported (a debug build stops; a release
    ///     build returns an inert token). `.coalesced` changes nothing: changes
    ///     that wait are always merged.
    ///   - isolation: The actor the handler is isolated to and the key path
    ///     is read on; the caller's by default.
    ///   - changeHandler: Called with the listener, this model and the change.
    /// - Returns: The relation's token. Keeping it is optional.
    @discardableResult
    @_disfavoredOverload
    @inlinable
    public func safeObserve<Listener: AnyObject, Value>(
        _ keyPath: KeyPath<Self, Value>,
        by listener: Listener,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        changeHandler: @escaping (Listener, Self, ObservedChange<Value>) -> Void
    ) -> ObservationToken {
        _ObservableRegistration.register(
            self, keyPath, by: listener, options: options, isolation: isolation,
            deliver: _makeDeliver(options, unisolated: changeHandler),
            initial: { changeHandler(listener, self, $0) }, trackerCode: _ObservableTracker<Self, Value>.Code())
    }

    /// Observes `keyPath` on this `@Observable` model on behalf of the
    /// actor `listener`: the handler runs on it, with the actor as an
    /// `isolated` parameter.
    ///
    /// ```swift
    /// @Observable final class Meter: @unchecked Sendable { ... }  // all state behind a lock
    ///
    /// actor Log {
    ///     var levels: [Int] = []
    ///     func watch(_ meter: Meter) {
    ///         meter.safeObserve(\.level, by: self) { log, _, change in log.levels.append(change.newValue!) }
    ///     }
    /// }
    /// ```
    ///
    /// As with ``safeObserve(_:by:options:isolation:changeHandler:)``, a
    /// change is delivered after the mutating call returned, here on the
    /// listener's executor, and the relation ends when either side dies; it
    /// keeps neither alive. `.initial` is delivered before this call returns
    /// when it is made on the listener's executor; from elsewhere, first, in
    /// a job on it.
    ///
    /// The key path is read on the listener's executor, so the model and the
    /// key path must be `Sendable` (a key path to a property isolated to a
    /// global actor, such as a `@MainActor` model's, is not). A
    /// non-`Sendable` model that the actor owns is observed from the actor
    /// with ``values(_:buffering:isolation:)`` or
    /// ``changes(_:options:buffering:isolation:)``, which read it there.
    ///
    /// - Parameters:
    ///   - keyPath: What to observe, read on this model.
    ///   - listener: The actor the handler runs on. Never retained.
    ///   - options: What the handler receives; `[.new]` by default (`.prior`
    ///     does not apply, as above).
    ///   - changeHandler: Called on `listener`'s executor with the actor,
    ///     this model and the change.
    /// - Returns: The relation's token. Keeping it is optional.
    @discardableResult
    @_disfavoredOverload
    public func safeObserve<Listener: Actor, Value>(
        _ keyPath: any KeyPath<Self, Value> & Sendable,
        by listener: Listener,
        options: ObservationOptions = .new,
        changeHandler: @escaping @Sendable (isolated Listener, Self, ObservedChange<Value>) -> Void
    ) -> ObservationToken where Self: Sendable {
        let handler = _droppingIsolation(changeHandler)
        let isOnListener = _isCurrentActor(listener)
        return _ObservableRegistration.register(
            self, keyPath, by: listener, options: options, isolation: listener,
            deliver: _makeDeliver(options, unisolated: handler),
            initial: { handler(listener, self, $0) }, trackerCode: _ObservableTracker<Self, Value>.Code(),
            // unsafeBitCast: a class reference is passed as `AnyObject` alike;
            // the tracker calls it with this relation's listener only.
            initialInJob: isOnListener
                ? nil : unsafeBitCast(handler, to: (@Sendable (AnyObject, Self, ObservedChange<Value>) -> Void).self))
    }

    /// Stops `listener` observing `keyPath` on this model.
    ///
    /// Idempotent, and safe inside handlers and inside the listener's
    /// `deinit`.
    ///
    /// ```swift
    /// store.safeUnobserve(\.count, by: viewModel)
    /// ```
    ///
    /// - Complexity: O(*k*), *k* being the key paths `listener` observes on
    ///   this model.
    @_disfavoredOverload
    public func safeUnobserve<Value>(_ keyPath: KeyPath<Self, Value>, by listener: AnyObject) {
        // An equal key path that is another instance finds the relation
        // through the channel it resolves to.
        _ListenerProxy.of(listener, create: false)?.endRelations(on: ObjectIdentifier(self), keyPath: keyPath) {
            _ModelSentinels.existingSentinel(of: self, keyPath: keyPath)?.channel
        }
    }

    /// Stops `listener` observing every key path of this model.
    ///
    /// Idempotent, and safe inside handlers and inside the listener's
    /// `deinit`.
    ///
    /// ```swift
    /// store.safeUnobserve(by: viewModel)
    /// ```
    ///
    /// - Complexity: O(*k*), *k* being the key paths `listener` observes on
    ///   this model.
    @_disfavoredOverload
    public func safeUnobserve(by listener: AnyObject) {
        _ListenerProxy.of(listener, create: false)?.endRelations(on: ObjectIdentifier(self), keyPath: nil)
    }

    /// The changes of a key path of this `@Observable` model, as an
    /// asynchronous sequence.
    ///
    /// ```swift
    /// for await change in store.changes(\.count, options: [.old, .new]) {
    ///     print(change.oldValue!, "→", change.newValue!)
    /// }
    /// ```
    ///
    /// Each iterator observes the key path from the moment it is made
    /// (`for await` makes it when the loop starts, not when the sequence is
    /// made: the first element's `oldValue` is the value then), as
    /// ``safeObserve(_:by:options:isolation:changeHandler:)`` does from
    /// the actor this method is called from (`isolation`): the key path is
    /// read there (so a `@MainActor` model's is read on the main actor).
    /// From nonisolated code, pass `isolation: nil` for a `Sendable` model
    /// (read on a global executor); a non-`Sendable` one is rejected at
    /// compile time there.
    /// Changes are yielded after the mutating call returned, and changes
    /// made while one waits are one element (each element's `oldValue` is
    /// the previous one's `newValue`). `.initial` yields the current value
    /// first (read in a job on that actor when the iterator is made
    /// elsewhere); `.prior` is a programmer error, reported, and the
    /// sequence is empty.
    ///
    /// Lifetimes are those of ``SafeObservable/changes(_:options:buffering:)``:
    /// neither the sequence nor its iterator keeps the model alive, the
    /// sequence finishes when the model dies, and cancelling the consuming
    /// task or dropping the iterator ends the relation.
    ///
    /// - Parameters:
    ///   - keyPath: The key path to observe, as for `safeObserve`.
    ///   - options: What each element carries; `[.new]` by default.
    ///   - buffering: What is kept for a consumer that falls behind.
    ///   - isolation: The actor the key path is read on; the caller's by
    ///     default.
    /// - Returns: A sequence of ``ObservedChange`` values.
    /// - Complexity: O(1) per delivery, plus what the key path reads.
    @_disfavoredOverload
    public func changes<Value: Sendable>(
        _ keyPath: KeyPath<Self, Value>, options: ObservationOptions = .new,
        buffering: ObservationBuffering = .unbounded,
        isolation: isolated any Actor = #isolation
    ) -> ObservedChanges<Self, Value> {
        ObservedChanges(
            root: self, keyPath: keyPath, options: options, buffering: buffering,
            register: _ObservableRegistration.registeringIterators(on: isolation))
    }

    /// The values of a key path of this `@Observable` model, as an
    /// asynchronous sequence: the current value first, then each new value.
    ///
    /// ```swift
    /// for await count in store.values(\.count) {
    ///     print(count)
    /// }
    /// ```
    ///
    /// A consumer that falls behind sees the latest value by default; pass
    /// `.unbounded` to see every value delivered. Timing, the actor the key
    /// path is read on, and lifetimes are those of
    /// ``changes(_:options:buffering:isolation:)``.
    ///
    /// - Parameters:
    ///   - keyPath: The key path to observe, as for `safeObserve`.
    ///   - buffering: What is kept for a consumer that falls behind.
    ///   - isolation: The actor the key path is read on; the caller's by
    ///     default.
    /// - Returns: A sequence of the key path's values.
    /// - Complexity: O(1) per delivery, plus what the key path reads.
    @_disfavoredOverload
    public func values<Value: Sendable>(
        _ keyPath: KeyPath<Self, Value>, buffering: ObservationBuffering = .bufferingNewest(1),
        isolation: isolated any Actor = #isolation
    ) -> ObservedValues<Self, Value> {
        ObservedValues(
            changes: changes(keyPath, options: [.initial, .new], buffering: buffering, isolation: isolation))
    }
}

extension Observable where Self: AnyObject & Sendable {
    /// Observes `keyPath` on this `Sendable` `@Observable` model from
    /// nonisolated code: the handler runs on a global executor.
    ///
    /// ```swift
    /// @Observable final class Meter: @unchecked Sendable { ... }  // all state behind a lock
    ///
    /// final class Recorder: Sendable { ... }
    ///
    /// func record(_ meter: Meter, into recorder: Recorder) {
    ///     meter.safeObserve(\.level, by: recorder, isolation: nil) { recorder, _, change in
    ///         recorder.append(change.newValue!)
    ///     }
    /// }
    /// ```
    ///
    /// A delivery reads `keyPath` and calls the handler on a global
    /// executor, while the code that made the change may go on, so the
    /// model, the key path, the listener and the handler must be `Sendable`
    /// (a key path to a property isolated to a global actor, such as a
    /// `@MainActor` model's, is not). From an
    /// actor (the main actor included), leave `isolation` out: the
    /// handler then runs on that actor, and the model need not be
    /// `Sendable`. Timing, batches, options and lifetimes are otherwise
    /// those of the actor-isolated `safeObserve`.
    ///
    /// - Parameters:
    ///   - keyPath: What to observe, read on this model.
    ///   - listener: The object on whose behalf the handler runs. Never
    ///     retained.
    ///   - options: What the handler receives; `[.new]` by default.
    ///     `.prior` is a programmer error, reported.
    ///   - isolation: `nil` for a global executor, or the actor the handler
    ///     is isolated to.
    ///   - changeHandler: Called with the listener, this model and the change.
    /// - Returns: The relation's token. Keeping it is optional.
    @discardableResult
    @_disfavoredOverload
    @inlinable
    public func safeObserve<Listener: AnyObject & Sendable, Value>(
        _ keyPath: any KeyPath<Self, Value> & Sendable,
        by listener: Listener,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)?,
        changeHandler: @escaping @Sendable (Listener, Self, ObservedChange<Value>) -> Void
    ) -> ObservationToken {
        _ObservableRegistration.register(
            self, keyPath, by: listener, options: options, isolation: isolation,
            deliver: _makeDeliver(options, unisolated: changeHandler),
            initial: { changeHandler(listener, self, $0) }, trackerCode: _ObservableTracker<Self, Value>.Code())
    }

    /// The changes of a key path of this `Sendable` `@Observable` model,
    /// read on a global executor: for nonisolated code.
    ///
    /// ```swift
    /// for await change in meter.changes(\.level, options: [.old, .new], isolation: nil) {
    ///     print(change.oldValue!, "→", change.newValue!)
    /// }
    /// ```
    ///
    /// The key path is read on a global executor, while the code that made
    /// the change may go on, so the model and the key path must be
    /// `Sendable` (a `@MainActor` model's key paths are not). From an
    /// actor, leave `isolation` out: the key path is then read there, and
    /// the model need not be `Sendable`. Otherwise as the actor-isolated
    /// `changes`.
    ///
    /// - Parameters:
    ///   - keyPath: The key path to observe, as for `safeObserve`.
    ///   - options: What each element carries; `[.new]` by default.
    ///   - buffering: What is kept for a consumer that falls behind.
    ///   - isolation: `nil` for a global executor, or the actor the key path
    ///     is read on.
    /// - Returns: A sequence of ``ObservedChange`` values.
    /// - Complexity: O(1) per delivery, plus what the key path reads.
    @_disfavoredOverload
    public func changes<Value: Sendable>(
        _ keyPath: any KeyPath<Self, Value> & Sendable, options: ObservationOptions = .new,
        buffering: ObservationBuffering = .unbounded,
        isolation: isolated (any Actor)?
    ) -> ObservedChanges<Self, Value> {
        ObservedChanges(
            root: self, keyPath: keyPath, options: options, buffering: buffering,
            register: _ObservableRegistration.registeringIterators(on: isolation))
    }

    /// The values of a key path of this `Sendable` `@Observable` model,
    /// read on a global executor: for nonisolated code.
    ///
    /// ```swift
    /// for await level in meter.values(\.level, isolation: nil) {
    ///     print(level)
    /// }
    /// ```
    ///
    /// The model and the key path must be `Sendable`, as for
    /// `changes(_:options:buffering:isolation:)` with `isolation: nil`.
    ///
    /// - Parameters:
    ///   - keyPath: The key path to observe, as for `safeObserve`.
    ///   - buffering: What is kept for a consumer that falls behind.
    ///   - isolation: `nil` for a global executor, or the actor the key path
    ///     is read on.
    /// - Returns: A sequence of the key path's values.
    /// - Complexity: O(1) per delivery, plus what the key path reads.
    @_disfavoredOverload
    public func values<Value: Sendable>(
        _ keyPath: any KeyPath<Self, Value> & Sendable, buffering: ObservationBuffering = .bufferingNewest(1),
        isolation: isolated (any Actor)?
    ) -> ObservedValues<Self, Value> {
        ObservedValues(
            changes: changes(keyPath, options: [.initial, .new], buffering: buffering, isolation: isolation))
    }
}

/// What `safeObserve` does on an `@Observable` model.
@usableFromInline
enum _ObservableRegistration {
    /// How an iterator of `changes` registers: its relation reads the key
    /// path on `actor` (a global executor for `nil`); made off the actor, it
    /// reads its `.initial` there, in a job.
    static func registeringIterators<Root: Observable & AnyObject, Value: Sendable>(
        on actor: (any Actor)?
    ) -> ObservedChanges<Root, Value>._Register {
        func registerIterator(
            _ root: Root, _ keyPath: KeyPath<Root, Value>, _ relay: _StreamRelay, _ options: ObservationOptions,
            _ deliver: @escaping _Deliver, _ initial: @escaping @Sendable (ObservedChange<Value>) -> Void
        ) -> ObservationToken {
            let isOnActor = actor.map(_isCurrentActor) ?? true
            var initialInJob: (@Sendable (AnyObject, Root, ObservedChange<Value>) -> Void)?
            if !isOnActor {
                // unsafeBitCast: a class reference is passed as `AnyObject` alike.
                initialInJob = unsafeBitCast(
                    yielding(initial), to: (@Sendable (AnyObject, Root, ObservedChange<Value>) -> Void).self)
            }
            return _ObservableRegistration.register(
                root, keyPath, by: relay, options: options, isolation: actor, deliver: deliver, initial: initial,
                trackerCode: _ObservableTracker<Root, Value>.Code(), initialInJob: initialInJob)
        }
        return registerIterator
    }

    /// `initial` as a job's `.initial` handler (generic over the value only,
    /// so that it captures no model type).
    private static func yielding<Value: Sendable>(
        _ initial: @escaping @Sendable (ObservedChange<Value>) -> Void
    ) -> @Sendable (AnyObject, AnyObject, ObservedChange<Value>) -> Void {
        { _, _, change in initial(change) }
    }

    @usableFromInline
    static func register<Root: Observable & AnyObject, Listener: AnyObject, Value>(
        _ model: Root, _ keyPath: KeyPath<Root, Value>, by listener: Listener, options: ObservationOptions,
        isolation: (any Actor)?, deliver: @escaping _Deliver, initial: (ObservedChange<Value>) -> Void,
        trackerCode: _ObservableTracker<Root, Value>.Code,
        initialInJob: (@Sendable (AnyObject, Root, ObservedChange<Value>) -> Void)? = nil
    ) -> ObservationToken {
        let inert = ObservationToken(inertWith: options)
        // Only for diagnostics: describing a key path costs about 100,000
        // instructions.
        func described() -> String {
            _SafeObserveRegistration.describe(keyPath, (Root.self, Value.self, Listener.self))
        }
        if options.contains(.prior) {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: .prior does not apply to \(described()) of the @Observable \(Root.self): "
                    + "Observation reports a change after the store only")
            return inert
        }
        if _swift_isDeallocating(model) {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe \(described()) on \(Root.self) during the deinit of the \(Root.self)")
            return inert
        }
        if _swift_isDeallocating(listener) {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe \(described()) on \(Root.self) by a \(Listener.self) during its own deinit"
            )
            return inert
        }
        var sentinel = _ModelSentinels.sentinel(of: model, keyPath: keyPath)
        let registered = _SafeObserveRegistration.register(
            model, keyPath: keyPath, listener: listener, options: options, deliver: deliver, on: sentinel.channel)
        guard let relation = registered.relation else { return inert }
        let token = ObservationToken(relation)
        guard registered.isNew else { return token }
        // The tracker of this isolation tells the relation its changes.
        while relation.isActive {
            let found = sentinel.tracker(
                for: _ModelSentinel.TrackerKey(
                    isolation: isolation.map { ObjectIdentifier($0) },
                    type: ObjectIdentifier(_ObservableTracker<Root, Value>.self)),
                isolation: isolation,
                make: {
                    _ObservableTracker(
                        model: model, keyPath: keyPath, isolation: isolation, sentinel: sentinel,
                        code: trackerCode)
                })
            guard let (anyTracker, isFirst) = found else {
                relation.end()  // the model died meanwhile
                break
            }
            // unsafeDowncast: trackers are filed by their type.
            let tracker = unsafeDowncast(anyTracker, to: _ObservableTracker<Root, Value>.self)
            let deliversInitial = options.contains(.initial)
            // `.initial` here, or (`initialInJob`: off the handler's actor) in a job there.
            let initialHere = deliversInitial && initialInJob == nil
            guard
                let start = tracker.add(
                    relation, to: model, isFirst: isFirst, holding: initialHere,
                    initialInJob: deliversInitial ? initialInJob : nil)
            else { continue }
            if initialHere {
                if relation.isActive { initial(ObservedChange(newValue: start, oldValue: nil, isInitial: true)) }
                tracker.release(relation)
            }
            break
        }
        // Only the tracking closures hold the sentinel: none holds it if the
        // key path read nothing Observation tracks. Then the relation ends
        // as the sentinel goes, on return, after `.initial`.
        if relation.isActive, isKnownUniquelyReferenced(&sentinel) {
            _Diagnostics.warn(
                "SafeObserve: \(described()) of the @Observable \(Root.self) reads no tracked property (a `let`, "
                    + "an @ObservationIgnored property): nothing can change it, so the relation ends")
        }
        withExtendedLifetime(sentinel) {}
        return token
    }
}
