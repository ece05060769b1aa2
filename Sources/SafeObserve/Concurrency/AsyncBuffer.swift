/// The buffer between a relation's handler (the producer) and the task that
/// iterates a sequence of changes or notifications (the consumer): what
/// `AsyncStream` does for these sequences, without its cost.
///
/// `AsyncStream`'s storage is compiled in the standard library, unspecialized:
/// each yield and each `next()` looks up the generic metadata of its
/// internal types, about a third of the cost of an element handed to a
/// waiting consumer. This buffer is specialized where the sequence is
/// iterated (its paths are inlinable), and keeps one waiting consumer.
///
/// Semantics follow `AsyncStream`: elements are read in the order they were
/// yielded, under the sequence's ``ObservationBuffering``; after ``finish()``
/// what is buffered is still read, then `nil`; cancelling the task waiting
/// in ``next(isolation:)`` finishes the sequence, and that `next` returns
/// `nil`. The termination handler runs once, after the lock is released.
@usableFromInline
// @unchecked Sendable: `state` is reached only under its lock, and the
// continuation it files is resumed exactly once, by whichever transition
// takes it out.
final class _AsyncBuffer<Element: Sendable>: @unchecked Sendable {
    @usableFromInline let state: _Mutex<_AsyncBufferStateMachine<Element>>

    @usableFromInline
    init(buffering: ObservationBuffering) {
        state = _Mutex(_AsyncBufferStateMachine(buffering: buffering))
    }

    /// Buffers `element` for the consumer, or hands it to a waiting one.
    ///
    /// - Complexity: O(1) amortized.
    @inlinable
    func yield(_ element: Element) {
        switch state.withLock({ $0.yield(element) }) {
        case .none(let dropped):
            _ = dropped  // released here, unlocked: a value's deinit may be user code
        case .resume(let waiter, let element):
            waiter.resume(returning: element)
        }
    }

    /// Ends the sequence: a waiting consumer gets `nil`, later yields are
    /// dropped, and the termination handler runs. What is buffered is still
    /// read, unless `discardingBuffered` (then it is released at once).
    /// Idempotent.
    @inlinable
    func finish(discardingBuffered: Bool = false) {
        let (waiter, onTermination, discarded) = state.withLock { $0.finish(discardingBuffered: discardingBuffered) }
        waiter?.resume(returning: nil)
        onTermination?()
        _ = discarded  // released here, unlocked
    }

    /// Runs `handler` once the sequence finishes (at once if it has).
    @usableFromInline
    func onTermination(_ handler: @escaping @Sendable () -> Void) {
        state.withLock { $0.setOnTermination(handler) }?()
    }

    /// The next element, or `nil` once the sequence finished, awaited in
    /// `actor`'s isolation.
    ///
    /// - Complexity: O(1) amortized.
    @inlinable
    func next(isolation actor: isolated (any Actor)?) async -> Element? {
        if case .return(let element) = state.withLock({ $0.next() }) { return element }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation(isolation: actor) { (continuation: UnsafeContinuation<Element?, Never>) in
                if let resumed = state.withLock({ $0.suspend(continuation) }) {
                    continuation.resume(returning: resumed)
                }
            }
        } onCancel: {
            finish()
        }
    }
}
