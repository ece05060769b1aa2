/// The elements an ``_AsyncBuffer`` holds for its consumer, the consumer's
/// waiting `next()`, and whether the sequence finished. Each transition
/// returns what to do after unlocking: resume the consumer, release an
/// element the buffering policy dropped, or call the termination handler.
///
/// ```
///   ┌──────────── yield ◀──────────┐
///   ▼                              │
///   buffering ── next(), empty ──▶ waiting (one consumer) ── yield: resume it ──▶ buffering
///      │                              │
///      │ finish()                     │ finish() / the consumer's task cancelled: resume it with nil
///      ▼                              ▼
///   finished: what is buffered is still read, then `nil`; yields are dropped
/// ```
@usableFromInline
struct _AsyncBufferStateMachine<Element: Sendable> {
    /// Buffered elements from `head` on; read slots are `nil` (released at
    /// once, not when the array is next compacted).
    @usableFromInline var elements: ContiguousArray<Element?> = []
    @usableFromInline var head = 0
    /// At most this many elements are buffered.
    @usableFromInline let limit: Int
    /// Whether a full buffer drops its oldest element for a new one
    /// (`.bufferingNewest`), or the new one (`.bufferingOldest`).
    @usableFromInline let dropsOldest: Bool
    /// The consumer's `next()`, suspended while nothing is buffered.
    @usableFromInline var waiter: UnsafeContinuation<Element?, Never>?
    @usableFromInline var isFinished = false
    /// Called once, unlocked, when the sequence finishes.
    @usableFromInline var onTermination: (@Sendable () -> Void)?

    @usableFromInline
    init(buffering: ObservationBuffering) {
        // A limit of 0 (or below) keeps nothing: an element reaches a
        // consumer that is waiting, or no one, as with `AsyncStream`.
        switch buffering {
        case .unbounded: (limit, dropsOldest) = (.max, false)
        case .bufferingNewest(let limit): (self.limit, dropsOldest) = (Swift.max(limit, 0), true)
        case .bufferingOldest(let limit): (self.limit, dropsOldest) = (Swift.max(limit, 0), false)
        }
    }

    @inlinable
    var count: Int { elements.count - head }

    @usableFromInline
    enum YieldAction {
        /// Nothing to do but release `dropped` (the policy's victim, if any).
        case none(dropped: Element?)
        /// Resume the waiting consumer with the element.
        case resume(UnsafeContinuation<Element?, Never>, Element)
    }

    /// The producer yields `element`.
    @inlinable
    mutating func yield(_ element: Element) -> YieldAction {
        if isFinished { return .none(dropped: element) }
        if let waiter = waiter.take() { return .resume(waiter, element) }
        guard count >= limit else {
            elements.append(element)
            return .none(dropped: nil)
        }
        guard dropsOldest, limit > 0 else { return .none(dropped: element) }
        let oldest = popFirst()
        elements.append(element)
        return .none(dropped: oldest)
    }

    /// The oldest buffered element, removed. Compacts the storage once the
    /// read slots are at least half of it (O(1) amortized per element).
    @inlinable
    mutating func popFirst() -> Element? {
        guard head < elements.count else { return nil }
        let first = elements[head].take()
        head += 1
        if head == elements.count {
            elements._empty(keepingCapacity: true)
            head = 0
        } else if head >= 16, head * 2 >= elements.count {
            elements.removeSubrange(0..<head)
            head = 0
        }
        return first
    }

    @usableFromInline
    enum NextAction {
        /// Return this element (or `nil`: the sequence finished).
        case `return`(Element?)
        /// Nothing is buffered: suspend until a yield or the end.
        case suspend
    }

    /// The consumer asks for the next element, before suspending.
    @inlinable
    mutating func next() -> NextAction {
        if let first = popFirst() { return .return(first) }
        return isFinished ? .return(nil) : .suspend
    }

    /// The consumer suspended with `continuation`: the element (or `nil`)
    /// to resume it with at once, if one came or the sequence finished
    /// meanwhile; otherwise it waits. A second consumer waiting at once (a
    /// copied iterator) is told `nil`, never left suspended.
    @inlinable
    mutating func suspend(_ continuation: UnsafeContinuation<Element?, Never>) -> Element?? {
        if let first = popFirst() { return .some(first) }
        if isFinished || waiter != nil { return .some(nil) }
        waiter = continuation
        return nil
    }

    /// The sequence finishes (the relation ended, or the consumer's task was
    /// cancelled): the waiting consumer to resume with `nil`, the
    /// termination handler to call, and (if `discardingBuffered`) the
    /// elements no one will read, all handled unlocked. Idempotent.
    @inlinable
    mutating func finish(discardingBuffered: Bool) -> (
        waiter: UnsafeContinuation<Element?, Never>?, onTermination: (@Sendable () -> Void)?,
        discarded: ContiguousArray<Element?>
    ) {
        var discarded: ContiguousArray<Element?> = []
        if discardingBuffered {
            swap(&discarded, &elements)
            head = 0
        }
        guard !isFinished else { return (nil, nil, discarded) }
        isFinished = true
        return (waiter.take(), onTermination.take(), discarded)
    }

    /// Files the termination handler; returns it to call at once (unlocked)
    /// if the sequence finished already.
    @inlinable
    mutating func setOnTermination(_ handler: @escaping @Sendable () -> Void) -> (@Sendable () -> Void)? {
        guard !isFinished else { return handler }
        onTermination = handler
        return nil
    }
}
