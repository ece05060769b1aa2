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
    /// Keeps the newest `limit` elements, dropping older ones. A limit of 0
    /// (or below) keeps none: an element reaches only a consumer already
    /// waiting for it, as with `AsyncStream`.
    ///
    /// ```swift
    /// counter.values(\.count, buffering: .bufferingNewest(1))   // the latest value
    /// ```
    case bufferingNewest(Int)
    /// Keeps the oldest `limit` elements, dropping newer ones. A limit of 0
    /// (or below) keeps none, as above.
    ///
    /// ```swift
    /// counter.changes(\.count, buffering: .bufferingOldest(100))
    /// ```
    case bufferingOldest(Int)
}
