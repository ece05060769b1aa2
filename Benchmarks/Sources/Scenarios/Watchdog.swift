// Issue 31, item 19: a scenario that waits for something that never comes
// (a delivery merged or lost, a resume that found nobody waiting) reports
// itself failed and ends the process with a non-zero status, instead of
// hanging the benchmark gate.
//
// Two bounds, neither of which runs anything per operation:
// - each `Handoff.wait` is watched by one thread, started with the first
//   handoff (asynchronous scenarios only: a synchronous one must stay
//   single-threaded, or glibc's single-thread paths would change its counts),
//   which wakes every quarter of the limit and fails a wait that made no
//   progress for the whole limit;
// - the whole process is bounded by `alarm(2)` (no thread, no allocation),
//   which every scenario arms before it starts.
//
//   BENCHMARK_WAIT_LIMIT   seconds one wait may last   (default 60)
//   BENCHMARK_TIME_LIMIT   seconds the process may run (default 600; 0: none)
//
// instructions.sh raises both for callgrind, which runs the scenarios about
// fifty times slower.

import Foundation
import Synchronization

/// Bounds the waits of the scenarios and reports the ones that overrun.
public enum Watchdog {
    /// Seconds one wait may last.
    public static let waitLimit = limit("BENCHMARK_WAIT_LIMIT", default: 60)

    /// Seconds the whole process may run; 0 for no bound.
    public static let timeLimit = limit("BENCHMARK_TIME_LIMIT", default: 600)

    /// The index of the scenario running (`InstructionCounts list`), named
    /// in failure reports; -1 before `arm`.
    private static let scenario = Atomic<Int>(-1)

    /// Records which scenario this process runs and bounds the process's run
    /// time: past `timeLimit` it reports the scenario failed and exits with
    /// status 3. Call once, before the scenario starts.
    ///
    /// It allocates nothing: an allocation before a synchronous row would
    /// move what the row allocates, and address-hashed tables then probe
    /// differently (a teardown row read 2,338.9 instead of 2,338.3).
    public static func arm(scenario index: Int) {
        scenario.store(index, ordering: .relaxed)
        guard timeLimit > 0 else { return }
        signal(SIGALRM) { _ in
            // Only async-signal-safe calls, and a static string.
            let message: StaticString =
                "InstructionCounts: FAILED: the scenario did not finish within BENCHMARK_TIME_LIMIT seconds\n"
            _ = write(2, message.utf8Start, message.utf8CodeUnitCount)
            _exit(3)
        }
        alarm(UInt32(timeLimit))
    }

    /// Reports the running scenario failed with `reason` and exits with
    /// status 3 (without running exit handlers: other threads may be stuck
    /// holding what they need).
    public static func fail(_ reason: String) -> Never {
        let index = scenario.load(ordering: .relaxed)
        let name =
            if Scenarios.all.indices.contains(index) {
                Scenarios.all[index].name
            } else if Scenarios.concurrent.indices.contains(index - Scenarios.all.count) {
                "\(Scenarios.concurrent[index - Scenarios.all.count].operation) — "
                    + Scenarios.concurrent[index - Scenarios.all.count].peer
            } else {
                "scenario"
            }
        let line = "InstructionCounts: FAILED: \(name) (\(index)): \(reason)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
        _exit(3)
    }

    /// `getenv`, not `ProcessInfo`: building Foundation's environment
    /// dictionary (randomly seeded) changed the heap the synchronous rows
    /// then measure, and with it their counts.
    private static func limit(_ variable: String, default value: Int) -> Int {
        getenv(variable).flatMap { Int(String(cString: $0)) }.map { max(0, $0) } ?? value
    }

    /// Handoffs being watched (weakly: each scenario run makes its own), and
    /// whether the watching thread started.
    private static let watched = Mutex<(handoffs: [WeakHandoff], started: Bool)>(([], false))

    /// Starts watching `handoff`, and the watching thread with the first.
    static func watch(_ handoff: Handoff) {
        let start = watched.withLock { state in
            state.handoffs.removeAll { $0.handoff == nil }
            state.handoffs.append(WeakHandoff(handoff: handoff))
            defer { state.started = true }
            return !state.started
        }
        if start { Thread.detachNewThread { watchHandoffs() } }
    }

    /// Every quarter of the limit: a handoff seen waiting on the same wait
    /// for a whole limit fails the scenario.
    private static func watchHandoffs() {
        let tick = max(1, waitLimit / 4)
        // Per handoff: the wait last seen and how many ticks it has lasted.
        var seen: [ObjectIdentifier: (wait: Int, ticks: Int)] = [:]
        while true {
            Thread.sleep(forTimeInterval: TimeInterval(tick))
            let handoffs = watched.withLock { $0.handoffs.compactMap(\.handoff) }
            var next: [ObjectIdentifier: (wait: Int, ticks: Int)] = [:]
            for handoff in handoffs {
                guard let wait = handoff.currentWait else { continue }
                let id = ObjectIdentifier(handoff)
                let ticks = seen[id].map { $0.wait == wait ? $0.ticks + 1 : 0 } ?? 0
                if ticks * tick >= waitLimit {
                    fail(
                        "waited more than \(waitLimit) s for \(handoff.awaited) (wait \(wait);"
                            + " BENCHMARK_WAIT_LIMIT)")
                }
                next[id] = (wait, ticks)
            }
            seen = next
        }
    }
}

private struct WeakHandoff {
    weak var handoff: Handoff?
}
