// Issue 14: changes made off the main actor and delivered on it, and values
// handed to an asynchronous sequence's consumer. These need a running main
// actor and several threads, so they are asynchronous scenarios: callgrind
// counts the whole process (every thread), and the differential of
// instructions.sh (a run of 3n minus a run of n) cancels what is not per
// operation. `InstructionCounts wall <index>` reports wall time.

import Dispatch
import Foundation
@_spi(SwiftUI) import Observation
import OpenCombine
import OpenCombineDispatch
import SafeObserve
import Synchronization

/// A measurable operation that needs concurrency.
public struct AsyncScenario: Sendable {
    /// The row of the report.
    public let operation: String
    /// Who performs it.
    public let peer: String
    /// Runs `iterations` operations (set-up included: instructions.sh's
    /// differential cancels it).
    public let run: @Sendable (_ iterations: Int) async -> Void

    init(operation: String, peer: String, run: @escaping @Sendable (_ iterations: Int) async -> Void) {
        self.operation = operation
        self.peer = peer
        self.run = run
    }
}

/// A model changed on one thread and observed on another.
final class SharedSafeModel: SafeObservable, @unchecked Sendable {
    // @unchecked Sendable: one task changes it; deliveries only read the change.
    @Observed var value = 0
}

/// The same model with the Observation module.
@Observable
// @unchecked Sendable: one task changes it; the consumer only reads it.
final class SharedObservableModel: @unchecked Sendable {
    var value = 0
}

/// Hands control back to a waiting producer: the consumer calls `resume()`
/// when it has the value it waited for. The same mechanism for every peer.
///
/// Every wait is bounded (issue 31, item 19): `Watchdog` fails the scenario
/// when one wait lasts longer than `Watchdog.waitLimit`, naming what it
/// awaited. A `resume()` that finds nobody waiting does nothing, so a wait
/// whose resume came too early, or never, is reported instead of hanging.
final class Handoff: Sendable {
    private struct State {
        var continuation: UnsafeContinuation<Void, Never>?
        /// Waits begun, so that the watchdog tells one long wait from many.
        var waits = 0
    }

    private let state = Mutex(State())

    /// What the producer waits for, for failure reports.
    let awaited: String

    init(awaiting awaited: String) {
        self.awaited = awaited
        Watchdog.watch(self)
    }

    /// Suspends until `resume()`; `body` runs once the continuation is stored.
    func wait(_ body: () -> Void) async {
        await withUnsafeContinuation { continuation in
            state.withLock {
                $0.continuation = continuation
                $0.waits &+= 1
            }
            body()
        }
    }

    func resume() {
        state.withLock { $0.continuation.take() }?.resume()
    }

    /// The number of the wait under way, `nil` when nobody waits.
    var currentWait: Int? {
        state.withLock { $0.continuation == nil ? nil : $0.waits }
    }
}

/// A main-actor counter of deliveries that resumes the producer once it
/// reached its target.
@MainActor
final class MainActorSink {
    private var count = 0
    private var total = 0
    private var target = Int.max
    let handoff: Handoff

    nonisolated init(awaiting awaited: String) {
        handoff = Handoff(awaiting: awaited)
    }

    func add(_ value: Int) {
        total &+= value
        count += 1
        if count >= target { handoff.resume() }
    }

    /// Waits until `expected` deliveries arrived in all (burst mode).
    func expect(_ expected: Int) { target = expected }
}

extension Scenarios {
    /// The asynchronous scenarios, numbered after `all` by `InstructionCounts`.
    public static let concurrent: [AsyncScenario] = oneAtATime + burst + sequences + observableModels

