import Synchronization

/// An observer-owned set of relations, ended together when the controller
/// dies: SafeObserve's counterpart of Facebook's KVOController.
///
/// Keep a controller in a stored property of the observer (or adopt
/// ``ObservationControllerOwner`` for a lazily created one) and observe
/// through it. The controller holds the observer weakly and passes it to every
/// callback, so callbacks never need to capture it:
///
/// ```swift
/// final class InboxBadge {
///     lazy var controller = ObservationController(observer: self)
///     var text = ""
///
///     func show(_ inbox: Inbox) {
///         controller.observe(inbox, keyPath: \.unread, options: [.initial, .new]) { badge, _, change in
///             badge.text = "\(change.newValue!)"
///         }
///     }
/// }
/// ```
///
/// Callbacks come in three styles: a closure `(observer, object, change)`; an
/// unbound method of the observer (`action: InboxBadge.refresh`, the
/// counterpart of KVOController's `action:` selectors), which does not retain
/// the observer; or, with neither, the observer's
/// ``ObservationControllerDelegate`` method.
///
/// ## One mechanism
///
/// The controller observes through a private listener that adopts
/// ``SafeObserver``; every relation is an ordinary
/// ``SafeObservable/safeObserve(_:by:options:isolation:changeHandler:)`` relation of
/// that listener, so every guarantee of SafeObserve applies unchanged.
///
/// ## Lifetimes
///
/// - When the controller is released, its `deinit` ends every relation it
///   holds, synchronously, and releases every callback (and its captures).
/// - The observer is never retained. A change that arrives after it died is
///   dropped.
/// - With `retainsObserved` (the default, as in KVOController) the controller
///   keeps each observed object alive until it is unobserved — except the
///   observer itself, which may observe itself without a retain cycle.
///   Without it, an observed object may die first; its relations then end by
///   themselves and the controller keeps nothing for it.
///
/// ## Deduplication
///
/// Observing the same (object, key path) through one controller twice is one
/// relation: the second call does nothing, and its callback and options are
/// discarded (the first registration wins, as in KVOController). To replace
/// a callback, ``unobserve(_:keyPath:)`` first.
///
/// ## Threading
///
/// Every method may be called from any thread, and from inside any callback
/// (re-entrancy is supported: observe, unobserve, mutate or release anything).
/// Callbacks never run while the controller or SafeObserve holds a lock.
/// Where they run is the isolation of the `observe` call, as for
/// ``SafeObservable/safeObserve(_:by:options:isolation:changeHandler:)``:
/// observed from an actor (a `@MainActor` observer), callbacks are isolated
/// to it — synchronous for a change made there, delivered in order on the
/// actor for a change made elsewhere; observed from nonisolated code, they
/// run synchronously on the thread that changed the property. Once `deinit`
/// or an `unobserve` returns, no further callback starts for the relations it
/// ended; a callback already running on another thread may finish.
public final class ObservationController<Observer: AnyObject>: CustomDebugStringConvertible, @unchecked Sendable {
    // @unchecked Sendable: `core` is immutable; its bookkeeping is reached
    // only under its lock, and the observer only through the relay's weak
    // reference, handed only to callbacks, where the `observe` call's
    // isolation says.

    /// Whether the controller keeps the objects it observes alive.
    ///
    /// ```swift
    /// let controller = ObservationController(observer: self, retainsObserved: false)
    /// assert(!controller.retainsObserved)
    /// ```
    public var retainsObserved: Bool { core.retainsObserved }

    /// The relay, the bookkeeping and the option, shared by every
    /// controller of one ``ObservationControllerOwner`` whatever its static
    /// type; the relations end when the last of them goes.
    let core: _ControllerCore

    /// The listener every relation of this controller belongs to.
    var relay: _ControllerRelay { core.relay }

    private var state: _Mutex<_ControllerBook> { core.book }

    /// Creates a controller for `observer`.
    ///
    /// The controller holds `observer` weakly: store the controller in the
    /// observer (`lazy var controller = ObservationController(observer: self)`)
    /// and it dies with it, ending its relations.
    ///
    /// ```swift
    /// let controller = ObservationController(observer: badge)
    /// ```
    ///
    /// - Parameters:
    ///   - observer: The object passed to every callback. Not retained.
    ///   - retainsObserved: Whether observed objects are kept alive until
    ///     unobserved; `true` by default, as in KVOController.
    public init(observer: Observer, retainsObserved: Bool = true) {
        core = _ControllerCore(observer: observer, retainsObserved: retainsObserved)
    }

