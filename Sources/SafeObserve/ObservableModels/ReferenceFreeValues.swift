// Which observed values can be kept from one change to the next without
// keeping anything of the user's alive (see `_ObservableTracker.keepsValues`).

/// A type whose values hold no reference but to storage of their own, which
/// runs no user code and refers to nothing else: keeping one keeps no model or
/// listener alive.
protocol _ReferenceFreeValue {}

extension String: _ReferenceFreeValue {}
extension Substring: _ReferenceFreeValue {}
extension Character: _ReferenceFreeValue {}

/// A container whose values hold references only to storage of their own and
/// to values of ``_containedTypes``.
protocol _ReferenceFreeContainer {
    static var _containedTypes: [Any.Type] { get }
}

extension Optional: _ReferenceFreeContainer {
    static var _containedTypes: [Any.Type] { [Wrapped.self] }
}

extension Array: _ReferenceFreeContainer {
    static var _containedTypes: [Any.Type] { [Element.self] }
}

extension ContiguousArray: _ReferenceFreeContainer {
    static var _containedTypes: [Any.Type] { [Element.self] }
}

extension ArraySlice: _ReferenceFreeContainer {
    static var _containedTypes: [Any.Type] { [Element.self] }
}

extension Set: _ReferenceFreeContainer {
    static var _containedTypes: [Any.Type] { [Element.self] }
}

extension Dictionary: _ReferenceFreeContainer {
    static var _containedTypes: [Any.Type] { [Key.self, Value.self] }
}

/// Whether values of `type` hold no reference that can reach a user's object:
/// a trivial type, `String`, `Substring`, `Character`, or an optional, array,
/// set or dictionary of such types. Anything else (a class, an existential, a
/// struct or enum with such a field) may. Checked at run time, once per
/// tracker: about a thousand instructions for a nested container.
///
/// (On Apple platforms a `String` may wrap an `NSString`; SafeObserve takes it
/// for the framework's own storage, as Swift does.)
func _holdsNoUserReferences(_ type: Any.Type) -> Bool {
    func isTrivial<T>(_: T.Type) -> Bool { _isPOD(T.self) }
    if _openExistential(type, do: isTrivial) || type is any _ReferenceFreeValue.Type { return true }
    guard let container = type as? any _ReferenceFreeContainer.Type else { return false }
    return container._containedTypes.allSatisfy(_holdsNoUserReferences)
}
