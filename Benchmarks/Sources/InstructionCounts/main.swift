// Runs one scenario for callgrind, or reports memory per relation.
//
//   InstructionCounts list
//   InstructionCounts run <index> <iterations>
//   InstructionCounts memory
//
// instructions.sh drives it; run that instead.

import CMallocStats
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
case "run":
    guard arguments.count == 4, let index = Int(arguments[2]), let iterations = Int(arguments[3]) else {
        fatalError("usage: InstructionCounts run <index> <iterations>")
    }
    Scenarios.all[index].run(iterations)
case "memory":
    // One case per process (`memory 0`, `memory 1`, ...): frees left over from
    // one case must not land in another's measurement.
    func inUse() -> Int { Int(cmallocstats_bytes_in_use()) }
    let count = 10_000
    switch arguments.count > 2 ? Int(arguments[2]) : nil {
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
    default:
        for index in 0..<3 { print("usage: InstructionCounts memory \(index)") }
    }
default:
    print("usage: InstructionCounts list | run <index> <iterations> | memory")
}