    /// A controller whose observer is gone before it was created (see
    /// ``ObservationControllerOwner``): it observes nothing.
    init(detachedWithRetainsObserved retainsObserved: Bool) {
        core = _ControllerCore(observer: nil, retainsObserved: retainsObserved)
    }

    /// A controller of `core`'s observer (an ``ObservationControllerOwner``
    /// seen through another static type): the same relations.
    init(sharing core: _ControllerCore) {
        self.core = core
    }

    /// The observer, while it is alive.
    ///
    /// ```swift
    /// assert(controller.observer === badge)
    /// ```
    public var observer: Observer? {
        relay.observer.map(Self.typed)
    }

    /// The core's observer as this controller's `Observer`.
    private static func typed(_ observer: AnyObject) -> Observer {
        // unsafeDowncast: a core's observer is the `observer` of the
        // controller that made it, or an owner whose dynamic type is every
        // `Observer` its storage makes a controller for (its class or a
        // superclass of it).
        unsafeDowncast(observer, to: Observer.self)
    }

    // MARK: One key path

    /// Observes `keyPath` of `object`, calling `changeHandler` with the
    /// observer, the object and the change.
    ///
    /// ```swift
    /// controller.observe(inbox, keyPath: \.unread, options: [.initial, .new]) { badge, inbox, change in
    ///     badge.text = "\(change.newValue!)"
    /// }
    /// ```
    ///
    /// Observing an (object, key path) this controller already observes does
    /// nothing: the first handler stays. A key path that is not an `@Observed`
    /// property is reported as by `safeObserve` (debug builds stop; release
    /// builds ignore the call). Nothing happens once the observer is gone.
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPath: An `@Observed` property of `object`.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - changeHandler: Called while the observer is alive, where
    ///     `isolation` says.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    public func observe<Object: SafeObservable, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        changeHandler: @escaping (Observer, Object, ObservedChange<Value>) -> Void
    ) {
        withRegistration(of: object) { _ in
            register(object, keyPath, options, isolation, changeHandler)
        }
    }

    /// Observes `keyPath` of `object`, calling an unbound method of the
    /// observer that takes no argument.
    ///
    /// The counterpart of KVOController's `action:` with a selector taking
    /// nothing. An unbound method reference captures nothing, so the observer
    /// is not retained.
    ///
    /// ```swift
    /// controller.observe(inbox, keyPath: \.unread, action: InboxBadge.refresh)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPath: An `@Observed` property of `object`.
    ///   - options: When the method is called; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - action: An unbound method of the observer, such as `InboxBadge.refresh`.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    public func observe<Object: SafeObservable, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        action: @escaping (Observer) -> () -> Void
    ) {
        withRegistration(of: object) { _ in
            register(object, keyPath, options, isolation, Self.calling(action))
        }
    }

    /// Observes `keyPath` of `object`, calling an unbound method of the
    /// observer that takes the change.
    ///
    /// ```swift
    /// extension InboxBadge {
    ///     func unreadChanged(_ change: ObservedChange<Int>) { text = "\(change.newValue!)" }
    /// }
    /// controller.observe(inbox, keyPath: \.unread, action: InboxBadge.unreadChanged)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPath: An `@Observed` property of `object`.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - action: An unbound method of the observer taking the change.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    public func observe<Object: SafeObservable, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        action: @escaping (Observer) -> (ObservedChange<Value>) -> Void
    ) {
        withRegistration(of: object) { _ in
            register(object, keyPath, options, isolation, Self.calling(action))
        }
    }

    /// Observes `keyPath` of `object`, calling an unbound method of the
    /// observer that takes the change and the object.
    ///
    /// ```swift
    /// extension InboxBadge {
    ///     func unreadChanged(_ change: ObservedChange<Int>, of inbox: Inbox) { ... }
    /// }
    /// controller.observe(inbox, keyPath: \.unread, action: InboxBadge.unreadChanged)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The object to observe; retained if ``retainsObserved``.
    ///   - keyPath: An `@Observed` property of `object`.
    ///   - options: What the change carries; `[.new]` by default.
    ///   - isolation: The actor callbacks are isolated to (the caller's by
    ///     default), or `nil` for synchronous delivery on any thread.
    ///   - action: An unbound method of the observer taking the change and the object.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    public func observe<Object: SafeObservable, Value>(
        _ object: Object,
        keyPath: KeyPath<Object, Value>,
        options: ObservationOptions = .new,
        isolation: isolated (any Actor)? = #isolation,
        action: @escaping (Observer) -> (ObservedChange<Value>, Object) -> Void
    ) {
        withRegistration(of: object) { _ in
            register(object, keyPath, options, isolation, Self.calling(action))
        }
    }

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

    // MARK: Unobserving

    /// Stops observing `keyPath` of `object`; releases `object` when nothing
    /// else of it is observed.
    ///
    /// Idempotent, and safe from any thread and inside any callback
    /// (including the `.initial` delivery of this very relation).
    ///
    /// ```swift
    /// controller.unobserve(inbox, keyPath: \.unread)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The observed object.
    ///   - keyPath: The key path to stop observing.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    public func unobserve<Object: SafeObservable, Value>(_ object: Object, keyPath: KeyPath<Object, Value>) {
        object.safeUnobserve(keyPath, by: relay)
        settle([ObjectIdentifier(object)], cancelling: false)
    }

    /// Stops observing every key path of `object` and releases it.
    ///
    /// Idempotent, and safe from any thread and inside any callback; inside
    /// an `.initial` delivery it also cancels the key paths of the same
    /// `observe(_:keyPaths:…)` call that were not registered yet.
    ///
    /// ```swift
    /// controller.unobserve(inbox)
    /// ```
    ///
    /// - Parameter object: The observed object.
    /// - Complexity: O(*k*) expected, *k* being the key paths this controller
    ///   observes on `object`.
    public func unobserve(_ object: some SafeObservable) {
        object.safeUnobserve(by: relay)
        settle([ObjectIdentifier(object)], cancelling: true)
    }

    /// Stops observing everything and releases every observed object.
    ///
    /// Idempotent, and safe from any thread and inside any callback.
    ///
    /// ```swift
    /// controller.unobserveAll()
    /// ```
    ///
    /// - Complexity: O(*n*) in the relations of this controller.
    public func unobserveAll() {
        SafeObservation.removeAll(observedBy: relay)
        settle(nil, cancelling: true)
    }

    // MARK: Debugging

    /// The observer, and each observed object with its key paths and options.
    ///
    /// ```swift
    /// print(controller.debugDescription)
    /// // ObservationController<InboxBadge>(observer: InboxBadge, retainsObserved: true) {
    /// //   Inbox ObjectIdentifier(0x…): \Inbox.unread [.new, .initial]; \Inbox.title [.new]
    /// // }
    /// ```
    ///
    /// Objects, and the key paths of one object, are listed in no particular
    /// order. Relations whose observed object died are not listed.
    ///
    /// - Complexity: O(*n*) in the relations of this controller.
    public var debugDescription: String {
        let observerName = observer.map { String(describing: type(of: $0)) } ?? "<released>"
        var lines: [String] = []
        var indexByObject: [ObjectIdentifier: Int] = [:]
        for token in relations {
            guard let id = token.observedObjectID, let keyPath = token.keyPath else { continue }
            let entry = "\(_KeyPathNames.describe(keyPath)) \(token.options)"
            if let index = indexByObject[id] {
                lines[index] += "; " + entry
            } else {
                indexByObject[id] = lines.count
                lines.append("  \(type(of: keyPath).rootType) \(id): " + entry)
            }
        }
        let head =
            "ObservationController<\(Observer.self)>(observer: \(observerName), retainsObserved: \(retainsObserved))"
        return lines.isEmpty ? head + " {}" : head + " {\n" + lines.joined(separator: "\n") + "\n}"
    }

    /// The controller's active relations (tests and debugging).
    var relations: [ObservationToken] {
        SafeObservation.relations(observedBy: relay)
    }

    /// How many observed objects the controller's table holds (tests).
    var _trackedObjectCount: Int {
        state.withLock { $0.objects.count }
    }

    /// How many observed objects the controller keeps alive (tests).
    var _retainedObjectCount: Int {
        state.withLock { $0.objects.values.filter { $0.object != nil }.count }
    }
}

