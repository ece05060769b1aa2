// swift-tools-version: 6.1
import PackageDescription

// One settings array for every target: Swift 6 language mode (complete
// concurrency checking) everywhere.
let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    // Internal consistency checks (`SafeObservation._checkInvariants`), as
    // swift-collections' COLLECTIONS_INTERNAL_CHECKS: on in debug builds, so
    // the tests run them; compiled away in release builds.
    .define("SAFEOBSERVE_INTERNAL_CHECKS", .when(configuration: .debug)),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "SafeObserve",
    // `Synchronization.Mutex` and `Atomic` set the floor on Apple platforms.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "SafeObserve", targets: ["SafeObserve"]),
        // Self-cleaning observers of Foundation's `NotificationCenter`, kept
        // out of the core library so that it stays free of Foundation.
        .library(name: "SafeObserveFoundation", targets: ["SafeObserveFoundation"]),
    ],
    // The library depends on nothing beyond the Swift toolchain.
    dependencies: [],
    targets: [
        // The runtime entry points the liveness probes call, declared in C so
        // that they are linked directly (static stdlib and static executables
        // export no runtime symbols to `dlsym`). Declarations only.
        .target(name: "CSafeObserveRuntime"),
        .target(
            name: "SafeObserve",
            dependencies: ["CSafeObserveRuntime"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "SafeObserveFoundation",
            dependencies: ["SafeObserve"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "SafeObserveDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/SafeObserveDemo",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ControllerDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/ControllerDemo",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ConcurrencyDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/ConcurrencyDemo",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "NotificationsDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/NotificationsDemo",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "GraphDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/GraphDemo",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ChainsDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/ChainsDemo",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ObservableDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/ObservableDemo",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "KVOMigrationDemo",
            dependencies: ["SafeObserve"],
            path: "Examples/KVOMigrationDemo",
            swiftSettings: swiftSettings
        ),
        // Test support, not a product: the operation generator, the reference
        // model and the runner shared by the tests and the fuzzer.
        .target(
            name: "SafeObserveModel",
            dependencies: ["SafeObserve"],
            path: "Tests/SafeObserveModel",
            swiftSettings: swiftSettings
        ),
        // A libFuzzer target when built by Fuzz/run.sh (`-DFUZZING`); otherwise
        // a replayer of corpus files, so `swift build` builds it everywhere.
        .executableTarget(
            name: "SafeObserveFuzz",
            dependencies: ["SafeObserveModel"],
            path: "Fuzz/SafeObserveFuzz",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SafeObserveTests",
            dependencies: ["SafeObserve", "SafeObserveModel"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SafeObserveFoundationTests",
            dependencies: ["SafeObserveFoundation"],
            swiftSettings: swiftSettings
        ),
        // Every Swift example of README.md and the DocC articles, compiled as
        // a reader would paste it (with only the scaffolding the prose
        // implies) and, where it runs, run with assertions of what the prose
        // says it does. `.ci/doc-examples` checks that each example in the
        // documents is here.
        .testTarget(
            name: "DocumentationExamples",
            dependencies: ["SafeObserve", "SafeObserveFoundation"],
            swiftSettings: swiftSettings
        ),
    ]
)
