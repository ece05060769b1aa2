// Wall clock and allocations for every scenario, side by side with the peers.
//
//   cd Benchmarks && swift package benchmark

import Benchmark
import Scenarios

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal, .instructions],
        maxDuration: .seconds(1),
        maxIterations: 1_000
    )
    for scenario in Scenarios.all {
        // Each benchmark iteration runs the scenario's operation `scalingFactor` times.
        Benchmark(scenario.name, configuration: .init(scalingFactor: .kilo)) { benchmark in
            scenario.run(benchmark.scaledIterations.count)
        }
    }
}
