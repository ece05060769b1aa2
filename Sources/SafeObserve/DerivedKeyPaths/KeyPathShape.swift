/// Tells a chain of `@Observed` links (`\.b.c.value`) from any other derived
/// key path, so that a change of its last link is delivered without tracking
/// the evaluation again.
///
/// A key path is such a chain when it *equals* the key paths of the
/// properties its evaluation read, appended in that order, each on its own
/// channel. Key-path equality compares component identities, so a computed
/// property of the user's (`\.b.total`), a subscript, or a link skipped by a
/// `nil` never matches, and the derivation keeps re-tracking every change
/// (always correct, only slower). Optional chaining (`\.b?.c.value`) cannot
/// be rebuilt by appending, so it keeps re-tracking too.
///
/// Why a chain's last link needs no tracking: the evaluation reads the links
/// in order, so which objects it reaches before the last one does not depend
/// on the last one's value, and nothing is read after it. Its change changes
/// the value, never the dependencies.
enum _KeyPathShape {
    /// The longest chain recognised; a key path reading more keeps
    /// re-tracking (and is never compared, so that a computed property
    /// reading thousands of properties pays nothing for this).
    static let maximumLinks = 32

    /// Whether `keyPath` is exactly the chain of properties `accesses` read,
    /// in order, each on its own channel.
    ///
    /// Call it outside locks: `==` on key paths with subscript arguments
    /// compares the arguments.
    ///
    /// - Complexity: O(1) for more than ``maximumLinks`` reads (a computed
    ///   property over many objects, never a chain one would spell);
    ///   otherwise O(*d*²) in the *d* ≤ 32 reads.
    static func isChain(_ keyPath: AnyKeyPath, readAs accesses: [_Access]) -> Bool {
        guard let last = accesses.last, accesses.count >= 2, accesses.count <= maximumLinks else { return false }
        for index in accesses.indices.dropFirst()
        where accesses[..<index].contains(where: { $0.channel === accesses[index].channel }) {
            return false
        }
        // Appended from the end: `a.appending(b.appending(c))` is what a
        // literal `\A.b.c.value` equals (appending from the front builds
        // a buffer that `==` tells apart).
        var composed = last.wrappedKeyPath
        for access in accesses.dropLast().reversed() {
            guard let longer = access.wrappedKeyPath.appending(path: composed) else { return false }
            composed = longer
        }
        return composed == keyPath
    }
}
