/// An object with a lazily created ``ObservationController`` of its own:
/// the counterpart of KVOController's `self.KVOController` property.
///
/// Swift on Linux has no associated objects, so the owner declares the
/// storage — one stored property — and gets ``observationController``:
///
/// ```swift
/// final class InboxBadge: ObservationControllerOwner {
///     let observationControllerStorage = ObservationControllerStorage()
///     var text = ""
///
///     func show(_ inbox: Inbox) {
///         observationController.observe(inbox, keyPath: \.unread) { badge, _, change in
///             badge.text = "\(change.newValue!)"
///         }
///     }
/// }
/// ```
///
/// The controller is created on first use (thread-safely), retains observed
/// objects, holds its owner weakly and dies with it, so an owner that
/// observes itself does not leak.
public protocol ObservationControllerOwner: AnyObject {
    /// The storage of ``observationController``; declare it as a stored `let`.
    ///
    /// ```swift
    /// let observationControllerStorage = ObservationControllerStorage()
    /// ```
    var observationControllerStorage: ObservationControllerStorage { get }
}

extension ObservationControllerOwner {
    /// The owner's controller, created on first use.
    ///
    /// ```swift
    /// observationController.observe(inbox, keyPath: \.unread, action: InboxBadge.refresh)
    /// ```
    ///
    /// Inside the owner's `deinit` this returns the existing controller (so
    /// `observationController.unobserveAll()` there is harmless), or, if none
    /// was created, a detached controller that observes nothing: nothing is
    /// ever created for an owner that is being destroyed (KVOController's
    /// issue #46).
    ///
    /// - Note: The controller is typed by the static type of `self` at the
    ///   call site, but there is one per object: code in a superclass and
    ///   code in a subclass see the same relations, so `unobserveAll()` in
    ///   either ends them all, and observing the same key path from both is
    ///   one relation.
    /// - Complexity: O(1).
    public var observationController: ObservationController<Self> {
        observationControllerStorage.controller(for: self)
    }
}

/// The storage behind ``ObservationControllerOwner/observationController``.
///
/// Keep it as a stored `let` of its owner and nowhere else.
///
/// ```swift
/// let observationControllerStorage = ObservationControllerStorage()
/// ```
public final class ObservationControllerStorage: Sendable {
    /// The owner's address, recorded by the first controller made (identity
    /// only; the storage dies with its owner), and one controller per static
    /// owner type (see ``ObservationControllerOwner/observationController``),
    /// keyed by the identity of that type.
    /// The owner's address, the controllers' shared core, and one
    /// controller per static type the owner was seen through.
    private let state = _Mutex<(owner: UInt?, core: _ControllerCore?, controllers: [ObjectIdentifier: AnyObject])>(
        (nil, nil, [:]))

    /// Creates empty storage; the controller is created on first use.
    ///
    /// ```swift
    /// let observationControllerStorage = ObservationControllerStorage()
    /// ```
    public init() {}

    func controller<Owner: AnyObject>(for owner: Owner) -> ObservationController<Owner> {
        let key = ObjectIdentifier(Owner.self)
        // Creating a controller runs no user code (it only allocates and forms
        // a weak reference), so it may happen under the lock.
        // Unmanaged without a retain: the address only, as an identity.
        let ownerAddress = UInt(bitPattern: Unmanaged.passUnretained(owner).toOpaque())
        let (controller, isShared) = state.withLock { state -> (AnyObject?, Bool) in
            if let first = state.owner, first != ownerAddress { return (nil, true) }
            if let existing = state.controllers[key] { return (existing, false) }
            if let core = state.core {
                // The owner seen through another static type: the same core.
                let created = ObservationController<Owner>(sharing: core)
                state.controllers[key] = created
                return (created, false)
            }
            if _swift_isDeallocating(owner) { return (nil, false) }
            let created = ObservationController(observer: owner)
            state.owner = ownerAddress
            state.core = created.core
            state.controllers[key] = created
            return (created, false)
        }
        if isShared {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: a \(type(of: owner)) returns an ObservationControllerStorage that another object "
                    + "already uses, so its controller would deliver to that object; each "
                    + "ObservationControllerOwner needs its own, declared as a stored `let`")
        }
        guard let controller else {
            return ObservationController(detachedWithRetainsObserved: true)
        }
        // Stored under `Owner`'s identity only by the line above, so the type matches.
        return unsafeDowncast(controller, to: ObservationController<Owner>.self)
    }
}
