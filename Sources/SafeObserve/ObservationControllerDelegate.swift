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
/// Delivery is synchronous, on the thread that changed the property.
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
