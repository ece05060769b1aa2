// swift-tools-version: 6.1
import PackageDescription

// A separate package so that the SafeObserve library keeps zero dependencies.
//
//   swift package benchmark                      # wall clock + allocations, every peer
//   ./instructions.sh                            # callgrind instructions per operation (the gate)
let package = Package(
    name: "SafeObserveBenchmarks",
    platforms: [.macOS(.v15), .iOS(.v18)],
    dependencies: [
        // A symlink to the repository root, so the identity is "safeobserve" whatever the clone is called.
        .package(path: "SafeObserve"),
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/OpenCombine/OpenCombine.git", from: "0.14.0"),
    ],
    targets: [
        // The scenarios, shared by both executables.
        .target(
            name: "Scenarios",
            dependencies: [
                .product(name: "SafeObserve", package: "SafeObserve"),
                .product(name: "OpenCombine", package: "OpenCombine"),
                .product(name: "OpenCombineDispatch", package: "OpenCombine"),
                "CCallgrind",
            ],
            path: "Sources/Scenarios",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(
            name: "SafeObserveBenchmarks",
            dependencies: [
                "Scenarios",
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/SafeObserveBenchmarks",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // Callgrind's client request that brackets a timed region.
        .target(name: "CCallgrind", path: "Sources/CCallgrind"),
        // Bytes in use, from glibc's mallinfo2 (for bytes per relation).
        .target(name: "CMallocStats", path: "Sources/CMallocStats"),
        // No harness: runs one scenario N times, for callgrind (instructions.sh).
        .executableTarget(
            name: "InstructionCounts",
            dependencies: ["Scenarios", "CMallocStats"],
            path: "Sources/InstructionCounts",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