    // One change in flight: the producer waits for each delivery.
    static let oneAtATime: [AsyncScenario] = [
        AsyncScenario(
            operation: "change off the main actor, delivered on it (one at a time)",
            peer: "Task { @MainActor } per change (floor)"
        ) { n in
            let sink = MainActorSink(awaiting: "the main-actor task of each change")
            for i in 0..<n {
                await sink.handoff.wait {
                    Task { @MainActor in
                        sink.add(i)
                        sink.handoff.resume()
                    }
                }
            }
        },
        AsyncScenario(
            operation: "change off the main actor, delivered on it (one at a time)",
            peer: "SafeObserve, main-actor handler"
        ) { n in
            let model = SharedSafeModel()
            let sink = MainActorSink(awaiting: "the delivery of each change")
            let token = await MainActor.run {
                model.safeObserve(\.value, by: sink) { sink, _, change in
                    sink.add(change.newValue!)
                    sink.handoff.resume()
                }
            }
            for i in 0..<n { await sink.handoff.wait { model.value = i } }
            token.invalidate()
        },
        AsyncScenario(
            operation: "change off the main actor, delivered on it (one at a time)",
            peer: "Observation Observations on the main actor"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "Observations to yield each change")
            let consumer = await sink.handoff.waitForStart {
                Task { @MainActor in
                    for await value in Observations({ model.value }) {
                        sink.add(value)
                        sink.handoff.resume()
                    }
                }
            }
            for i in 1...n { await sink.handoff.wait { model.value = i } }
            consumer.cancel()
        },
        AsyncScenario(
            operation: "change off the main actor, delivered on it (one at a time)",
            peer: "OpenCombine receive(on: main queue)"
        ) { n in
            let subject = PassthroughSubject<Int, Never>()
            let sink = MainActorSink(awaiting: "the delivery of each change")
            let cancellable = subject.receive(on: DispatchQueue.main.ocombine).sink { value in
                MainActor.assumeIsolated {
                    sink.add(value)
                    sink.handoff.resume()
                }
            }
            for i in 0..<n { await sink.handoff.wait { subject.send(i) } }
            cancellable.cancel()
        },
    ]

    // n changes made at once; the producer waits for the last delivery.
    static let burst: [AsyncScenario] = [
        AsyncScenario(
            operation: "change off the main actor, delivered on it (burst)",
            peer: "Task { @MainActor } per change (floor)"
        ) { n in
            let sink = MainActorSink(awaiting: "all \(n) main-actor tasks")
            await MainActor.run { sink.expect(n) }
            await sink.handoff.wait {
                for i in 0..<n { Task { @MainActor in sink.add(i) } }
            }
        },
        AsyncScenario(
            operation: "change off the main actor, delivered on it (burst)", peer: "SafeObserve, main-actor handler"
        ) { n in
            let model = SharedSafeModel()
            let sink = MainActorSink(awaiting: "\(n) deliveries, one per change (none may be merged or lost)")
            let token = await MainActor.run {
                sink.expect(n)
                return model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            }
            await sink.handoff.wait {
                for i in 0..<n { model.value = i }
            }
            token.invalidate()
        },
        AsyncScenario(
            operation: "change off the main actor, delivered on it (burst)",
            peer: "SafeObserve, main-actor handler, .coalesced"
        ) { n in
            let model = SharedSafeModel()
            let sink = MainActorSink(awaiting: "the delivery of the last change, \(n)")
            let token = await MainActor.run {
                model.safeObserve(\.value, by: sink, options: [.new, .coalesced]) { sink, _, change in
                    sink.add(change.newValue!)
                    if change.newValue! == n { sink.handoff.resume() }
                }
            }
            await sink.handoff.wait {
                for i in 1...n { model.value = i }
            }
            token.invalidate()
        },
        AsyncScenario(
            operation: "change off the main actor, delivered on it (burst)",
            peer: "Observation Observations on the main actor"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "Observations to yield the last value, \(n)")
            let consumer = await sink.handoff.waitForStart {
                Task { @MainActor in
                    for await value in Observations({ model.value }) {
                        sink.add(value)
                        if value == 0 || value == n { sink.handoff.resume() }
                    }
                }
            }
            await sink.handoff.wait {
                for i in 1...n { model.value = i }
            }
            consumer.cancel()
        },
        AsyncScenario(
            operation: "change off the main actor, delivered on it (burst)", peer: "OpenCombine receive(on: main queue)"
        ) { n in
            let subject = PassthroughSubject<Int, Never>()
            let sink = MainActorSink(awaiting: "\(n) deliveries, one per change")
            await MainActor.run { sink.expect(n) }
            let cancellable = subject.receive(on: DispatchQueue.main.ocombine).sink { value in
                MainActor.assumeIsolated { sink.add(value) }
            }
            await sink.handoff.wait {
                for i in 0..<n { subject.send(i) }
            }
            cancellable.cancel()
        },
    ]

    // One element in flight, consumed by a task: yield (or change) + next.
    static let sequences: [AsyncScenario] = [
        AsyncScenario(operation: "element of an async sequence, yield + next", peer: "AsyncStream (floor)") { n in
            let (stream, continuation) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .bufferingNewest(1))
            let handoff = Handoff(awaiting: "the consumer of each element")
            let consumer = Task.detached {
                for await _ in stream { handoff.resume() }
            }
            for i in 0..<n { await handoff.wait { continuation.yield(i) } }
            continuation.finish()
            await consumer.value
        },
        AsyncScenario(operation: "element of an async sequence, yield + next", peer: "SafeObserve values()") { n in
            let model = SharedSafeModel()
            let handoff = Handoff(awaiting: "values() to yield each change")
            let consumer = await handoff.waitForStart {
                Task.detached {
                    for await _ in model.values(\.value) { handoff.resume() }
                }
            }
            for i in 1...n { await handoff.wait { model.value = i } }
            consumer.cancel()
        },
        AsyncScenario(operation: "element of an async sequence, yield + next", peer: "Observation Observations") { n in
            let model = SharedObservableModel()
            let handoff = Handoff(awaiting: "Observations to yield each change")
            let consumer = await handoff.waitForStart {
                Task.detached {
                    for await _ in Observations({ model.value }) { handoff.resume() }
                }
            }
            for i in 1...n { await handoff.wait { model.value = i } }
            consumer.cancel()
        },
    ]
}

