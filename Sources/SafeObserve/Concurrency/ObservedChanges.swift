extension SafeObservable {
    /// The changes of a key path, as an asynchronous sequence.
    ///
    /// ```swift
    /// for await change in counter.changes(\.count, options: [.old, .new]) {
    ///     print(change.oldValue!, "→", change.newValue!)
    /// }
    /// ```
    ///
    /// Each iterator observes the key path from the moment it is made until
    /// the sequence ends: single, dotted, optional and computed key paths
    /// work as with ``safeObserve(_:by:options:isolation:changeHandler:)``, and so do
    /// the options (`.initial` yields the current value first).
    ///
    /// Lifetimes:
    /// - Neither the sequence nor its iterator keeps the object alive; the
    ///   sequence finishes when the object dies.
    /// - Cancelling the consuming task ends the relation at once while it
    ///   awaits the next element; while its loop body awaits something else,
    ///   or before its first `next()`, at the first change after the
    ///   cancellation (or when the body returns to the loop). Nothing made
    ///   after the cancellation is buffered or delivered. The consuming task
    ///   is the one that made the iterator, then the last that called
    ///   `next()`: an iterator that successive tasks advance ends when the
    ///   last of them is cancelled, even after it finished.
    /// - An iterator dropped without being cancelled ends its relation when
    ///   it is deinitialized.
    ///
    /// Changes are yielded on the thread that made them and buffered until
    /// read, as `buffering` says (every change by default).
    ///
    /// - Note: Making an iterator registers an observation, which reads the
    ///   property: it needs the same synchronization as any other read of it.
    ///
    /// - Parameters:
    ///   - keyPath: The key path to observe, as for `safeObserve`.
    ///   - options: What each element carries; `[.new]` by default.
    ///   - buffering: What is kept for a consumer that falls behind.
    /// - Returns: A sequence of ``ObservedChange`` values.
    /// - Complexity: O(1) per change, plus the key path's own cost.
    public func changes<Value: Sendable>(
        _ keyPath: KeyPath<Self, Value>, options: ObservationOptions = .new,
        buffering: ObservationBuffering = .unbounded
    ) -> ObservedChanges<Self, Value> {
        ObservedChanges(
            root: self, keyPath: keyPath, options: options, buffering: buffering,
            register: { root, keyPath, relay, options, deliver, initial in
                let (token, deliversInitial) = root._register(
                    keyPath, by: relay, listenerType: _StreamRelay.self, options: options, deliver: deliver)
                if deliversInitial {
                    let current = root[keyPath: keyPath]
                    // Reading ran user code (a computed property), which may have unobserved.
                    if token.isActive { initial(ObservedChange(newValue: current, oldValue: nil, isInitial: true)) }
                }
                return token
            })
    }

    /// The values of a key path, as an asynchronous sequence: the current
    /// value first, then each new value.
    ///
    /// ```swift
    /// for await count in counter.values(\.count) {
    ///     label.text = "\(count)"
    /// }
    /// ```
    ///
    /// A consumer that falls behind sees the latest value by default (older
    /// unread values are dropped), which is what a view showing the value
    /// needs; pass `.unbounded` to see every value. The lifetimes are those
    /// of ``changes(_:options:buffering:)``.
    ///
    /// - Parameters:
    ///   - keyPath: The key path to observe, as for `safeObserve`.
    ///   - buffering: What is kept for a consumer that falls behind.
    /// - Returns: A sequence of the key path's values.
    /// - Complexity: O(1) per change, plus the key path's own cost.
    public func values<Value: Sendable>(
        _ keyPath: KeyPath<Self, Value>, buffering: ObservationBuffering = .bufferingNewest(1)
    ) -> ObservedValues<Self, Value> {
        ObservedValues(changes: changes(keyPath, options: [.initial, .new], buffering: buffering))
    }
}

/// The changes of one key path of one object, as an asynchronous sequence
/// (made by ``SafeObservable/changes(_:options:buffering:)``, or by
/// `changes(_:options:buffering:)` on an `@Observable` model).
///
/// ```swift
/// for await change in counter.changes(\.count) { print(change.newValue!) }
/// ```
public struct ObservedChanges<Root: AnyObject, Value: Sendable>: AsyncSequence {
    /// One change, as a `safeObserve` handler would receive it.
    ///
    /// ```swift
    /// for await change in counter.changes(\.count) { print(change.newValue!) }
    /// ```
    public typealias Element = ObservedChange<Value>
    /// The sequence never throws.
    ///
    /// ```swift
    /// for await change in counter.changes(\.count) { }   // no `try`
    /// ```
    public typealias Failure = Never

