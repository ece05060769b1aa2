import Observation

// `ObservationController` on `@Observable` models: the same call shapes as
// for a `SafeObservable`, registered through the models' own relations, so
// the timing is theirs (after the mutating call returned; see
// "Observing @Observable models"). From an actor only: a delivery reads the
// model where it runs, and a controller's observer is rarely `Sendable`, so
// nonisolated code observes a `Sendable` model with `safeObserve(_:by:...,
// isolation: nil)` instead.
extension ObservationController {
    // MARK: One key path

    /// Observes `keyPath` of the `@Observable` model `object`, calling
    /// `changeHandler` with the observer, the model and the change.
    ///
    /// ```swift
    /// @Observable final class Inbox { var unread = 0 }
    ///
    /// controller.observe(inbox, keyPath: \.unread, options: [.initial, .new]) { badge, inbox, change in
    ///     badge.text = "\(change.newValue!)"
    /// }
    /// ```
    ///
    /// As for a ``SafeObservable``, observing an (object, key path) this
    /// controller already observes does nothing, and nothing happens once
    /// the observer is gone. As for any `@Observable` model, a change is
    /// delivered after the mutating call returned, on `isolation` (the
    /// caller's actor); `.prior` is reported as a programmer error and
    /// observes nothing.
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPath: What to observe; whatever it reads is tracked.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - changeHandler: Called while the observer is alive, where
    ///     `isolation` says.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        changeHandler: @escaping (Observer, Object, ObservedChange<Value>) -> Void
    ) {
        withRegistration(of: object) { _ in
            registerModel(object, keyPath, options, isolation, changeHandler)
        }
    }

    /// Observes `keyPath` of the `@Observable` model `object`, calling an
    /// unbound method of the observer that takes no argument.
    ///
    /// ```swift
    /// controller.observe(inbox, keyPath: \.unread, action: InboxBadge.refresh)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPath: What to observe; whatever it reads is tracked.
    ///   - options: When the method is called; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - action: An unbound method of the observer, such as `InboxBadge.refresh`.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        action: @escaping (Observer) -> () -> Void
    ) {
        withRegistration(of: object) { _ in
            registerModel(object, keyPath, options, isolation, Self.calling(action))
        }
    }

    /// Observes `keyPath` of the `@Observable` model `object`, calling an
    /// unbound method of the observer that takes the change.
    ///
    /// ```swift
    /// controller.observe(inbox, keyPath: \.unread, action: InboxBadge.show)
    /// // InboxBadge: func show(_ change: ObservedChange<Int>)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPath: What to observe; whatever it reads is tracked.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - action: An unbound method of the observer, such as `InboxBadge.show`.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        action: @escaping (Observer) -> (ObservedChange<Value>) -> Void
    ) {
        withRegistration(of: object) { _ in
            registerModel(object, keyPath, options, isolation, Self.calling(action))
        }
    }

    /// Observes `keyPath` of the `@Observable` model `object`, calling an
    /// unbound method of the observer that takes the change and the model.
    ///
    /// ```swift
    /// controller.observe(inbox, keyPath: \.unread, action: InboxBadge.show)
    /// // InboxBadge: func show(_ change: ObservedChange<Int>, of inbox: Inbox)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPath: What to observe; whatever it reads is tracked.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - action: An unbound method of the observer, such as `InboxBadge.show`.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        action: @escaping (Observer) -> (ObservedChange<Value>, Object) -> Void
    ) {
        withRegistration(of: object) { _ in
            registerModel(object, keyPath, options, isolation, Self.calling(action))
        }
    }

    // MARK: Several key paths

    /// Observes several key paths of the `@Observable` model `object` with
    /// one handler; each change names the key path it came from.
    ///
    /// ```swift
    /// controller.observe(account, keyPaths: \.balance, \.owner) { view, _, change in
    ///     if change.keyPath == \Account.balance { view.balance = change.newValue as! Int }
    /// }
    /// ```
    ///
    /// Each key path is its own relation; `.initial` deliveries arrive in
    /// argument order. Key paths already observed by this controller keep
    /// their first callback.
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPaths: What to observe; whatever each reads is tracked.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - changeHandler: Called while the observer is alive, where
    ///     `isolation` says.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        changeHandler: @escaping (Observer, Object, ObservedKeyPathChange<Object>) -> Void
    ) {
        observeEachModel(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation, changeHandler)
    }

    /// Observes several key paths of the `@Observable` model `object`,
    /// calling an unbound method of the observer that takes no argument.
    ///
    /// ```swift
    /// controller.observe(account, keyPaths: \.balance, \.owner, action: AccountView.reload)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPaths: What to observe; whatever each reads is tracked.
    ///   - options: When the method is called; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - action: An unbound method of the observer, such as `AccountView.reload`.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        action: @escaping (Observer) -> () -> Void
    ) {
        observeEachModel(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation,
            Self.callingErased(action))
    }

    /// Observes several key paths of the `@Observable` model `object`,
    /// calling an unbound method of the observer that takes the change.
    ///
    /// ```swift
    /// extension AccountView {
    ///     func accountChanged(_ change: ObservedKeyPathChange<Account>) { ... }
    /// }
    /// controller.observe(account, keyPaths: \.balance, \.owner, action: AccountView.accountChanged)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPaths: What to observe; whatever each reads is tracked.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - action: An unbound method of the observer taking the change.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        action: @escaping (Observer) -> (ObservedKeyPathChange<Object>) -> Void
    ) {
        observeEachModel(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation,
            Self.callingErased(action))
    }

    /// Observes several key paths of the `@Observable` model `object`,
    /// calling an unbound method of the observer that takes the change and
    /// the model.
    ///
    /// ```swift
    /// extension AccountView {
    ///     func accountChanged(_ change: ObservedKeyPathChange<Account>, of account: Account) { ... }
    /// }
    /// controller.observe(account, keyPaths: \.balance, \.owner, action: AccountView.accountChanged)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPaths: What to observe; whatever each reads is tracked.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    ///   - action: An unbound method of the observer taking the change and the model.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation,
        action: @escaping (Observer) -> (ObservedKeyPathChange<Object>, Object) -> Void
    ) {
        observeEachModel(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation,
            Self.callingErased(action))
    }

    // MARK: Unobserving

    /// Stops observing `keyPath` of the `@Observable` model `object`.
    ///
    /// ```swift
    /// controller.unobserve(inbox, keyPath: \.unread)
    /// ```
    ///
    /// Releases `object` once this controller observes none of its key
    /// paths. Idempotent.
    ///
    /// - Complexity: O(*k*), *k* being the key paths this controller
    ///   observes on `object`.
    @_disfavoredOverload
    public func unobserve<Object: Observable & AnyObject, Value>(_ object: Object, keyPath: KeyPath<Object, Value>) {
        object.safeUnobserve(keyPath, by: relay)
        settle([ObjectIdentifier(object)], cancelling: false)
    }

    /// Stops observing every key path of the `@Observable` model `object`,
    /// and releases it.
    ///
    /// ```swift
    /// controller.unobserve(inbox)
    /// ```
    ///
    /// Idempotent.
    ///
    /// - Complexity: O(*k*), *k* being the key paths this controller
    ///   observes on `object`.
    @_disfavoredOverload
    public func unobserve(_ object: some Observable & AnyObject) {
        object.safeUnobserve(by: relay)
        settle([ObjectIdentifier(object)], cancelling: true)
    }

    /// Registers each key path in order, as one registration (unobserving
    /// the model inside an `.initial` delivery skips the rest).
    func observeEachModel<Object: Observable & AnyObject, each Value>(
        _ object: Object, _ keyPaths: repeat KeyPath<Object, each Value>, options: ObservationOptions,
        isolation: isolated any Actor,
        _ handler: @escaping (Observer, Object, ObservedKeyPathChange<Object>) -> Void
    ) {
        withRegistration(of: object) { isCancelled in
            for keyPath in repeat each keyPaths {
                guard !isCancelled() else { break }
                registerModel(object, keyPath, options, isolation, Self.erasing(keyPath, handler))
            }
        }
    }

    func registerModel<Object: Observable & AnyObject, Value>(
        _ object: Object, _ keyPath: KeyPath<Object, Value>, _ options: ObservationOptions,
        _ isolation: isolated any Actor, _ body: @escaping (Observer, Object, ObservedChange<Value>) -> Void
    ) {
        object.safeObserve(
            keyPath, by: relay, options: options, isolation: isolation, changeHandler: Self.delivering(to: body))
    }
}

