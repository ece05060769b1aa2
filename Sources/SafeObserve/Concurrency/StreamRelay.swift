/// The relation's handler: yields each change to `continuation`. It holds
/// a finisher, released with the handler whenever the relation ends (the
/// object died, the iterator was cancelled or dropped), which finishes the
/// stream. Not generic over the root type, whose metatype a `@Sendable`
/// closure must not capture.
@inlinable
func _yielding<Value: Sendable>(
    to continuation: AsyncStream<ObservedChange<Value>>.Continuation
) -> @Sendable (ObservedChange<Value>) -> Void {
    let finisher = _StreamFinisher(continuation)
    return { change in finisher.continuation.yield(change) }
}

/// Ends the relation of `token` when the stream terminates (its consuming
/// task is cancelled, or it finishes). Not generic over the root type, whose
/// metatype a `@Sendable` closure must not capture.
@inlinable
func _endRelation<Element: Sendable>(
    _ token: ObservationToken, whenTerminated continuation: AsyncStream<Element>.Continuation
) {
    continuation.onTermination = { _ in token.invalidate() }
}

/// The listener of a sequence's relation, owned by its iterator. A
/// ``SafeObserver``, so the relation ends inside its `deinit` when an
/// iterator is dropped without being cancelled.
@usableFromInline
final class _StreamRelay: SafeObserver {
    @usableFromInline let observerLifetime = ObserverLifetime()

    @usableFromInline init() {}
}

/// Finishes a sequence's stream when it is released, which happens when the
/// relation that captured it in its handler ends, however it ends.
@usableFromInline
final class _StreamFinisher<Element: Sendable>: Sendable {
    @usableFromInline let continuation: AsyncStream<Element>.Continuation

    @usableFromInline
    init(_ continuation: AsyncStream<Element>.Continuation) {
        self.continuation = continuation
    }

    deinit {
        continuation.finish()
    }
}
