extension ObservationController {
    // MARK: Several key paths

    /// Observes several key paths of `object` with one handler; each change
    /// names the key path it came from.
    ///
    /// Each key path is its own relation, so changes arrive one by one, in
    /// the order they happen; `.initial` deliveries arrive in argument order.
    ///
    /// ```swift
    /// controller.observe(account, keyPaths: \.balance, \.owner, options: [.initial, .new]) { view, _, change in
    ///     switch change.keyPath {
    ///     case \Account.balance: view.balance = change.newValue as! Int
    ///     default: view.owner = change.newValue as! String
    ///     }
    /// }
    /// ```
    ///
    /// Unobserving `object` inside an `.initial` delivery also skips the key
    /// paths not registered yet. Key paths already observed by this controller
    /// keep their first callback.
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPaths: `@Observed` properties of `object`.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - changeHandler: Called while the observer is alive, where
    ///     `isolation` says.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    public func observe<Object: SafeObservable, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        changeHandler: @escaping (Observer, Object, ObservedKeyPathChange<Object>) -> Void
    ) {
        observeEach(object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation, changeHandler)
    }

    /// Observes several key paths of `object`, calling an unbound method of
    /// the observer that takes no argument.
    ///
    /// ```swift
    /// controller.observe(account, keyPaths: \.balance, \.owner, action: AccountView.reload)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPaths: `@Observed` properties of `object`.
    ///   - options: When the method is called; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - action: An unbound method of the observer, such as `AccountView.reload`.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    public func observe<Object: SafeObservable, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        action: @escaping (Observer) -> () -> Void
    ) {
        observeEach(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation,
            Self.callingErased(action))
    }

    /// Observes several key paths of `object`, calling an unbound method of
    /// the observer that takes the change.
    ///
    /// ```swift
    /// extension AccountView {
    ///     func accountChanged(_ change: ObservedKeyPathChange<Account>) { ... }
    /// }
    /// controller.observe(account, keyPaths: \.balance, \.owner, action: AccountView.accountChanged)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPaths: `@Observed` properties of `object`.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - action: An unbound method of the observer taking the change.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    public func observe<Object: SafeObservable, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        action: @escaping (Observer) -> (ObservedKeyPathChange<Object>) -> Void
    ) {
        observeEach(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation,
            Self.callingErased(action))
    }

    /// Observes several key paths of `object`, calling an unbound method of
    /// the observer that takes the change and the object.
    ///
    /// ```swift
    /// extension AccountView {
    ///     func accountChanged(_ change: ObservedKeyPathChange<Account>, of account: Account) { ... }
    /// }
    /// controller.observe(account, keyPaths: \.balance, \.owner, action: AccountView.accountChanged)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPaths: `@Observed` properties of `object`.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - action: An unbound method of the observer taking the change and the object.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    public func observe<Object: SafeObservable, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        action: @escaping (Observer) -> (ObservedKeyPathChange<Object>, Object) -> Void
    ) {
        observeEach(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation,
            Self.callingErased(action))
    }
}