extension Scenarios {
    // An `@Observable` model changed off the main actor, told to main-actor
    // code (issue 32): SafeObserve beside a hand-written
    // `withObservationTracking` (after the store) that hops to the main actor
    // (the floor) and `Observations`.
    static let observableModels: [AsyncScenario] = [
        AsyncScenario(
            operation: "@Observable change off the main actor, told on it (one at a time)",
            peer: "withObservationTracking(didSet:) + Task { @MainActor } (floor)"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "the tracking's task of each change")
            await MainActor.run { trackOnMainActor(model, sink, resumingAt: nil) }
            for i in 1...n { await sink.handoff.wait { model.value = i } }
        },
        AsyncScenario(
            operation: "@Observable change off the main actor, told on it (one at a time)",
            peer: "SafeObserve, main-actor handler"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "the delivery of each change")
            let token = await MainActor.run {
                model.safeObserve(\.value, by: sink) { sink, _, change in
                    sink.add(change.newValue!)
                    sink.handoff.resume()
                }
            }
            for i in 1...n { await sink.handoff.wait { model.value = i } }
            token.invalidate()
        },
        AsyncScenario(
            operation: "@Observable change off the main actor, told on it (one at a time)",
            peer: "Observation Observations on the main actor"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "Observations to yield each change")
            let consumer = await sink.handoff.waitForStart {
                Task { @MainActor in
                    for await value in Observations({ model.value }) {
                        sink.add(value)
                        sink.handoff.resume()
                    }
                }
            }
            for i in 1...n { await sink.handoff.wait { model.value = i } }
            consumer.cancel()
        },
        AsyncScenario(
            operation: "@Observable change off the main actor, told on it (burst)",
            peer: "withObservationTracking(didSet:) + Task { @MainActor } (floor)"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "the tracking's task to see the last value, \(n)")
            await MainActor.run { trackOnMainActor(model, sink, resumingAt: n) }
            await sink.handoff.wait {
                for i in 1...n { model.value = i }
            }
        },
        AsyncScenario(
            operation: "@Observable change off the main actor, told on it (burst)",
            peer: "SafeObserve, main-actor handler"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "the delivery of the last value, \(n)")
            let token = await MainActor.run {
                model.safeObserve(\.value, by: sink) { sink, _, change in
                    sink.add(change.newValue!)
                    if change.newValue! == n { sink.handoff.resume() }
                }
            }
            await sink.handoff.wait {
                for i in 1...n { model.value = i }
            }
            token.invalidate()
        },
        AsyncScenario(
            operation: "@Observable change off the main actor, told on it (burst)",
            peer: "Observation Observations on the main actor"
        ) { n in
            let model = SharedObservableModel()
            let sink = MainActorSink(awaiting: "Observations to yield the last value, \(n)")
            let consumer = await sink.handoff.waitForStart {
                Task { @MainActor in
                    for await value in Observations({ model.value }) {
                        sink.add(value)
                        if value == 0 || value == n { sink.handoff.resume() }
                    }
                }
            }
            await sink.handoff.wait {
                for i in 1...n { model.value = i }
            }
            consumer.cancel()
        },
    ]
}

/// The floor for an `@Observable` model: what code without SafeObserve
/// writes at best. One continuous after-the-store tracking of `model.value`
/// (Observation's SPI, whose interface the Linux toolchain ships); each
/// report hops to the main actor with a task that reads the value and tells
/// `sink`, which resumes the producer at each value (`resumingAt` `nil`) or
/// at `resumingAt`.
@MainActor
func trackOnMainActor(_ model: SharedObservableModel, _ sink: MainActorSink, resumingAt last: Int?) {
    let first = withObservationTracking {
        model.value
    } didSet: { _ in
        Task { @MainActor in
            let value = model.value
            sink.add(value)
            if last == nil || value == last { sink.handoff.resume() }
        }
    }
    sink.add(first)
}

extension Handoff {
    /// Starts a consumer with `start` and waits for its first element (the
    /// current value), so that the producer's changes start after it.
    func waitForStart<T>(_ start: () -> T) async -> T {
        var started: T?
        await wait { started = start() }
        return started!
    }
}
