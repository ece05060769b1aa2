// Runs one scenario for callgrind, or reports memory per relation.
//
//   InstructionCounts list
//   InstructionCounts run <index> <iterations>
//   InstructionCounts wall <index> <iterations>   (asynchronous scenarios)
//   InstructionCounts memory
//
// A scenario that does not finish (a wait that overruns BENCHMARK_WAIT_LIMIT
// seconds, or a run that overruns BENCHMARK_TIME_LIMIT) prints
// "InstructionCounts: FAILED: <scenario>: <reason>" on stderr and exits with
// status 3.
//
// instructions.sh drives it; run that instead.

import CMallocStats
import Dispatch
import Foundation
import SafeObserve
import Scenarios

let arguments = CommandLine.arguments
switch arguments.dropFirst().first {
case "list":
    for (index, scenario) in Scenarios.all.enumerated() {
        print(
            "\(index)\t\(scenario.operationsPerIteration)\t\(scenario.operation)\t\(scenario.peer)\t\(scenario.collect)"
        )
    }
    // Asynchronous scenarios: counted over the whole process ("*").
    for (offset, scenario) in Scenarios.concurrent.enumerated() {
        print("\(Scenarios.all.count + offset)\t1\t\(scenario.operation)\t\(scenario.peer)\t*")
    }
    // Synchronous scenarios added since, numbered after the others so that
    // every earlier row keeps its number.
    for (offset, scenario) in Scenarios.later.enumerated() {
        print(
            "\(Scenarios.laterStart + offset)\t\(scenario.operationsPerIteration)\t\(scenario.operation)\t"
                + "\(scenario.peer)\t\(scenario.collect)"
        )
    }
case "run", "wall":
    guard arguments.count == 4, let index = Int(arguments[2]), let iterations = Int(arguments[3]) else {
        fatalError("usage: InstructionCounts run|wall <index> <iterations>")
    }
    // Bounded (issue 31, item 19): past BENCHMARK_TIME_LIMIT seconds the
    // scenario is reported failed and the process exits with status 3; each
    // wait of an asynchronous scenario is bounded by BENCHMARK_WAIT_LIMIT.
    if index < Scenarios.all.count {
        Watchdog.arm(scenario: index)
        Scenarios.all[index].run(iterations)
    } else if index >= Scenarios.laterStart {
        Watchdog.arm(scenario: index)
        Scenarios.later[index - Scenarios.laterStart].run(iterations)
    } else {
        // The main actor runs once the main thread runs the main run loop
        // (which valgrind supports; dispatchMain() crashes it).
        let scenario = Scenarios.concurrent[index - Scenarios.all.count]
        Watchdog.arm(scenario: index)
        let timed = arguments[1] == "wall"
        Task.detached {
            if timed {
                // The best of five runs: wall time on shared machines drifts.
                var best = Duration.seconds(1_000)
                for _ in 0..<5 {
                    let start = ContinuousClock.now
                    await scenario.run(iterations)
                    best = min(best, ContinuousClock.now - start)
                }
                let nanoseconds = Double(best.components.attoseconds) / 1e9 + Double(best.components.seconds) * 1e9
                print("\(scenario.operation) — \(scenario.peer)\t\(nanoseconds / Double(iterations)) ns/op")
            } else {
                await scenario.run(iterations)
            }
            exit(0)
        }
        RunLoop.main.run()
    }
case "memory":
    // One case per process (`memory 0`, `memory 1`, ...): frees left over from
    // one case must not land in another's measurement.
    measureMemory(arguments.count > 2 ? Int(arguments[2]) : nil)
default:
    print("usage: InstructionCounts list | run <index> <iterations> | memory")
}

/// Bytes per relation. Nonisolated, as registrations from nonisolated code
/// are (this file's top-level code is on the main actor, which would make
/// every relation an isolated one); case 3 measures those on purpose.
func measureMemory(_ memoryCase: Int?) {
    func inUse() -> Int { Int(cmallocstats_bytes_in_use()) }
    let count = 10_000
    switch memoryCase {
    case 0:
        // A relation between a listener and an object that already have their
        // proxy and sentinel: one listener observing 10,000 objects.
        let models = (0..<count).map { _ in SafeModel() }
        let sink = OptInSink()
        for model in models { model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate() }
        let before = inUse()
        for model in models {
            model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
        }
        print(
            "bytes per relation (SafeObserver listener, objects already observed)\t\(Double(inUse() - before) / Double(count))"
        )
        blackHole((models, sink))
    case 1:
        // Everything a relation brings when each listener is new (plain class).
        let model = SafeModel()
        let sinks = (0..<count).map { _ in Sink() }
        model.safeObserve(\.value, by: sinks[0]) { _, _, _ in }.invalidate()
        let before = inUse()
        for sink in sinks {
            model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
        }
        print("bytes per relation (each listener new, plain class)\t\(Double(inUse() - before) / Double(count))")
        blackHole((model, sinks))
    case 2:
        // An object whose property was observed once and is now idle.
        let models = (0..<count).map { _ in SafeModel() }
        let sink = OptInSink()
        model: do {
            let before = inUse()
            for model in models { model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate() }
            print("bytes per observed-but-idle object\t\(Double(inUse() - before) / Double(count))")
        }
        blackHole((models, sink))
    case 3:
        // A handler registered from the main actor (it hops when the object
        // is changed elsewhere): the relation carries its hop.
        MainActor.assumeIsolated {
            let models = (0..<count).map { _ in SafeModel() }
            let sink = OptInSink()
            for model in models { model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate() }
            let before = inUse()
            for model in models {
                model.safeObserve(\.value, by: sink) { sink, _, change in sink.add(change.newValue!) }
            }
            print(
                "bytes per relation (main-actor handler, SafeObserver listener, objects already observed)\t\(Double(inUse() - before) / Double(count))"
            )
            blackHole((models, sink))
        }
    case 4:
        // `@Observable` models (issue 32), one relation each, one listener:
        // what a first relation on a model brings (its sentinel, tracker
        // and Observation tracking).
        let models = (0..<count).map { _ in ObservableModel() }
        let sink = OptInSink()
        let before = inUse()
        for model in models {
            model.safeObserve(\.value, by: sink, isolation: nil) { sink, _, change in sink.add(change.newValue!) }
        }
        print(
            "bytes per relation (@Observable model, first relation on each model)\t\(Double(inUse() - before) / Double(count))"
        )
        blackHole((models, sink))
    case 5:
        // Another relation on an `@Observable` model already observed from
        // the same isolation: the relation and its tracker entry.
        let model = ObservableModel()
        let sinks = (0..<count).map { _ in OptInSink() }
        model.safeObserve(\.value, by: sinks[0], isolation: nil) { _, _, _ in }
        for sink in sinks { model.safeObserve(\.value, by: sink, isolation: nil) { _, _, _ in }.invalidate() }
        let before = inUse()
        for sink in sinks.dropFirst() {
            model.safeObserve(\.value, by: sink, isolation: nil) { sink, _, change in sink.add(change.newValue!) }
        }
        print(
            "bytes per relation (@Observable model already observed, SafeObserver listeners)\t\(Double(inUse() - before) / Double(count - 1))"
        )
        blackHole((model, sinks))
    default:
        for index in 0..<6 { print("usage: InstructionCounts memory \(index)") }
    }
}
