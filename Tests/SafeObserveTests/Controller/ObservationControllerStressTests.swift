import Dispatch
import Synchronization
import Testing

@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

/// ObservationController under threads; SAFEOBSERVE_STRESS_ITERATIONS scales
/// the rounds. Meant to run under `--sanitize=thread` and `--sanitize=address`.
@Suite("ObservationController under threads")
struct ObservationControllerStressTests {
    /// One thread keeps changing the property; another releases the
    /// controller in the middle. Once `deinit` returned, at most the one
    /// delivery already past its checks may still run; afterwards nothing is
    /// delivered, nothing is left on the object and the captures are gone.
    @Test func controllerReleasedOnAnotherThread_duringDeliveries_endsEverything() {
        for _ in 0..<StressConfig.rounds(100) {
            let counter = Counter()
            let captures = LifetimeCounter()
            let observer = ControllerObserver()
            let released = Atomic<Bool>(false)
            let lateDeliveries = Atomic<Int>(0)
            let deliveries = Atomic<Int>(0)
            do {
                var controller: ObservationController? = ObservationController(observer: observer)
                let captured = Captured(captures)
                controller!.observe(counter, keyPaths: \.count, \.title, options: [.old, .new, .prior]) { _, _, _ in
                    _ = captured
                    deliveries.add(1, ordering: .relaxed)
                    if released.load(ordering: .acquiring) { lateDeliveries.add(1, ordering: .relaxed) }
                }
                let box = ReleaseBox([controller!])
                controller = nil  // the box holds the only reference
                let shared = UncheckedSendable(counter)
                DispatchQueue.concurrentPerform(iterations: 2) { worker in
                    if worker == 0 {
                        for value in 1...200 { shared.value.count = value }  // the only thread touching `counter`
                    } else {
                        while deliveries.load(ordering: .relaxed) < 20 {}
                        box.releaseAll()
                        released.store(true, ordering: .releasing)
                    }
                }
            }
            #expect(lateDeliveries.load(ordering: .relaxed) <= 1, "Deliveries started after the controller died")
            #expect(SafeObservation.relations(of: counter).isEmpty, "Relations outlived the controller")
            #expect(captures.liveCount == 0, "Handler captures leaked")
            let before = deliveries.load(ordering: .relaxed)
            counter.count = -1
            #expect(deliveries.load(ordering: .relaxed) == before)
        }
    }

    /// Several threads observe and unobserve shared objects through one
    /// controller (registration only reads them), and each mutates a private
    /// object it also observes through it. Afterwards the controller's table
    /// retains exactly the objects it still observes, and nothing leaks.
    @Test(arguments: [true, false])
    func concurrentObserveAndUnobserve_keepTheTableConsistent_andLeakNothing(retainsObserved: Bool) {
        for round in 0..<StressConfig.rounds(20) {
            let observed = LifetimeCounter()
            let captures = LifetimeCounter()
            let observer = ControllerObserver()
            let controller = ObservationController(observer: observer, retainsObserved: retainsObserved)
            do {
                var shared = (0..<4).map { _ in Counter(lifetime: observed) }
                stress(controller, shared, observed: observed, captures: captures, seed: UInt64(round))
                let observedIDs = Set(controller.relations.compactMap(\.observedObjectID))
                if retainsObserved {
                    #expect(controller._retainedObjectCount == observedIDs.count, "Retains must match relations")
                } else {
                    #expect(controller._trackedObjectCount == 0, "Table entries leaked")
                }
                shared = []
                _ = shared
                if !retainsObserved {
                    #expect(observed.liveCount == 0, "retainsObserved: false kept objects alive")
                    #expect(controller.relations.isEmpty)
                }
            }
            controller.unobserveAll()
            #expect(controller._trackedObjectCount == 0)
            #expect(observed.liveCount == 0, "Observed objects leaked")
            #expect(captures.liveCount == 0, "Handler captures leaked")
        }
    }

    /// Four threads observe and unobserve `shared` through `controller`.
    private func stress(
        _ controller: ObservationController<ControllerObserver>, _ shared: [Counter],
        observed: LifetimeCounter, captures: LifetimeCounter, seed: UInt64
    ) {
        let sharedBox = UncheckedSendable(shared)  // registration only reads the shared counters
        // The controller of a non-Sendable observer is not Sendable; the
        // handlers here never touch the observer, so the threads may share it.
        let controllerBox = UncheckedSendable(controller)
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            let controller = controllerBox.value
            var random = SplitMix64(seed: seed * 16 + UInt64(worker))
            let own = Counter(lifetime: observed)  // only this thread mutates it
            for _ in 0..<150 {
                let target = sharedBox.value[random.next(sharedBox.value.count)]
                let captured = Captured(captures)
                switch random.next(8) {
                case 0: controller.observe(target, keyPath: \.count) { _, _, _ in _ = captured }
                case 1: controller.observe(target, keyPaths: \.count, \.title) { _, _, _ in _ = captured }
                case 2: controller.observe(own, keyPath: \.count, options: [.initial, .new]) { _, _, _ in }
                case 3: controller.unobserve(target, keyPath: \.title)
                case 4: controller.unobserve(target)
                case 5: controller.unobserve(own)
                case 6: if random.next(10) == 0 { controller.unobserveAll() }
                default: own.count += 1
                }
            }
        }
    }
}
