import Synchronization

/// The relation's handler: yields each change to `buffer`. It holds a
/// finisher, released with the handler whenever the relation ends (the
/// object died, the iterator was cancelled or dropped), which finishes the
/// sequence. Not generic over the root type, whose metatype a `@Sendable`
/// closure must not capture.
///
/// Once the task consuming the sequence is cancelled (as `consumer` saw it
/// last), the first change to come finishes the stream instead, which ends
/// the relation: a task cancelled while its loop body awaits something else
/// calls no `next()` that would notice, and must not have changes buffered
/// for it meanwhile.
@inlinable
func _yielding<Value: Sendable>(
    to buffer: _AsyncBuffer<ObservedChange<Value>>, consumer: _StreamConsumer
) -> @Sendable (ObservedChange<Value>) -> Void {
    let finisher = _StreamFinisher(buffer)
    return { change in
        if consumer.isCancelled {
            finisher.buffer.finish()
        } else {
            finisher.buffer.yield(change)
        }
    }
}

/// Ends the relation of `token` when the sequence finishes (its consuming
/// task is cancelled, or the relation ended). Not generic over the root
/// type, whose metatype a `@Sendable` closure must not capture.
@inlinable
func _endRelation<Element: Sendable>(_ token: ObservationToken, whenFinished buffer: _AsyncBuffer<Element>) {
    buffer.onTermination { token.invalidate() }
}

/// The listener of a sequence's relation, owned by its iterator. A
/// ``SafeObserver``, so the relation ends inside its `deinit` when an
/// iterator is dropped without being cancelled.
@usableFromInline
final class _StreamRelay: SafeObserver {
    @usableFromInline let observerLifetime = ObserverLifetime()
    /// The task iterating; the relation's handler holds it too (not the
    /// relay, whose death ends the relation).
    @usableFromInline let consumer = _StreamConsumer()

    @usableFromInline init() {}
}

/// The task consuming a sequence, recorded by its iterator's `next()`, so
/// that the relation's handler can tell it was cancelled.
@usableFromInline
final class _StreamConsumer: Sendable {
    /// The task; an `UnsafeCurrentTask` holds a strong reference to it, so
    /// it stays valid here, and its cancellation flag is safe to read from
    /// any thread (what `Task.isCancelled` reads). Boxed: `UnsafeCurrentTask`
    /// is resilient, so an optional of it in a lock's generic storage is
    /// copied through runtime metadata look-ups, about 1,400 instructions
    /// per `next()`; the box is an ordinary class reference.
    private let task = _Mutex<Recorded?>(nil)

    /// The recorded task's `hashValue` (its identity), or 0: what `record()`
    /// compares with, unlocked. Written under `task`'s lock; read only by
    /// the consuming task (the iterator is not `Sendable`), which is the
    /// only one that records.
    private let recordedIdentity = Atomic<Int>(0)

    /// The recorded task.
    private final class Recorded {
        let task: UnsafeCurrentTask

        init(_ task: UnsafeCurrentTask) {
            self.task = task
        }

        /// Read in place (a copy of a resilient value costs a look-up).
        var isCancelled: Bool { task.isCancelled }
    }

    @usableFromInline init() {}

    /// Records the calling task, if it is not the one recorded already.
    ///
    /// - Complexity: O(1): one look-up of the current task, and a lock only
    ///   when the task changed. The task is compared by identity, never
    ///   copied (a copy of the resilient `UnsafeCurrentTask` is what cost
    ///   most here).
    @usableFromInline
    func record() {
        let identity = withUnsafeCurrentTask { $0?.hashValue }
        guard let identity, identity != recordedIdentity.load(ordering: .relaxed) else { return }
        withUnsafeCurrentTask { current in
            guard let current else { return }
            let replaced = task.withLock { task -> Recorded? in
                defer {
                    task = Recorded(current)
                    recordedIdentity.store(identity, ordering: .relaxed)
                }
                return task
            }
            // Released here, unlocked: the last reference to a finished
            // task releases what it captured.
            _ = replaced
        }
    }

    /// Whether the recorded task was cancelled.
    @usableFromInline
    var isCancelled: Bool {
        task.withLock { $0?.isCancelled ?? false }
    }
}

/// Finishes a sequence's buffer when it is released, which happens when the
/// relation that captured it in its handler ends, however it ends.
@usableFromInline
final class _StreamFinisher<Element: Sendable>: Sendable {
    @usableFromInline let buffer: _AsyncBuffer<Element>

    @usableFromInline
    init(_ buffer: _AsyncBuffer<Element>) {
        self.buffer = buffer
    }

    deinit {
        buffer.finish()
    }
}
