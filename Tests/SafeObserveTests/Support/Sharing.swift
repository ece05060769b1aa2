@testable import SafeObserve

#if canImport(Glibc)
    import Glibc
#endif

/// Shares a non-Sendable fixture across the threads of a stress test: what
/// the test does with it from several threads is what the library promises
/// is thread-safe (unobserving, invalidating, releasing, mutating distinct
/// objects); mutation and registration of one object stay on one thread or
/// under that object's lock.
struct UncheckedSendable<Value>: @unchecked Sendable {
    // @unchecked Sendable: see above; each use says which thread touches what.
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Objects that another thread releases.
final class ReleaseBox<Object: AnyObject>: @unchecked Sendable {
    // @unchecked Sendable: the objects are only reached under the lock, to be released.
    private let objects: _Mutex<[Object]>

    init(_ objects: [Object]) {
        nonisolated(unsafe) let objects = objects  // moved in; the caller drops its copy
        self.objects = _Mutex(objects)
    }

    /// Releases one object; `false` when none was left.
    func releaseOne() -> Bool {
        let released = objects.withLock { $0.popLast() }
        return released != nil
    }

    /// Releases every object.
    func releaseAll() {
        let released = objects.withLock { objects in
            defer { objects = [] }
            return objects
        }
        _ = released
    }
}

/// A tiny deterministic generator (SplitMix64), so a failing round can be replayed.
struct SplitMix64 {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// A number in `0..<bound`.
    mutating func next(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}

/// How long the stress loops run: `SAFEOBSERVE_STRESS_ITERATIONS=N`
/// multiplies every loop by N; without it, loops are halved under a
/// sanitizer (everything runs several times slower there).
enum StressConfig {
    /// `SAFEOBSERVE_STRESS_ITERATIONS`, a multiplier (1 when unset).
    static let multiplier: Int? = {
        guard let raw = getenv("SAFEOBSERVE_STRESS_ITERATIONS"),
            let value = Int(String(cString: raw)), value > 0
        else { return nil }
        return value
    }()

    /// Whether a sanitizer runtime is linked in (everything runs several times slower).
    static let isSanitized: Bool =
        dlsym(nil, "__tsan_init") != nil || dlsym(nil, "__asan_init") != nil

    /// The loop count of a test whose default is `base`.
    static func rounds(_ base: Int) -> Int {
        if let multiplier { return base * multiplier }
        return isSanitized ? max(2, base / 2) : base
    }
}

/// Objects shared by the threads of a stress round, only touched under the
/// lock: any thread may borrow one (strongly), replace, add or remove one;
/// whatever is removed is released after unlocking, on the calling thread.
final class StressPool<Object: AnyObject>: @unchecked Sendable {
    // @unchecked Sendable: the slots are only touched under the lock; what the
    // threads do with a picked object is what the library allows from any thread.
    private let slots: _Mutex<[Object]>
    private let make: @Sendable (Int) -> Object
    let count: Int

    init(count: Int, make: @escaping @Sendable (Int) -> Object) {
        self.count = count
        self.make = make
        // nonisolated(unsafe): freshly made objects, moved into the lock; no other reference.
        nonisolated(unsafe) let initial = (0..<count).map(make)
        slots = _Mutex(initial)
    }

    func pick(_ random: inout SplitMix64) -> Object {
        let draw = random.next(1 << 30)
        return slots.withLock { $0[draw % $0.count] }
    }

    func replace(_ index: Int) {
        // nonisolated(unsafe): a freshly made object, moved into the lock; no other reference.
        nonisolated(unsafe) let fresh = make(index)
        let old = slots.withLock { slots in
            defer { slots[index] = fresh }
            return slots[index]
        }
        _ = old  // released here, unlocked
    }

    func append(_ object: Object) {
        // nonisolated(unsafe): the caller hands the object over; it keeps no reference it uses.
        nonisolated(unsafe) let object = object
        slots.withLock { $0.append(object) }
    }

    func removeRandom(_ random: inout SplitMix64) {
        let draw = random.next(1 << 30)
        let removed = slots.withLock { $0.isEmpty ? nil : $0.remove(at: draw % $0.count) }
        _ = removed  // released here, unlocked
    }

    var all: [Object] { slots.withLock { $0 } }

    func removeAll() {
        let released = slots.withLock { slots in
            defer { slots = [] }
            return slots
        }
        _ = released
    }
}
