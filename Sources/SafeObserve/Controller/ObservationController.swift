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
/// a callback, ``unobserve(_:keyPath:)-9ouwe`` first.
///
/// ## Threading
///
/// A controller of a `Sendable` observer is `Sendable`, and every method may
/// be called from any thread. A controller of any other observer is not: its
/// callbacks and ``observer`` hand the observer out, so it stays in the
/// observer's region (the compiler checks it). Every method may be called
/// from inside any callback (re-entrancy is supported: observe, unobserve,
/// mutate or release anything).
/// Callbacks never run while the controller or SafeObserve holds a lock.
/// Where they run is the isolation of the `observe` call, as for
/// ``SafeObservable/safeObserve(_:by:options:isolation:changeHandler:)``:
/// observed from an actor (a `@MainActor` observer), callbacks are isolated
/// to it — synchronous for a change made there, delivered in order on the
/// actor for a change made elsewhere; observed from nonisolated code, they
/// run synchronously on the thread that changed the property. Once `deinit`
/// or an `unobserve` returns, no further callback starts for the relations it
/// ended; a callback already running on another thread may finish.
public final class ObservationController<Observer: AnyObject>: CustomDebugStringConvertible {

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

    var state: _Mutex<_ControllerBook> { core.book }

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
    static func typed(_ observer: AnyObject) -> Observer {
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
    /// order. Relations whose observed object died are not listed. Key paths
    /// are named as ``ObservationToken/debugDescription`` names them (a key
    /// path formed through a protocol requirement prints as
    /// `\Inbox.<computed 0x… (Int)>`).
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

// @unchecked Sendable: `core` is immutable and its bookkeeping is reached only
// under its lock; the observer, handed to callbacks and by `observer`, is
// `Sendable` itself (a controller of any other observer stays in its region).
extension ObservationController: @unchecked Sendable where Observer: Sendable {}
