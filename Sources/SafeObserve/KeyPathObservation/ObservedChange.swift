/// One change delivered to a handler.
///
/// Which fields are filled depends on the relation's ``ObservationOptions``:
///
/// | delivery                 | `newValue`          | `oldValue`          | flags          |
/// |--------------------------|---------------------|---------------------|----------------|
/// | change                   | with `.new`         | with `.old`         |                |
/// | before a change (`.prior`) | `nil`             | with `.old`         | `isPrior`      |
/// | at registration (`.initial`) | current value   | `nil`               | `isInitial`    |
///
/// ```swift
/// counter.safeObserve(\.count, by: self, options: [.old, .new]) { _, _, change in
///     if let old = change.oldValue, let new = change.newValue { print(old, "→", new) }
/// }
/// ```
public struct ObservedChange<Value> {
    /// The value after the change (see the table above for when it is set).
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: self) { _, _, change in print(change.newValue!) }
    /// ```
    public let newValue: Value?

    /// The value before the change, when `.old` was requested.
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: self, options: .old) { _, _, change in print(change.oldValue!) }
    /// ```
    public let oldValue: Value?

    /// `true` for the delivery made before the value is stored (`.prior`).
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: self, options: [.prior, .new]) { _, _, change in
    ///     if change.isPrior { print("about to change") }
    /// }
    /// ```
    public let isPrior: Bool

    /// `true` for the delivery made during registration (`.initial`).
    ///
    /// ```swift
    /// counter.safeObserve(\.count, by: self, options: [.initial, .new]) { _, _, change in
    ///     if change.isInitial { print("current value:", change.newValue!) }
    /// }
    /// ```
    public let isInitial: Bool

    /// Creates a change; handlers receive these, tests may build them.
    ///
    /// ```swift
    /// let change = ObservedChange(newValue: 2, oldValue: 1)
    /// ```
    @inlinable @inline(__always)
    public init(newValue: Value?, oldValue: Value?, isPrior: Bool = false, isInitial: Bool = false) {
        self.newValue = newValue
        self.oldValue = oldValue
        self.isPrior = isPrior
        self.isInitial = isInitial
    }
}

extension ObservedChange: Sendable where Value: Sendable {}
extension ObservedChange: Equatable where Value: Equatable {}
extension ObservedChange: Hashable where Value: Hashable {}
