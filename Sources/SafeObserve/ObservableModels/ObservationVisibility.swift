import Observation

// A `SafeObservable` class that also conforms to `Observable` reports the
// reads and writes of its `@Observed` properties to Observation, as an
// `@Observable` class does: `withObservationTracking`, `Observations` and
// SwiftUI see them. A class that does not conform pays nothing: the test is
// a static property of the conformance, which the accessors fold away.

/// What a `@Observed` property reports to Observation. An implementation
/// detail of ``SafeObservable``: don't use it.
public enum _ObservationEvent: Sendable {
    /// The property was read.
    case access
    /// The property is about to change.
    case willSet
    /// The property changed.
    case didSet
}

extension SafeObservable {
    /// Whether the class's `@Observed` properties report to Observation:
    /// `false` unless the class also conforms to `Observable`. Implemented
    /// by SafeObserve; don't implement it.
    @inlinable
    public static var _reportsToObservation: Bool { false }

    /// Reports `event` of the property at `keyPath` to `registrar`; nothing
    /// unless the class also conforms to `Observable`. Implemented by
    /// SafeObserve; don't implement or call it.
    @inlinable
    public func _report<Member>(
        _ event: _ObservationEvent, of keyPath: AnyKeyPath, as member: Member.Type,
        to registrar: ObservationRegistrar
    ) {}
}

extension SafeObservable where Self: Observable {
    /// `true`: the class conforms to `Observable`, so its `@Observed`
    /// properties report to Observation. Implemented by SafeObserve; don't
    /// implement it.
    @inlinable
    public static var _reportsToObservation: Bool { true }

    /// Reports `event` of the property at `keyPath` to `registrar`, as an
    /// `@Observable` class's accessors do. Implemented by SafeObserve; don't
    /// implement or call it.
    @inlinable
    public func _report<Member>(
        _ event: _ObservationEvent, of keyPath: AnyKeyPath, as member: Member.Type,
        to registrar: ObservationRegistrar
    ) {
        // unsafeDowncast: the `@Observed` accessors pass their property's
        // key path as declared (its channel's), a
        // `ReferenceWritableKeyPath<EnclosingSelf, Member>`, and call this
        // on an `EnclosingSelf`, which is `Self` here.
        let keyPath = unsafeDowncast(keyPath, to: KeyPath<Self, Member>.self)
        switch event {
        case .access: registrar.access(self, keyPath: keyPath)
        case .willSet: registrar.willSet(self, keyPath: keyPath)
        case .didSet: registrar.didSet(self, keyPath: keyPath)
        }
    }
}

/// The sentinel of a `@Observed` property of a class that reports to
/// Observation: it carries the property's Observation registrar, created
/// with it on the property's first read (a tracking must read a property
/// before anything can report its change to it) and released with it when
/// the object dies, which ends every tracking installed on it.
@usableFromInline
// @unchecked Sendable: both stored properties are immutable; `isSame` is a
// pure function of the two values it is given.
final class _ObservableSentinel: _Sentinel, @unchecked Sendable {
    @usableFromInline
    let registrar = ObservationRegistrar()

    /// Whether two values of the property (pointed to) are the same, as an
    /// `@Observable` class's setter decides whether to report: `==` for an
    /// `Equatable` type, `===` for a class; `nil` (every assignment is a
    /// change) otherwise.
    @usableFromInline
    let isSame: ((UnsafeRawPointer, UnsafeRawPointer) -> Bool)?

    /// Whether two values of the property are the same exactly when their
    /// bits are (an integer type or `Bool`): then the setter compares them
    /// inline, without calling ``isSame``.
    @usableFromInline
    let comparesBits: Bool

    init(object: AnyObject, keyPath: AnyKeyPath, sameness: _Sameness) {
        isSame = sameness.isSame
        comparesBits = sameness.comparesBits
        super.init(object: object, keyPath: keyPath)
    }

    /// Calls `body` with the sentinel at `address` (a sentinel field's
    /// bits) if it is an `_ObservableSentinel`, borrowed: its class is
    /// compared, no cast and no retain. The caller holds the object whose
    /// field holds the sentinel. Returns `absent` otherwise.
    @inlinable @inline(__always)
    static func withBorrowed<Result>(
        at address: UnsafeRawPointer, absent: Result, _ body: (_ObservableSentinel) -> Result
    ) -> Result {
        Unmanaged<_Sentinel>.fromOpaque(address)._withUnsafeGuaranteedRef { sentinel in
            guard type(of: sentinel) == _ObservableSentinel.self else { return absent }
            // unsafeDowncast: its class was just compared.
            return body(unsafeDowncast(sentinel, to: _ObservableSentinel.self))
        }
    }
}

