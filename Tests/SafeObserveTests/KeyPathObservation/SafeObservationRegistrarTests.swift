import Testing

@testable import SafeObserve

/// A property with a custom setter, observable through the manual path.
private final class Thermostat: SafeObservable {
    let registrar = SafeObservationRegistrar()
    let lifetime: LifetimeCounter?
    private var storedCelsius = 20.0

    init(lifetime: LifetimeCounter? = nil) {
        self.lifetime = lifetime
        lifetime?.didInit()
    }

    deinit { lifetime?.didDeinit() }

    var celsius: Double {
        get {
            registrar.access(self, keyPath: \.celsius)
            return storedCelsius
        }
        set {
            registrar.withMutation(of: self, keyPath: \.celsius) {
                storedCelsius = min(max(newValue, 5), 30)
            }
        }
    }

    struct Refused: Error {}

    func setCelsiusOrThrow(_ value: Double) throws {
        try registrar.withMutation(of: self, keyPath: \.celsius) {
            if value > 100 { throw Refused() }
            storedCelsius = value
        }
    }
}

/// A manual property holding an object, read through a computed property
/// (so `\.latest` is a derived key path), whose mutation may throw.
private final class Sensor: SafeObservable {
    final class Reading: Sendable {
        let value: Int
        let lifetime: LifetimeCounter
        init(_ value: Int, lifetime: LifetimeCounter) {
            self.value = value
            self.lifetime = lifetime
            lifetime.didInit()
        }
        deinit { lifetime.didDeinit() }
    }

    struct Refused: Error {}

    let registrar = SafeObservationRegistrar()
    private var storedReading: Reading

    init(_ reading: Reading) { storedReading = reading }

    var reading: Reading {
        registrar.access(self, keyPath: \.reading)
        return storedReading
    }

    /// Derived: reads `reading`.
    var latest: Reading { reading }

    func replaceReading(with new: Reading, failing: Bool) throws {
        try registrar.withMutation(of: self, keyPath: \.reading) {
            if failing { throw Refused() }
            storedReading = new
        }
    }
}

@Suite("Manual observation with SafeObservationRegistrar")
struct SafeObservationRegistrarTests {
    @Test func manualPropertiesDeliverLikeObservedOnes() {
        let thermostat = Thermostat()
        let listener = Listener()
        let log = EventLog()
        thermostat.safeObserve(\.celsius, by: listener, options: [.initial, .old, .new, .prior]) { _, _, change in
            log.record(describe(change))
        }
        thermostat.celsius = 50  // clamped by the custom setter
        #expect(log.entries == ["nil->20.0 initial", "20.0->nil prior", "20.0->30.0"])
    }

    @Test func aThrowingMutationDeliversNoChange() {
        let thermostat = Thermostat()
        let listener = Listener()
        let log = EventLog()
        thermostat.safeObserve(\.celsius, by: listener) { _, _, change in log.record(describe(change)) }
        #expect(throws: Thermostat.Refused.self) { try thermostat.setCelsiusOrThrow(500) }
        try? thermostat.setCelsiusOrThrow(21)
        #expect(log.entries == ["nil->21.0"])
    }

    @Test func manualRelationsAreTornDownWithTheObject() {
        let captures = LifetimeCounter()
        let thermostats = LifetimeCounter()
        let listener = Listener()
        do {
            let thermostat = Thermostat(lifetime: thermostats)
            let captured = Captured(captures)
            thermostat.safeObserve(\.celsius, by: listener) { _, _, _ in _ = captured }
            #expect(SafeObservation.relations(of: thermostat).count == 1)
        }
        #expect(thermostats.liveCount == 0, "Observed object leaked")
        #expect(captures.liveCount == 0, "Handler leaked")
        #expect(SafeObservation.relations(observedBy: listener).isEmpty)
    }

    @Test func unobservingAndDedupeWorkOnManualProperties() {
        let thermostat = Thermostat()
        let listener = Listener()
        let log = EventLog()
        let first = thermostat.safeObserve(\.celsius, by: listener) { _, _, _ in log.record("first") }
        let second = thermostat.safeObserve(\.celsius, by: listener) { _, _, _ in log.record("second") }
        #expect(first == second)
        thermostat.celsius = 10
        thermostat.safeUnobserve(\.celsius, by: listener)
        thermostat.celsius = 11
        #expect(log.entries == ["first"])
    }

    @Test func aThrowingMutation_releasesTheOldValueADerivedKeyPathCapturedForIt() throws {
        let readings = LifetimeCounter()
        let sensor = Sensor(Sensor.Reading(1, lifetime: readings))
        let listener = Listener()
        let log = EventLog()
        sensor.safeObserve(\.latest, by: listener, options: [.old, .new, .prior]) { _, _, change in
            let values = "\(change.oldValue?.value ?? 0)->\(change.newValue?.value ?? 0)"
            log.record(values + (change.isPrior ? " prior" : ""))
        }
        // The prior phase captures reading 1 as the old value; the mutation
        // then throws, so no change follows to collect it.
        #expect(throws: Sensor.Refused.self) {
            try sensor.replaceReading(with: Sensor.Reading(2, lifetime: readings), failing: true)
        }
        try sensor.replaceReading(with: Sensor.Reading(3, lifetime: readings), failing: false)
        try sensor.replaceReading(with: Sensor.Reading(4, lifetime: readings), failing: false)
        #expect(log.entries == ["1->0 prior", "1->0 prior", "1->3", "3->0 prior", "3->4"])
        #expect(readings.liveCount == 1, "a replaced reading is kept alive by an abandoned old value")
    }
}
