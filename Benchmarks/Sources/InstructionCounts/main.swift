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
        print("\(index)\t\(scenario.operationsPerIteration)\t\(scenario.operation)\t\(scenario.peer)")
    }
case "run":
    guard arguments.count == 4, let index = Int(arguments[2]), let iterations = Int(arguments[3]) else {
        fatalError("usage: InstructionCounts run <index> <iterations>")
    }
    Scenarios.all[index].run(iterations)
case "memory":
    func inUse() -> Int { Int(cmallocstats_bytes_in_use()) }
    let count = 10_000
    // Bytes per relation: one object, 10,000 listeners (listeners' own size excluded).
    do {
        let model = SafeModel()
        let sinks = (0..<count).map { _ in Sink() }
        model.safeObserve(\.value, by: sinks[0]) { _, _, _ in }.invalidate()
        let before = inUse()
        for sink in sinks {
            model.safeObserve(\.value, by: sink) { sink, _, change in sink.total &+= change.newValue! }
        }
        let after = inUse()
        print("bytes per relation (plain listeners)\t\(Double(after - before) / Double(count))")
    }
    do {
        let model = SafeModel()
        let sinks = (0..<count).map { _ in OptInSink() }
        model.safeObserve(\.value, by: sinks[0]) { _, _, _ in }
        let before = inUse()
        for sink in sinks.dropFirst() {
            model.safeObserve(\.value, by: sink) { sink, _, change in sink.total &+= change.newValue! }
        }
        let after = inUse()
        print("bytes per relation (SafeObserver listeners)\t\(Double(after - before) / Double(count - 1))")
    }
    do {
        // Bytes per observed-but-idle object: its first relation, then removed.
        let models = (0..<count).map { _ in SafeModel() }
        let sink = OptInSink()
        let before = inUse()
        for model in models { model.safeObserve(\.value, by: sink) { _, _, _ in }.invalidate() }
        let after = inUse()
        print("bytes per observed-but-idle object\t\(Double(after - before) / Double(count))")
    }
default:
    print("usage: InstructionCounts list | run <index> <iterations> | memory")
}
