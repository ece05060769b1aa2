/// What a change handler receives, mirroring Key-Value Observing's options.
///
/// ```swift
/// counter.safeObserve(\.count, by: self, options: [.initial, .old, .new]) { _, _, change in
///     print(change.oldValue as Any, "→", change.newValue as Any)
/// }
/// ```
///
/// The default for `safeObserve` is `[.new]`.
public struct ObservationOptions: OptionSet, Sendable, Hashable, CustomStringConvertible {
    /// The options' bits: `.new` is bit 0, `.old` bit 1, `.initial` bit 2,
    /// `.prior` bit 3, `.coalesced` bit 4. Other bits are ignored.
    ///
    /// ```swift
    /// assert(ObservationOptions.old.rawValue == 2)
    /// ```
    public let rawValue: UInt8

    /// Creates options from their raw bits.
    ///
    /// ```swift
    /// let options = ObservationOptions(rawValue: 0b11)   // [.new, .old]
    /// ```
    @inlinable
    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// Changes carry the value after the change in ``ObservedChange/newValue``.
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: self, options: .new) { _, _, change in print(change.newValue!) }
    /// ```
    @inlinable public static var new: ObservationOptions { ObservationOptions(rawValue: 1 << 0) }

    /// Changes carry the value before the change in ``ObservedChange/oldValue``.
    ///
    /// One exception: a ``SafeObservationRegistrar``'s property changed on
    /// another thread while the relation is being registered (see "Ordering"
    /// in the Threading article) may tell that change with `oldValue` `nil`,
    /// unless the relation asked for `.initial` and its handler is isolated
    /// to an actor (its old value is then the value the `.initial` told).
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: self, options: [.old, .new]) { _, _, change in
    ///     print(change.oldValue!, "→", change.newValue!)
    /// }
    /// ```
    @inlinable public static var old: ObservationOptions { ObservationOptions(rawValue: 1 << 1) }

    /// One extra delivery during registration, with the current value in
    /// ``ObservedChange/newValue`` (whether or not ``new`` is set), `oldValue`
    /// `nil` and ``ObservedChange/isInitial`` `true`. Only the new relation
    /// receives it.
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: label, options: [.initial, .new]) { label, _, change in
    ///     label.text = "\(change.newValue!)"   // also runs once right now
    /// }
    /// ```
    @inlinable public static var initial: ObservationOptions { ObservationOptions(rawValue: 1 << 2) }

    /// One extra delivery before each change is stored, with
    /// ``ObservedChange/isPrior`` `true`, `newValue` `nil`, and the old value
    /// when ``old`` is set.
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: self, options: [.prior, .old, .new]) { _, _, change in
    ///     print(change.isPrior ? "will change from \(change.oldValue!)" : "did change")
    /// }
    /// ```
    @inlinable public static var prior: ObservationOptions { ObservationOptions(rawValue: 1 << 3) }

    /// For a handler registered from an actor: while a change made elsewhere
    /// waits to be delivered on the actor, further changes merge into it, so
    /// the handler is told once, with the first old value and the latest new
    /// value. Changes made on the actor itself are delivered at once, as
    /// always. Without it, every change is delivered.
    ///
    /// ```swift
    /// @MainActor func bind(_ progress: Download) {
    ///     progress.safeObserve(\.bytes, by: self, options: [.new, .coalesced]) { view, _, change in
    ///         view.label.text = "\(change.newValue!) bytes"   // once per main-actor turn, at most
    ///     }
    /// }
    /// ```
    ///
    /// A prior notification (``prior``) made while a change is waiting is
    /// dropped: the waiting change was already announced. Handlers of
    /// nonisolated registrations run synchronously, so there is nothing to
    /// merge and the option has no effect.
    @inlinable public static var coalesced: ObservationOptions { ObservationOptions(rawValue: 1 << 4) }

    /// The options in source form, such as `[.old, .new]`.
    ///
    /// ```swift
    /// print(ObservationOptions([.old, .new]))   // [.new, .old]
    /// ```
    public var description: String {
        let names: [(ObservationOptions, String)] = [
            (.new, ".new"), (.old, ".old"), (.initial, ".initial"), (.prior, ".prior"), (.coalesced, ".coalesced"),
        ]
        return "[" + names.filter { contains($0.0) }.map(\.1).joined(separator: ", ") + "]"
    }
}