// MARK: - Delegate deliveries

/// The overloads with neither a handler nor an action deliver to the
/// observer's ``ObservationControllerDelegate`` method, so they exist only for
/// observers that adopt it: observing without a callback on any other
/// observer does not compile (KVOController rejected it at run time).
extension ObservationController where Observer: ObservationControllerDelegate {
    /// Delivers to the observer's delegate method.
    private static func notifyingDelegate<Root: AnyObject>() -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
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

// MARK: - Implementation

extension ObservationController {
    /// Brackets registrations on `object`: retains it (if asked) before, and
    /// releases it after if no relation on it remains.
    ///
    /// `body` receives a function telling whether `object` was unobserved
    /// since the call began.
    private func withRegistration<Object: SafeObservable>(
        of object: Object, _ body: (_ isCancelled: () -> Bool) -> Void
    ) {
        // Read outside the lock: the temporary reference may be the observer's last.
        guard let observer = relay.observer else { return }
        let retains = retainsObserved && object !== observer
        let id = ObjectIdentifier(object)
        let epoch = state.withLock { state in
            state.objects[id, default: _ControllerBook.Entry()].inFlight += 1
            if retains { state.objects[id]!.object = object }
            return state.objects[id]!.epoch
        }
        body { self.state.withLock { $0.objects[id]?.epoch != epoch } }
        state.withLock { state in
            state.objects[id]!.inFlight -= 1
            state.objects[id]!.generation += 1
        }
        settle([id], cancelling: false)
    }

