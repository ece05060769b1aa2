import Dispatch

/// A serial executor of its own (a dispatch queue), for an actor that uses it.
final class QueueExecutor: SerialExecutor {
    let queue = DispatchQueue(label: "SafeObserveTests.QueueExecutor")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }
}
