// Timing for the bridge's scaling tests, as Tests/SafeObserveTests/Support/Timing.swift
// (another test target): a late operation against an early one in one
// process, a ratio, never an absolute time.

import Foundation

/// The fastest of `runs` timings of `body`: other work on a shared machine
/// only ever adds time.
func fastest(of runs: Int, _ body: () -> Void) -> Duration {
    let clock = ContinuousClock()
    var best = Duration.seconds(1_000_000)
    for _ in 0..<runs { best = min(best, clock.measure(body)) }
    return best
}

/// `duration` in milliseconds or microseconds, for failure messages.
func describe(_ duration: Duration) -> String {
    let microseconds = duration / .microseconds(1)
    return microseconds >= 1_000 ? "\(Int(microseconds / 1_000)) ms" : "\((microseconds * 10).rounded() / 10) µs"
}

/// Whether a sanitizer runtime is linked in (its own costs would be
/// measured, not the bridge's).
let isSanitized = dlsym(nil, "__tsan_init") != nil || dlsym(nil, "__asan_init") != nil

/// The element-wise smallest of the ratios `measure` returns, measured
/// again (up to `attempts` times in all) while any is at or above `bound`.
/// A cost that really grows exceeds the bound on every attempt; a burst of
/// other work on a shared machine rarely lasts through three.
func smallestRatios(attempts: Int = 3, below bound: Double, _ measure: () -> [Double]) -> [Double] {
    var smallest = measure()
    for _ in 1..<attempts where smallest.contains(where: { $0 >= bound }) {
        smallest = zip(smallest, measure()).map { min($0, $1) }
    }
    return smallest
}
