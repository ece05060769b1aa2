/// The values of one key path of one object, as an asynchronous sequence
/// (made by ``SafeObservable/values(_:buffering:)``, or by
/// `values(_:buffering:)` on an `@Observable` model): the current value,
/// then each new value.
///
/// ```swift
/// for await count in counter.values(\.count) { print(count) }
/// ```
public struct ObservedValues<Root: AnyObject, Value: Sendable>: AsyncSequence {
    /// One value of the key path.
    ///
    /// ```swift
    /// for await count in counter.values(\.count) { print(count) }
    /// ```
    public typealias Element = Value
    /// The sequence never throws.
    ///
    /// ```swift
    /// for await count in counter.values(\.count) { }   // no `try`
    /// ```
    public typealias Failure = Never

    @usableFromInline let changes: ObservedChanges<Root, Value>

    /// Observes the key path until the iterator is cancelled, dropped, or
    /// the object dies.
    ///
    /// ```swift
    /// var values = counter.values(\.count).makeAsyncIterator()
    /// let current = await values.next(isolation: #isolation)
    /// ```
    @inlinable
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: changes.makeAsyncIterator())
    }

    /// Yields the values; see ``ObservedValues``.
    ///
    /// ```swift
    /// var iterator = counter.values(\.count).makeAsyncIterator()
    /// while let count = await iterator.next(isolation: #isolation) { print(count) }
    /// ```
    ///
    /// `for await` calls ``next(isolation:)``, which awaits in the caller's
    /// isolation; ``next()`` compiles only from nonisolated code.
    public struct AsyncIterator: AsyncIteratorProtocol {
        @usableFromInline var base: ObservedChanges<Root, Value>.AsyncIterator

        @usableFromInline
        init(base: ObservedChanges<Root, Value>.AsyncIterator) {
            self.base = base
        }

        /// The next value, or `nil` once the sequence finished, awaited off
        /// any actor.
        ///
        /// ```swift
        /// nonisolated func next(of iterator: inout ObservedValues<Counter, Int>.AsyncIterator) async -> Int? {
        ///     await iterator.next()
        /// }
        /// ```
        ///
        /// It compiles only from nonisolated code (the iterator is not
        /// `Sendable`); from an actor, call ``next(isolation:)``.
        @inlinable
        public mutating func next() async -> Value? {
            // Unwrapped: every element carries `.new` or `.initial`.
            await base.next().map { $0.newValue.unsafelyUnwrapped }
        }

        /// The next value, or `nil` once the sequence finished, awaited in
        /// the caller's isolation.
        ///
        /// ```swift
        /// let count = await iterator.next(isolation: #isolation)
        /// ```
        @inlinable
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Value? {
            await base.next(isolation: actor).map { $0.newValue.unsafelyUnwrapped }
        }
    }
}
