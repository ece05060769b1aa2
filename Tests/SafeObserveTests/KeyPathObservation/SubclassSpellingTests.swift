import Testing

@testable import SafeObserve

private class Vehicle: SafeObservable {
    @Observed var speed = 0
}

private final class Car: Vehicle {
    @Observed var gear = 1
    /// Reads `speed` only, but is another value: it must stay its own relation.
    var doubledSpeed: Int { speed * 2 }
}

/// Two hierarchies alike, each with a subclass overriding the property with
/// a getter that reads another one: one per order of registration (the
/// resolution cache is process-wide, and each order must start fresh).
private class Thermostat: SafeObservable {
    @Observed var target = 20
}
private final class ScheduledThermostat: Thermostat {
    @Observed var scheduled = 18
    override var target: Int {
        get { scheduled }
        set { scheduled = newValue }
    }
}
private class Heater: SafeObservable {
    @Observed var target = 20
}
private final class ScheduledHeater: Heater {
    @Observed var scheduled = 18
    override var target: Int {
        get { scheduled }
        set { scheduled = newValue }
    }
}

/// One listener observing `speed` from generic code rooted at the subclass.
private func observeSpeed<V: Vehicle>(of vehicle: V, by listener: Listener, log: EventLog) -> ObservationToken {
    vehicle.safeObserve(\.speed, by: listener) { _, _, change in log.record("generic \(change.newValue!)") }
}

/// A stored property declared in a superclass is one property whatever root
/// type its key path was formed with: `\Vehicle.speed`, `\Car.speed` and a
/// key path formed in generic code are one relation per listener, delivered
/// once per change and removed by any of them.
@Suite("One stored property, whatever root type spells it")
struct SubclassSpellingTests {
    @Test func theSuperclassAndTheSubclassSpelling_areOneRelation_deliveredOnce() {
        let car = Car()
        let listener = Listener()
        let log = EventLog()
        let first = (car as Vehicle).safeObserve(\Vehicle.speed, by: listener) { _, _, change in
            log.record("vehicle \(change.newValue!)")
        }
        let second = car.safeObserve(\Car.speed, by: listener) { _, _, change in log.record("car \(change.newValue!)") }
        #expect(first == second, "the second spelling must find the first relation")
        car.speed = 1
        #expect(log.entries == ["vehicle 1"])
        #expect(SafeObservation.relations(of: car).count == 1)
    }

    @Test(arguments: [false, true])
    func removingWithTheOtherSpelling_endsTheRelation(registeredOnTheSubclass: Bool) {
        let car = Car()
        let listener = Listener()
        let log = EventLog()
        let token =
            registeredOnTheSubclass
            ? car.safeObserve(\Car.speed, by: listener) { _, _, _ in log.record("called") }
            : (car as Vehicle).safeObserve(\Vehicle.speed, by: listener) { _, _, _ in log.record("called") }
        if registeredOnTheSubclass {
            (car as Vehicle).safeUnobserve(\Vehicle.speed, by: listener)
        } else {
            car.safeUnobserve(\Car.speed, by: listener)
        }
        #expect(!token.isActive)
        car.speed = 1
        #expect(log.entries.isEmpty)
        #expect(SafeObservation.relations(of: car).isEmpty)
    }

    @Test func aKeyPathFormedInGenericCode_isTheSameRelationAsTheLiteral() {
        let car = Car()
        let listener = Listener()
        let log = EventLog()
        let literal = (car as Vehicle).safeObserve(\Vehicle.speed, by: listener) { _, _, change in
            log.record("literal \(change.newValue!)")
        }
        let generic = observeSpeed(of: car, by: listener, log: log)
        #expect(literal == generic)
        car.speed = 3
        #expect(log.entries == ["literal 3"])
    }

    @Test func aComputedPropertyOfTheSubclassReadingTheProperty_staysItsOwnRelation() {
        let car = Car()
        let listener = Listener()
        let log = EventLog()
        car.safeObserve(\Car.speed, by: listener) { _, _, change in log.record("speed \(change.newValue!)") }
        car.safeObserve(\Car.doubledSpeed, by: listener) { _, _, change in log.record("doubled \(change.newValue!)") }
        car.speed = 2
        #expect(log.entries == ["speed 2", "doubled 4"])
        car.safeUnobserve(\Car.speed, by: listener)
        car.speed = 3
        #expect(log.entries == ["speed 2", "doubled 4", "doubled 6"])
    }

    /// What `\Base.target` reads depends on the object's getters: on the
    /// subclass's instances, `scheduled`. Which class was observed first must
    /// not change what is observed on the other.
    @Test func aKeyPathOverriddenByAGetterReadingAnotherProperty_isObservedThroughIt_whicheverClassCameFirst() {
        let listener = Listener()
        let log = EventLog()
        // The base class first.
        let thermostat = Thermostat()
        thermostat.safeObserve(\Thermostat.target, by: listener) { _, _, change in
            log.record("base \(change.newValue!)")
        }
        let scheduled: Thermostat = ScheduledThermostat()
        scheduled.safeObserve(\Thermostat.target, by: listener) { _, _, change in
            log.record("sub \(change.newValue!)")
        }
        scheduled.target = 5
        (scheduled as! ScheduledThermostat).scheduled = 7
        thermostat.target = 1
        #expect(log.entries == ["sub 5", "sub 7", "base 1"])

        // The subclass first.
        let heaterLog = EventLog()
        let scheduledHeater: Heater = ScheduledHeater()
        scheduledHeater.safeObserve(\Heater.target, by: listener) { _, _, change in
            heaterLog.record("sub \(change.newValue!)")
        }
        let heater = Heater()
        heater.safeObserve(\Heater.target, by: listener) { _, _, change in heaterLog.record("base \(change.newValue!)")
        }
        scheduledHeater.target = 5
        (scheduledHeater as! ScheduledHeater).scheduled = 7
        heater.target = 1
        #expect(heaterLog.entries == ["sub 5", "sub 7", "base 1"])
        withExtendedLifetime(listener) {}
    }

    @Test func aSubclassSpelling_isObservedAsTheProperty_withItsNameInDescriptions() {
        let car = Car()
        let listener = Listener()
        let token = car.safeObserve(\Car.speed, by: listener) { _, _, _ in }
        #expect(SafeObservation._channels(of: car).count == 1)
        #expect(token.debugDescription.contains("\\Car.speed"), "\(token.debugDescription)")
    }
}
