// Issue 15: NotificationHub against NotificationCenter and OpenCombine's
// PassthroughSubject, on the same operations.

import Foundation
import OpenCombine
import SafeObserve

extension NotificationName where Payload == Int {
    /// The name the hub rows post.
    static let benchmark = NotificationName("SafeObserveBenchmarks.hub")
}

/// A typed message: Foundation's `NotificationCenter.MainActorMessage`,
/// delivered synchronously when posted on the main actor.
struct BenchmarkMessage: NotificationCenter.MainActorMessage {
    typealias Subject = Sink
    let value: Int
}

extension Scenarios {
    static let hubName = NotificationName<Int>.benchmark
    static let centerName = Notification.Name("SafeObserveBenchmarks.center")

    static let notifications: [Scenario] = [
        Scenario(operation: "post to 1 observer", peer: "SafeObserve NotificationHub", operationsPerIteration: 1) { n in
            let hub = NotificationHub()
            let sink = Sink()
            hub.observe(hubName, by: sink, isolation: nil) { sink, notification in sink.add(notification.payload) }
            measure(n) { n in for i in 0..<n { hub.post(hubName, payload: i) } }
            blackHole((hub, sink))
        },
        Scenario(operation: "post to 1 observer", peer: "NotificationCenter (block)", operationsPerIteration: 1) { n in
            let center = NotificationCenter()
            let sink = Sink()
            let observer = center.addObserver(forName: centerName, object: nil, queue: nil) { _ in sink.add(1) }
            measure(n) { n in for _ in 0..<n { center.post(name: centerName, object: nil) } }
            center.removeObserver(observer)
            blackHole(sink)
        },
        Scenario(operation: "post to 1 observer", peer: "NotificationCenter (typed message)", operationsPerIteration: 1)
        { n in
            MainActor.assumeIsolated {
                let center = NotificationCenter()
                let sink = Sink()
                let token = center.addObserver(for: BenchmarkMessage.self) { @MainActor message in
                    sink.add(message.value)
                }
                measure(n) { n in for i in 0..<n { center.post(BenchmarkMessage(value: i)) } }
                center.removeObserver(token)
                blackHole(sink)
            }
        },
        Scenario(operation: "post to 1 observer", peer: "OpenCombine PassthroughSubject", operationsPerIteration: 1) {
            n in
            let subject = PassthroughSubject<Int, Never>()
            let sink = Sink()
            let cancellable = subject.sink { sink.add($0) }
            measure(n) { n in for i in 0..<n { subject.send(i) } }
            cancellable.cancel()
            blackHole(sink)
        },
        Scenario(operation: "post to 100 observers", peer: "SafeObserve NotificationHub", operationsPerIteration: 100) {
            n in
            let hub = NotificationHub()
            let sinks = (0..<100).map { _ in Sink() }
            for sink in sinks {
                hub.observe(hubName, by: sink, isolation: nil) { sink, notification in sink.add(notification.payload) }
            }
            measure(n) { n in for i in 0..<n { hub.post(hubName, payload: i) } }
            blackHole((hub, sinks))
        },
        Scenario(operation: "post to 100 observers", peer: "NotificationCenter (block)", operationsPerIteration: 100) {
            n in
            let center = NotificationCenter()
            let sink = Sink()
            let observers = (0..<100).map { _ in
                center.addObserver(forName: centerName, object: nil, queue: nil) { _ in sink.add(1) }
            }
            measure(n) { n in for _ in 0..<n { center.post(name: centerName, object: nil) } }
            for observer in observers { center.removeObserver(observer) }
            blackHole(sink)
        },
        Scenario(
            operation: "post to 100 observers", peer: "NotificationCenter (typed message)", operationsPerIteration: 100
        ) { n in
            MainActor.assumeIsolated {
                let center = NotificationCenter()
                let sink = Sink()
                let tokens = (0..<100).map { _ in
                    center.addObserver(for: BenchmarkMessage.self) { @MainActor message in sink.add(message.value) }
                }
                measure(n) { n in for i in 0..<n { center.post(BenchmarkMessage(value: i)) } }
                for token in tokens { center.removeObserver(token) }
                blackHole(sink)
            }
        },
        Scenario(
            operation: "post to 100 observers", peer: "OpenCombine PassthroughSubject", operationsPerIteration: 100
        ) { n in
            let subject = PassthroughSubject<Int, Never>()
            let sink = Sink()
            let cancellables = (0..<100).map { _ in subject.sink { sink.add($0) } }
            measure(n) { n in for i in 0..<n { subject.send(i) } }
            for cancellable in cancellables { cancellable.cancel() }
            blackHole(sink)
        },
        Scenario(
            operation: "post to 1 observer, 1,000 other names x 100 observers", peer: "SafeObserve NotificationHub",
            operationsPerIteration: 1
        ) { n in
            let hub = NotificationHub()
            let others = (0..<1_000).map { NotificationName<Int>("SafeObserveBenchmarks.other.\($0)") }
            let crowd = (0..<100).map { _ in Sink() }
            for name in others {
                for sink in crowd { hub.observe(name, by: sink, isolation: nil) { _, _ in } }
            }
            let sink = Sink()
            hub.observe(hubName, by: sink, isolation: nil) { sink, notification in sink.add(notification.payload) }
            measure(n) { n in for i in 0..<n { hub.post(hubName, payload: i) } }
            blackHole((hub, sink, crowd))
        },
        Scenario(
            operation: "post from a sender, 1 of 1,000 observers of the name filters on it",
            peer: "SafeObserve NotificationHub", operationsPerIteration: 1
        ) { n in
            let hub = NotificationHub()
            let senders = (0..<1_000).map { _ in Sink() }
            let sinks = (0..<1_000).map { _ in Sink() }
            for (sender, sink) in zip(senders, sinks) {
                hub.observe(hubName, from: sender, by: sink, isolation: nil) { sink, notification in
                    sink.add(notification.payload)
                }
            }
            let sender = senders[500]
            measure(n) { n in for i in 0..<n { hub.post(hubName, payload: i, from: sender) } }
            blackHole((hub, senders, sinks))
        },
        Scenario(
            operation: "post from a sender, 1 of 1,000 observers of the name filters on it",
            peer: "NotificationCenter (block)", operationsPerIteration: 1
        ) { n in
            let center = NotificationCenter()
            let senders = (0..<1_000).map { _ in NSObject() }
            let sink = Sink()
            let observers = senders.map { sender in
                center.addObserver(forName: centerName, object: sender, queue: nil) { _ in sink.add(1) }
            }
            let sender = senders[500]
            measure(n) { n in for _ in 0..<n { center.post(name: centerName, object: sender) } }
            for observer in observers { center.removeObserver(observer) }
            blackHole((sink, senders))
        },
        Scenario(
            operation: "post from a sender, 1 of 1,000 observers of the name filters on it",
            peer: "NotificationCenter (typed message)", operationsPerIteration: 1
        ) { n in
            MainActor.assumeIsolated {
                let center = NotificationCenter()
                let senders = (0..<1_000).map { _ in Sink() }
                let sink = Sink()
                let tokens = senders.map { sender in
                    center.addObserver(of: sender, for: BenchmarkMessage.self) { @MainActor message in
                        sink.add(message.value)
                    }
                }
                let sender = senders[500]
                measure(n) { n in for i in 0..<n { center.post(BenchmarkMessage(value: i), subject: sender) } }
                for token in tokens { center.removeObserver(token) }
                blackHole((sink, senders))
            }
        },
        Scenario(
            operation: "observe + remove a notification", peer: "SafeObserve NotificationHub", operationsPerIteration: 1
        ) { n in
            let hub = NotificationHub()
            let sink = Sink()
            hub.observe(hubName, by: sink, isolation: nil) { _, _ in }.invalidate()  // the name's channel exists
            measure(n) { n in
                for _ in 0..<n {
                    hub.observe(hubName, by: sink, isolation: nil) { sink, notification in
                        sink.add(notification.payload)
                    }.invalidate()
                }
            }
            blackHole((hub, sink))
        },
        Scenario(
            operation: "observe + remove a notification", peer: "NotificationCenter (block)", operationsPerIteration: 1
        ) { n in
            let center = NotificationCenter()
            let sink = Sink()
            measure(n) { n in
                for _ in 0..<n {
                    let observer = center.addObserver(forName: centerName, object: nil, queue: nil) { _ in sink.add(1) }
                    center.removeObserver(observer)
                }
            }
            blackHole(sink)
        },
        Scenario(
            operation: "observe + remove a notification", peer: "NotificationCenter (typed message)",
            operationsPerIteration: 1
        ) { n in
            MainActor.assumeIsolated {
                let center = NotificationCenter()
                let sink = Sink()
                measure(n) { n in
                    for _ in 0..<n {
                        let token = center.addObserver(for: BenchmarkMessage.self) { @MainActor message in
                            sink.add(message.value)
                        }
                        center.removeObserver(token)
                    }
                }
                blackHole(sink)
            }
        },
        Scenario(
            operation: "observe + remove a notification", peer: "OpenCombine PassthroughSubject",
            operationsPerIteration: 1
        ) { n in
            let subject = PassthroughSubject<Int, Never>()
            let sink = Sink()
            measure(n) { n in for _ in 0..<n { subject.sink { sink.add($0) }.cancel() } }
            blackHole(sink)
        },
    ]
}
