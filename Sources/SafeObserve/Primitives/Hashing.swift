/// Fibonacci hashing of an address-like word, for any word width: multiplies
/// by 2^w/φ (rounded to odd) and keeps the top `bits` bits of the product,
/// where the multiplication mixed every input bit.
///
/// SafeObserve's tables hash object and type identities with it (their low
/// bits are alignment and carry nothing; callers drop them first). Written
/// once for `UInt64` and `UInt32` so that 32-bit targets (watchOS arm64_32)
/// get the same quality, and so that their formula is tested on 64-bit hosts.
///
/// ```swift
/// let slot = _fibonacciHash(UInt(bitPattern: ObjectIdentifier(type)) &>> 4, bits: 6)   // 0..<64
/// ```
///
/// - Precondition: `0 < bits < Word.bitWidth`.
@inline(__always)
func _fibonacciHash<Word: FixedWidthInteger & UnsignedInteger>(_ word: Word, bits: Int) -> Int {
    let multiplier: Word =
        Word.bitWidth == 64
        ? Word(truncatingIfNeeded: 0x9E37_79B9_7F4A_7C15 as UInt64)
        : Word(truncatingIfNeeded: 0x9E37_79B9 as UInt32)
    return Int(truncatingIfNeeded: (word &* multiplier) &>> (Word.bitWidth - bits))
}