    /// Drops the table entries of `ids` (or of every object, for `nil`) that
    /// have no registration in flight and retain nothing still observed,
    /// releasing their objects after unlocking.
    ///
    /// Three steps, so that no lock is taken inside another: under the
    /// controller's lock, the candidates and their generations; unlocked,
    /// whether the relay still has a relation on each retained one (its
    /// proxy's lock); under the controller's lock again, the candidates
    /// whose entry did not change meanwhile are dropped (a registration
    /// that returned in between settles the object itself).
    ///
    /// - Complexity: O(*k*) per object, *k* being its relations here.
    private func settle(_ ids: [ObjectIdentifier]?, cancelling: Bool) {
        _ControllerBook.settle(state, relay: relay, ids, cancelling: cancelling)
    }

    private func register<Object: SafeObservable, Value>(
        _ object: Object, _ keyPath: KeyPath<Object, Value>, _ options: ObservationOptions,
        _ isolation: isolated (any Actor)?, _ body: @escaping (Observer, Object, ObservedChange<Value>) -> Void
    ) {
        object.safeObserve(
            keyPath, by: relay, options: options, isolation: isolation, changeHandler: Self.delivering(to: body))
    }

    /// Registers `handler` on each of `keyPaths`, in order; stops if `object`
    /// is unobserved meanwhile (by an `.initial` delivery).
    private func observeEach<Object: SafeObservable, each Value>(
        _ object: Object, _ keyPaths: repeat KeyPath<Object, each Value>, options: ObservationOptions,
        isolation: isolated (any Actor)?,
        _ handler: @escaping (Observer, Object, ObservedKeyPathChange<Object>) -> Void
    ) {
        withRegistration(of: object) { isCancelled in
            for keyPath in repeat each keyPaths {
                guard !isCancelled() else { break }
                registerErased(object, keyPath, options, isolation, handler)
            }
        }
    }

    private func registerErased<Object: SafeObservable, Value>(
        _ object: Object, _ keyPath: KeyPath<Object, Value>, _ options: ObservationOptions,
        _ isolation: isolated (any Actor)?, _ body: @escaping (Observer, Object, ObservedKeyPathChange<Object>) -> Void
    ) {
        register(object, keyPath, options, isolation, Self.erasing(keyPath, body))
    }

    /// Drops deliveries once the controller began its `deinit` or the observer died.
    private static func delivering<Root: AnyObject, Value>(
        to body: @escaping (Observer, Root, ObservedChange<Value>) -> Void
    ) -> (_ControllerRelay, Root, ObservedChange<Value>) -> Void {
        { relay, object, change in
            guard relay.isEnabled.load(ordering: .acquiring), let observer = relay.observer else { return }
            body(typed(observer), object, change)
        }
    }

    private static func calling<Root: AnyObject, Value>(
        _ action: @escaping (Observer) -> () -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        { observer, _, _ in action(observer)() }
    }

    private static func calling<Root: AnyObject, Value>(
        _ action: @escaping (Observer) -> (ObservedChange<Value>) -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        { observer, _, change in action(observer)(change) }
    }

    private static func calling<Root: AnyObject, Value>(
        _ action: @escaping (Observer) -> (ObservedChange<Value>, Root) -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        { observer, object, change in action(observer)(change, object) }
    }

    private static func erasing<Root: AnyObject, Value>(
        _ keyPath: KeyPath<Root, Value>,
        _ body: @escaping (Observer, Root, ObservedKeyPathChange<Root>) -> Void
    ) -> (Observer, Root, ObservedChange<Value>) -> Void {
        return { observer, object, change in body(observer, object, ObservedKeyPathChange(keyPath, change)) }
    }

    private static func callingErased<Root: AnyObject>(
        _ action: @escaping (Observer) -> () -> Void
    ) -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
        { observer, _, _ in action(observer)() }
    }

    private static func callingErased<Root: AnyObject>(
        _ action: @escaping (Observer) -> (ObservedKeyPathChange<Root>) -> Void
    ) -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
        { observer, _, change in action(observer)(change) }
    }

    private static func callingErased<Root: AnyObject>(
        _ action: @escaping (Observer) -> (ObservedKeyPathChange<Root>, Root) -> Void
    ) -> (Observer, Root, ObservedKeyPathChange<Root>) -> Void {
        { observer, object, change in action(observer)(change, object) }
    }

}

