/// Wraps a typed handler for storage in a channel.
///
/// The casts hold by construction: a relation stores exactly this listener,
/// only the observed object's own storage emits on its channel, and the
/// change pointer is always an `ObservedChange<Value>` of that property.
@inlinable
func _makeDeliver<Listener: AnyObject, Root: AnyObject, Value>(
    _ options: ObservationOptions,
    _ handler: @escaping @Sendable (Listener, Root, ObservedChange<Value>) -> Void
) -> _Deliver {
    { listener, root, change, phase, _ in
        handler(
            unsafeDowncast(listener, to: Listener.self),
            unsafeDowncast(root, to: Root.self),
            _observedChange(options, change, phase, Value.self)
        )
    }
}

/// Wraps the handler of a nonisolated registration, called on the thread
/// that made the change.
@inlinable
func _makeDeliver<Listener: AnyObject, Root: AnyObject, Value>(
    _ options: ObservationOptions,
    unisolated handler: @escaping (Listener, Root, ObservedChange<Value>) -> Void
) -> _Deliver {
    // nonisolated(unsafe): a handler registered from nonisolated code runs
    // where its object is changed, as it would inline; see "Threading".
    nonisolated(unsafe) let handler = handler
    return { listener, root, change, phase, _ in
        handler(
            unsafeDowncast(listener, to: Listener.self),
            unsafeDowncast(root, to: Root.self),
            _observedChange(options, change, phase, Value.self)
        )
    }
}

/// ``_makeDeliver(_:unisolated:)`` for a handler that takes the object and
/// the change only (a ``KeyValueObservation``'s): no forwarding closure.
@inlinable
func _makeDeliver<Root: AnyObject, Value>(
    _ options: ObservationOptions,
    unisolatedObjectHandler handler: @escaping (Root, ObservedChange<Value>) -> Void
) -> _Deliver {
    // nonisolated(unsafe): a handler registered from nonisolated code runs
    // where its object is changed, as it would inline; see "Threading".
    nonisolated(unsafe) let handler = handler
    return { _, root, change, phase, _ in
        handler(unsafeDowncast(root, to: Root.self), _observedChange(options, change, phase, Value.self))
    }
}

/// Wraps the handler of an isolated registration, which `hop` holds: called
/// directly on its actor, queued on `hop` from anywhere else. The thunk
/// captures the hop alone, which is then its context, with no forwarder.
@inlinable
func _makeDeliver<Listener: AnyObject, Root: AnyObject, Value>(hopping hop: _Hop<Listener, Root, Value>) -> _Deliver {
    { listener, root, change, phase, sequence in hop.deliver(listener, root, change, phase, sequence) }
}

/// A delivery thunk for a handler that needs neither the listener nor the
/// object (asynchronous sequences): not generic over the root type.
@inlinable
func _makeDeliver<Value>(
    _ options: ObservationOptions, _ handler: @escaping @Sendable (ObservedChange<Value>) -> Void
) -> _Deliver {
    { _, _, change, phase, _ in handler(_observedChange(options, change, phase, Value.self)) }
}

/// What a relation with `options` receives of the full change `change`
/// points to (an `ObservedChange<Value>` carrying both values).
@inlinable @inline(__always)
func _observedChange<Value>(
    _ options: ObservationOptions, _ change: UnsafeRawPointer, _ phase: _Phase, _: Value.Type
) -> ObservedChange<Value> {
    let isPrior = phase == .prior
    let full = change.assumingMemoryBound(to: ObservedChange<Value>.self)
    return ObservedChange(
        newValue: isPrior || !options.contains(.new) ? nil : full.pointee.newValue,
        oldValue: options.contains(.old) ? full.pointee.oldValue : nil,
        isPrior: isPrior
    )
}