// MARK: - Delegate deliveries

extension ObservationController where Observer: ObservationControllerDelegate {
    /// Observes `keyPath` of the `@Observable` model `object`, delivering to
    /// the observer's ``ObservationControllerDelegate`` method.
    ///
    /// ```swift
    /// controller.observe(inbox, keyPath: \.unread)   // badge adopts ObservationControllerDelegate
    /// ```
    ///
    /// As for any `@Observable` model, the change is delivered after the
    /// mutating call returned, on `isolation` (the caller's actor).
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPath: What to observe; whatever it reads is tracked.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation
    ) {
        observeEachModel(object, keyPath, options: options, isolation: isolation, Self.notifyingDelegate())
    }

    /// Observes several key paths of the `@Observable` model `object`,
    /// delivering each change to the observer's
    /// ``ObservationControllerDelegate`` method.
    ///
    /// ```swift
    /// controller.observe(account, keyPaths: \.balance, \.owner)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The model to observe; retained if ``retainsObserved``.
    ///   - keyPaths: What to observe; whatever each reads is tracked.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to: the caller's by
    ///     default. An `@Observable` model is observed from an actor only
    ///     (its key path is read there); from nonisolated code, see
    ///     "Observing @Observable models".
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    @_disfavoredOverload
    public func observe<Object: Observable & AnyObject, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated any Actor = #isolation
    ) {
        observeEachModel(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation,
            Self.notifyingDelegate())
    }
}