/// The listener every relation of a controller belongs to: the
/// observer-owned face of SafeObserve's listener proxy. Its
/// `ObserverLifetime` ends the relations when the controller's core goes.
final class _ControllerRelay: SafeObserver {
    let observerLifetime = ObserverLifetime()
    weak let observer: AnyObject?
    /// Cleared when the core begins its `deinit`.
    let isEnabled = Atomic<Bool>(true)

    init(_ observer: AnyObject?) {
        self.observer = observer
    }
}

/// What the controllers of one observer share (one, unless the observer is
/// an ``ObservationControllerOwner`` seen through several static types).
final class _ControllerCore {
    let retainsObserved: Bool
    let relay: _ControllerRelay
    let book = _Mutex(_ControllerBook())

    init(observer: AnyObject?, retainsObserved: Bool) {
        self.retainsObserved = retainsObserved
        relay = _ControllerRelay(observer)
    }

    deinit {
        // Callbacks still running elsewhere see the flag; none starts after this.
        relay.isEnabled.store(false, ordering: .releasing)
        // Synchronous even if a delivery elsewhere holds the relay for a moment.
        SafeObservation.removeAll(observedBy: relay)
        // `book` (and the observed objects it retains) is released after this body.
    }
}

/// A controller's bookkeeping of the objects it observes: not generic, so
/// that nothing in it instantiates metadata at run time.
struct _ControllerBook {
    /// Per observed object: the retained object, the registrations in
    /// flight, a cancellation epoch and a generation. An entry exists only
    /// while an `observe` call on the object is in flight or the object is
    /// retained, so entries for dead objects never accumulate.
    struct Entry {
        /// The observed object, when the controller retains it (and it is
        /// not the observer).
        var object: AnyObject?
        /// `observe` calls on the object that have not returned yet.
        var inFlight = 0
        /// Bumped by `unobserve(_:)` and `unobserveAll()`, to cancel the
        /// rest of an `observe(_:keyPaths:…)` call in flight.
        var epoch = 0
        /// Bumped when an `observe` call on the object returns: a settle
        /// that looked for the object's relations before then looks again.
        var generation = 0
    }

    /// An entry that may be dropped, as it was when `settle` looked.
    struct SettleCandidate {
        let id: ObjectIdentifier
        let generation: Int
        /// Whether the entry retains its object (then it is dropped only if
        /// no relation on the object remains).
        let retains: Bool
    }

    var objects: [ObjectIdentifier: Entry] = [:]

    /// Bumps the epochs of `ids` (every object for `nil`) if `cancelling`;
    /// returns those with no registration in flight.
    mutating func settleCandidates(_ ids: [ObjectIdentifier]?, cancelling: Bool) -> [SettleCandidate] {
        var candidates: [SettleCandidate] = []
        for id in ids ?? Array(objects.keys) {
            guard let entry = objects[id] else { continue }
            if cancelling { objects[id]!.epoch += 1 }
            guard entry.inFlight == 0 else { continue }
            candidates.append(SettleCandidate(id: id, generation: entry.generation, retains: entry.object != nil))
        }
        return candidates
    }

    /// Drops the entries of `candidates` that did not change since; returns
    /// their objects, to release after unlocking.
    mutating func drop(_ candidates: [SettleCandidate]) -> [AnyObject] {
        var released: [AnyObject] = []
        for candidate in candidates {
            guard let entry = objects[candidate.id], entry.inFlight == 0, entry.generation == candidate.generation
            else { continue }
            objects[candidate.id] = nil
            if let object = entry.object { released.append(object) }
        }
        return released
    }

    /// Settles `ids` (every object for `nil`) of the book `book`, whose
    /// relations `relay` holds; see `ObservationController.settle`.
    static func settle(
        _ book: borrowing _Mutex<_ControllerBook>, relay: AnyObject, _ ids: [ObjectIdentifier]?, cancelling: Bool
    ) {
        let candidates = book.withLock { $0.settleCandidates(ids, cancelling: cancelling) }
        guard !candidates.isEmpty else { return }
        let proxy = _ListenerProxy.of(relay, create: false)
        let unobserved = candidates.filter { candidate in
            !candidate.retains || !(proxy?.hasRelation(on: candidate.id) ?? false)
        }
        guard !unobserved.isEmpty else { return }
        let released = book.withLock { $0.drop(unobserved) }
        // Released unlocked: an observed object's deinit is user code.
        _ = released
    }
}
