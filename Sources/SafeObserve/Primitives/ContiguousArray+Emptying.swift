extension ContiguousArray {
    /// Removes every element, keeping the storage if `keepingCapacity`.
    ///
    /// A queue emptied after each delivery usually holds one element, which
    /// `removeLast()` drops for about a third of what
    /// `removeAll(keepingCapacity:)` costs (a generic range replacement).
    ///
    /// - Complexity: O(*n*).
    @inlinable
    mutating func _empty(keepingCapacity: Bool) {
        if keepingCapacity, count == 1 {
            removeLast()
        } else {
            removeAll(keepingCapacity: keepingCapacity)
        }
    }
}