    /// Never retained: iterating does not keep the object alive.
    @usableFromInline weak var root: Root?
    @usableFromInline let keyPath: KeyPath<Root, Value>
    @usableFromInline let options: ObservationOptions
    @usableFromInline let buffering: ObservationBuffering
    /// Registers an iterator's relation, and yields `.initial` through its
    /// last argument: a `SafeObservable`'s or an `@Observable` model's way.
    @usableFromInline let register: _Register

    @usableFromInline
    typealias _Register = (
        _ root: Root, _ keyPath: KeyPath<Root, Value>, _ relay: _StreamRelay, _ options: ObservationOptions,
        _ deliver: @escaping _Deliver, _ initial: @escaping @Sendable (ObservedChange<Value>) -> Void
    ) -> ObservationToken

    @usableFromInline
    init(
        root: Root, keyPath: KeyPath<Root, Value>, options: ObservationOptions, buffering: ObservationBuffering,
        register: @escaping _Register
    ) {
        self.root = root
        self.keyPath = keyPath
        self.options = options
        self.buffering = buffering
        self.register = register
    }

    /// Observes the key path until the iterator is cancelled, dropped, or
    /// the object dies.
    ///
    /// ```swift
    /// var changes = counter.changes(\.count).makeAsyncIterator()
    /// let first = await changes.next(isolation: #isolation)
    /// ```
    @inlinable
    public func makeAsyncIterator() -> AsyncIterator {
        // Inlinable: the handler and the element type are specialized in the
        // caller's module, as `safeObserve`'s are.
        let buffer = _AsyncBuffer<Element>(buffering: buffering)
        let relay = _StreamRelay()
        // The task making the iterator (a `for await` loop's) consumes it
        // until another calls `next()`: cancelled before its first `next()`,
        // it is told nothing made after the cancellation.
        relay.consumer.record()
        guard let root else {
            buffer.finish()
            return AsyncIterator(buffer: buffer, relay: relay)
        }
        let token = register(
            root, keyPath, relay, options, _makeDeliver(options, _yielding(to: buffer, consumer: relay.consumer))
        ) { buffer.yield($0) }
        _endRelation(token, whenFinished: buffer)
        if !token.isActive { buffer.finish() }
        return AsyncIterator(buffer: buffer, relay: relay)
    }

    /// Yields the changes; see ``ObservedChanges``.
    ///
    /// ```swift
    /// var iterator = counter.changes(\.count).makeAsyncIterator()
    /// while let change = await iterator.next(isolation: #isolation) { print(change.newValue!) }
    /// ```
    ///
    /// `for await` calls ``next(isolation:)``, which awaits in the caller's
    /// isolation; ``next()`` compiles only from nonisolated code.
    public struct AsyncIterator: AsyncIteratorProtocol {
        @usableFromInline let buffer: _AsyncBuffer<Element>
        /// The listener of the relation: it ends when the iterator dies.
        @usableFromInline let relay: _StreamRelay

        @usableFromInline
        init(buffer: _AsyncBuffer<Element>, relay: _StreamRelay) {
            self.buffer = buffer
            self.relay = relay
        }

        /// The next change, or `nil` once the sequence finished, awaited off
        /// any actor.
        ///
        /// ```swift
        /// nonisolated func next(of iterator: inout ObservedChanges<Counter, Int>.AsyncIterator) async
        ///     -> ObservedChange<Int>?
        /// {
        ///     await iterator.next()
        /// }
        /// ```
        ///
        /// It compiles only from nonisolated code (the iterator is not
        /// `Sendable`); from an actor, call ``next(isolation:)``.
        @inlinable
        public mutating func next() async -> Element? {
            relay.consumer.record()
            return await buffer.next(isolation: nil as (any Actor)?)
        }

        /// The next change, or `nil` once the sequence finished, awaited in
        /// the caller's isolation.
        ///
        /// ```swift
        /// let change = await iterator.next(isolation: #isolation)
        /// ```
        @inlinable
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            relay.consumer.record()
            return await buffer.next(isolation: actor)
        }
    }
}
