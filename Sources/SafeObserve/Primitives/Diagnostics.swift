/// Where programmer errors (bad key paths, observing from a `deinit`, shared
/// lifetimes and storage) go.
///
/// Debug builds stop in `assertionFailure` so the mistake is found at once;
/// release builds print the message once to standard error and carry on with
/// an inert token. Tests route messages to a handler of their own with
/// ``withHandler(_:body:)``: a task-local value, so tests running in parallel
/// each see only their own messages.
enum _Diagnostics {
    typealias Handler = @Sendable (String) -> Void

    /// The handler of the current task (and the tasks it creates), if any.
    @TaskLocal static var handler: Handler?

    /// Messages printed so far (release builds print each distinct one once).
    private static let reported = _Mutex(Set<String>())

    static func reportProgrammerError(_ message: String) {
        if let handler {
            handler(message)
            return
        }
        guard reported.withLock({ $0.insert(message).inserted }) else { return }
        assertionFailure(message)
        _writeToStandardError(message)
    }

    /// Warns of a registration that cannot do what it was asked, and carries
    /// on: never stops a build, debug ones included. Printed once per
    /// distinct message, or routed to the task's handler (tests).
    static func warn(_ message: String) {
        if let handler {
            handler(message)
            return
        }
        guard reported.withLock({ $0.insert(message).inserted }) else { return }
        _writeToStandardError(message)
    }

    /// Runs `body` with every programmer error it reports, on this task,
    /// routed to `handler` (tests).
    static func withHandler<R>(_ handler: @escaping Handler, body: () throws -> R) rethrows -> R {
        try $handler.withValue(handler, operation: body)
    }
}
