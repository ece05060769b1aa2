import SafeObserveModel
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Model-based random testing: seeded sequences of every operation (observe
/// with every option combination and dedupe hits, the three removals, token
/// invalidation, mutation, the death of either side, and all of these again
/// from inside handlers) checked after every step against `ReferenceModel`.
/// Objects link to each other (cycles included), and half the observable key
/// paths are derived: a computed property, optional chains of depth two and
/// three, and a computed property whose branch reads through a link.
///
/// A failure prints its seed and a shrunk reproduction.
/// `SAFEOBSERVE_MODEL_SEQUENCES=N` runs N sequences per test instead of the
/// default (a quarter of it under a sanitizer); `SAFEOBSERVE_SOAK_SECONDS=S`
/// keeps drawing new seeds for S seconds.
@Suite("Model-based random sequences")
struct ModelBasedTests {
    @Test(arguments: [(length: 24, seeds: 0..<UInt64(1500)), (length: 120, seeds: 1_000_000..<1_000_250)])
    func randomSequencesMatchTheModel(length: Int, seeds: Range<UInt64>) {
        let count = ModelConfig.sequences(default: UInt64(seeds.count))
        let seeds = seeds.lowerBound..<(seeds.lowerBound + count)
        let (failure, seed) = ModelRunner.runSeeds(seeds, length: length)
        #expect(failure == nil, "seed \(seed ?? 0), length \(length):\n\(failure?.description ?? "")")
    }

    @Test func soak() {
        guard let seconds = ModelConfig.soakSeconds else { return }
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(seconds)
        var seed: UInt64 = 10_000_000
        var sequences = 0
        while clock.now < deadline {
            let (failure, failingSeed) = ModelRunner.runSeeds(seed..<(seed + 100), length: 16 + Int(seed % 200))
            #expect(failure == nil, "seed \(failingSeed ?? 0):\n\(failure?.description ?? "")")
            if failure != nil { return }
            seed += 100
            sequences += 100
        }
        print("model soak: \(sequences) sequences in \(seconds) s")
    }
}

enum ModelConfig {
    /// `SAFEOBSERVE_MODEL_SEQUENCES`, else `count` (a quarter under a sanitizer:
    /// the runs are single-threaded, the sanitizers mostly slow them down).
    static func sequences(default count: UInt64) -> UInt64 {
        environment("SAFEOBSERVE_MODEL_SEQUENCES").flatMap(UInt64.init)
            ?? (StressConfig.isSanitized ? count / 4 : count)
    }
    static var soakSeconds: Int? { environment("SAFEOBSERVE_SOAK_SECONDS").flatMap(Int.init) }
    private static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
