import Synchronization

/// How many ``SafeObservationRegistrar/withMutation(of:keyPath:_:)`` calls
/// are under way, counted in 64 stripes by the object's address: an
/// `.initial` read while its stripe is not zero may have seen a store whose
/// change is numbered after the read (see
/// ``_Channel/readAndNumberForInitial(_:)``).
///
/// A mutation counts itself from before its store until its change was
/// numbered and delivered. Objects that share a stripe only make a read
/// look unsure more often, which costs that relation a value comparison.
@usableFromInline
final class _MutationGauge: Sendable {
    @usableFromInline let count = Atomic<Int>(0)
    /// Keeps each stripe's count on a cache line of its own (an object of
    /// 72 bytes), so that threads changing objects of other stripes do not
    /// contend.
    private let padding: (Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0)

    private init() {}

    @usableFromInline static let stripes: [_MutationGauge] = (0..<64).map { _ in _MutationGauge() }

    /// The stripe of the object at `address`.
    @inlinable
    static func stripe(for address: UnsafeMutableRawPointer) -> _MutationGauge {
        stripes[Int(truncatingIfNeeded: UInt(bitPattern: address) &>> 4) & 63]
    }

    /// A mutation of an object of this stripe begins (before its store):
    /// a read that sees the store sees this count, being ordered after the
    /// store by the caller's synchronization of the property.
    @inlinable
    func begin() { count.add(1, ordering: .relaxed) }

    /// That mutation ended, its change numbered: a read that then loads
    /// zero is ordered after every numbering of the stores it saw.
    @inlinable
    func end() { count.subtract(1, ordering: .releasing) }

    /// Whether a mutation of an object of this stripe is under way.
    @inlinable
    var isBusy: Bool { isBusy(besides: 0) }

    /// Whether more than `known` mutations of objects of this stripe are
    /// under way (`known`: those the caller is inside of).
    @inlinable
    func isBusy(besides known: Int) -> Bool { count.load(ordering: .acquiring) > known }
}
