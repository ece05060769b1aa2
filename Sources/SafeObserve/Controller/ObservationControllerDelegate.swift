/// An observer that receives the changes its ``ObservationController``
/// observes without a handler or an action.
///
/// The counterpart of KVOController's fallback to the observer's own
/// `observeValueForKeyPath:ofObject:change:context:`. Compare
/// ``ObservedKeyPathChange/keyPath`` to tell the key paths apart.
///
/// ```swift
/// final class Badge: ObservationControllerDelegate {
///     lazy var controller = ObservationController(observer: self)
///
///     func start(_ inbox: Inbox) {
///         controller.observe(inbox, keyPath: \.unread)
///     }
///
///     func observationController<Object: AnyObject>(
///         didObserve change: ObservedKeyPathChange<Object>, of object: Object
///     ) {
///         if change.keyPath == \Inbox.unread { print(change.newValue!) }
///     }
/// }
/// ```
///
/// For a ``SafeObservable``, delivery is synchronous, on the thread that
/// changed the property (or on the actor the controller registered from);
/// for an `@Observable` model, after the mutating call returned, on that
/// actor or on a global executor.
public protocol ObservationControllerDelegate: AnyObject {
    /// Called for each change observed without a handler or an action.
    ///
    /// ```swift
    /// func observationController<Object: AnyObject>(
    ///     didObserve change: ObservedKeyPathChange<Object>, of object: Object
    /// ) {
    ///     print(change.keyPath, change.newValue as Any)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - change: The change, naming its key path.
    ///   - object: The observed object.
    func observationController<Object: AnyObject>(
        didObserve change: ObservedKeyPathChange<Object>, of object: Object)
}

// MARK: - Delegate deliveries

/// The overloads with neither a handler nor an action deliver to the
/// observer's ``ObservationControllerDelegate`` method, so they exist only for
/// observers that adopt it: observing without a callback on any other
/// observer does not compile (KVOController rejected it at run time).
extension ObservationController where Observer: ObservationControllerDelegate {
    /// Delivers to the observer's delegate method.
    static func notifyingDelegate<Root: AnyObject>() -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
        { observer, object, change in observer.observationController(didObserve: change, of: object) }
    }

    /// Observes `keyPath` of `object`, delivering to the observer's
    /// ``ObservationControllerDelegate`` method.
    ///
    /// ```swift
    /// controller.observe(inbox, keyPath: \.unread)   // badge adopts ObservationControllerDelegate
    /// ```
    ///
    /// Available only when `Observer` adopts ``ObservationControllerDelegate``:
    /// observing without a callback on any other observer does not compile.
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPath: An `@Observed` property of `object`.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    public func observe<Object: SafeObservable, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation
    ) {
        withRegistration(of: object) { _ in
            registerErased(object, keyPath, options, isolation, Self.notifyingDelegate())
        }
    }

    /// Observes several key paths of `object`, delivering each change to the
    /// observer's ``ObservationControllerDelegate`` method.
    ///
    /// ```swift
    /// controller.observe(account, keyPaths: \.balance, \.owner)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPaths: `@Observed` properties of `object`.
    ///   - options: What each change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    /// - Complexity: O(*p* · *k*) expected for *p* key paths, *k* being the
    ///   key paths this controller observes on `object`.
    public func observe<Object: SafeObservable, First, each Value>(
        _ object: Object,
        keyPaths firstKeyPath: KeyPath<Object, First>,
        _ keyPaths: repeat KeyPath<Object, each Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation
    ) {
        observeEach(
            object, firstKeyPath, repeat each keyPaths, options: options, isolation: isolation, Self.notifyingDelegate()
        )
    }
}