extension Observed {
    /// Reports `event` to the registrar of the sentinel `sentinelBits`
    /// points to (borrowed: the caller holds `instance`), if it has one,
    /// naming the property with the key path its channel keeps (borrowed
    /// too: the sentinel holds the channel, the channel the key path), so
    /// that no accessor forms its key path to report.
    @inlinable @inline(__always)
    static func _report<EnclosingSelf: SafeObservable>(
        _ event: _ObservationEvent, of instance: EnclosingSelf, sentinelBits: UInt
    ) {
        guard let address = UnsafeRawPointer(bitPattern: sentinelBits) else { return }
        _ObservableSentinel.withBorrowed(at: address, absent: ()) { observable in
            Unmanaged.passUnretained(observable.channel.keyPath.unsafelyUnwrapped)._withUnsafeGuaranteedRef { keyPath in
                instance._report(event, of: keyPath, as: Value.self, to: observable.registrar)
            }
        }
    }

    /// Reports a read to the registrar of the sentinel `sentinelBits` points
    /// to (see ``_report(_:of:sentinelBits:)``): out of line, so that the
    /// getter stays small enough to inline.
    @inlinable @inline(never)
    static func _reportAccess<EnclosingSelf: SafeObservable>(of instance: EnclosingSelf, sentinelBits: UInt) {
        _report(.access, of: instance, sentinelBits: sentinelBits)
    }

    /// Whether assigning `newValue` reports a change to Observation, as an
    /// `@Observable` class's setter decides: unless it is the same value as
    /// the one stored (see ``_ObservableSentinel/isSame``). `nil` when the
    /// property has no registrar (it was never read, so nothing tracks it).
    @inlinable @inline(__always)
    static func _reportsChange<EnclosingSelf: SafeObservable>(
        of instance: EnclosingSelf, to newValue: Value,
        _ storageKeyPath: ReferenceWritableKeyPath<EnclosingSelf, Observed<Value>>, sentinelBits: UInt
    ) -> Bool {
        guard let address = UnsafeRawPointer(bitPattern: sentinelBits) else { return false }
        return _ObservableSentinel.withBorrowed(at: address, absent: false) { observable in
            if observable.comparesBits { return !_sameBits(instance[keyPath: storageKeyPath]._value, newValue) }
            guard let isSame = observable.isSame else { return true }
            let old = instance[keyPath: storageKeyPath]._value
            return !withUnsafePointer(to: old) { old in withUnsafePointer(to: newValue) { isSame(old, $0) } }
        }
    }

    /// How an `@Observable` class's setter compares the values of a
    /// property of type `Value` (see ``_ObservableSentinel/isSame``).
    static func _sameness() -> _Sameness {
        if _comparesBits(Value.self) { return _Sameness(isSame: nil, comparesBits: true) }
        if let equatable = Value.self as? any Equatable.Type {
            return _Sameness(isSame: _equality(of: equatable), comparesBits: false)
        }
        // A class, or `AnyObject` itself (whose metatype is not an
        // `AnyObject.Type`): the same instance is no change.
        if Value.self is AnyObject.Type || Value.self == AnyObject.self {
            return _Sameness(
                isSame: { a, b in
                    a.assumingMemoryBound(to: AnyObject.self).pointee
                        === b.assumingMemoryBound(to: AnyObject.self).pointee
                }, comparesBits: false)
        }
        return _Sameness(isSame: nil, comparesBits: false)
    }
}

/// How a property's setter decides that an assignment is no change (see
/// ``_ObservableSentinel``).
struct _Sameness {
    var isSame: ((UnsafeRawPointer, UnsafeRawPointer) -> Bool)?
    var comparesBits: Bool
}

/// Whether `==` on `type` is the equality of the values' bits: the standard
/// integer types and `Bool` (not floating point: `-0.0 == 0.0`, `.nan != .nan`).
func _comparesBits(_ type: Any.Type) -> Bool {
    type == Int.self || type == UInt.self || type == Bool.self || type == Int64.self || type == UInt64.self
        || type == Int32.self || type == UInt32.self || type == Int16.self || type == UInt16.self
        || type == Int8.self || type == UInt8.self
}

/// Whether `a` and `b` have the same bits; for the types of
/// ``_comparesBits(_:)`` only (1, 2, 4 or 8 bytes).
@inlinable @inline(__always)
func _sameBits<Value>(_ a: Value, _ b: Value) -> Bool {
    withUnsafePointer(to: a) { a in
        withUnsafePointer(to: b) { b in
            let (a, b) = (UnsafeRawPointer(a), UnsafeRawPointer(b))
            switch MemoryLayout<Value>.size {
            case 8: return a.loadUnaligned(as: UInt64.self) == b.loadUnaligned(as: UInt64.self)
            case 4: return a.loadUnaligned(as: UInt32.self) == b.loadUnaligned(as: UInt32.self)
            case 2: return a.loadUnaligned(as: UInt16.self) == b.loadUnaligned(as: UInt16.self)
            case 1: return a.load(as: UInt8.self) == b.load(as: UInt8.self)
            default: return false
            }
        }
    }
}

/// `==` on two pointed-to values of type `Equated`.
private func _equality<Equated: Equatable>(
    of _: Equated.Type
) -> (UnsafeRawPointer, UnsafeRawPointer) -> Bool {
    { a, b in a.assumingMemoryBound(to: Equated.self).pointee == b.assumingMemoryBound(to: Equated.self).pointee }
}
