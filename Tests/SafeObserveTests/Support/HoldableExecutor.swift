import Dispatch

@testable import SafeObserve

/// A serial executor of its own, a dispatch queue that can be held: the
/// jobs enqueued meanwhile wait without taking a thread (so a test can keep
/// a queue's actor busy, or let it run for ever, without starving the
/// cooperative pool that the other tests share).
// @unchecked Sendable: `queue` is thread-safe; `isHeld` is only touched under `lock`.
final class HoldableExecutor: SerialExecutor, @unchecked Sendable {
    private let queue = DispatchQueue(label: "SafeObserveTests.HoldableExecutor")
    private let lock = _Mutex(false)

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }

    /// Holds the jobs enqueued from now on (until ``release()``).
    func hold() {
        lock.withLock { isHeld in
            guard !isHeld else { return }
            isHeld = true
            queue.suspend()
        }
    }

    /// Runs the held jobs; idempotent (a suspended queue must be resumed
    /// before it is released).
    func release() {
        lock.withLock { isHeld in
            guard isHeld else { return }
            isHeld = false
            queue.resume()
        }
    }
}

/// An actor on a ``HoldableExecutor``.
actor ExecutorActor {
    let executor = HoldableExecutor()
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    /// Returns once the jobs enqueued on the actor before it ran.
    func sync() {}
}

/// Blocks the main actor's thread with a job until `release` is signalled;
/// returns whether the job began (within a minute: other tests may keep the
/// main actor busy for seconds, under the sanitizers above all). The jobs
/// enqueued on the main actor meanwhile wait; the cooperative pool's
/// threads stay free.
func holdMainActor(until release: DispatchSemaphore) async -> Bool {
    let began = Flag()
    Task { @MainActor in
        began.set()
        release.wait()
    }
    let deadline = ContinuousClock.now + .seconds(60)
    while !began.isSet, ContinuousClock.now < deadline {
        try? await Task.sleep(for: .milliseconds(10))
    }
    return began.isSet
}
