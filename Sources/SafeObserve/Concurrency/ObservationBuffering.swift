/// How an asynchronous sequence of changes keeps the elements its consumer
/// has not read yet.
///
/// ```swift
/// for await change in counter.changes(\.count, buffering: .bufferingOldest(100)) { … }
/// ```
public enum ObservationBuffering: Sendable, Hashable {
    /// Keeps every element: memory grows with a consumer that falls behind.
    ///
    /// ```swift
    /// counter.changes(\.count, buffering: .unbounded)
    /// ```
    case unbounded
    /// Keeps the newest `limit` elements, dropping older ones.
    ///
    /// ```swift
    /// counter.values(\.count, buffering: .bufferingNewest(1))   // the latest value
    /// ```
    case bufferingNewest(Int)
    /// Keeps the oldest `limit` elements, dropping newer ones.
    ///
    /// ```swift
    /// counter.changes(\.count, buffering: .bufferingOldest(100))
    /// ```
    case bufferingOldest(Int)
}
