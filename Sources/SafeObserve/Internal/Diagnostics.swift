/// Where programmer errors (bad key paths, observing from a `deinit`) go.
///
/// Debug builds stop in `assertionFailure` so the mistake is found at once;
/// release builds print the message once to standard error and carry on with
/// an inert token. Tests replace the handler to assert on the message.
enum _Diagnostics {
    typealias Handler = @Sendable (String) -> Void

    private static let state = _Mutex<(handler: Handler?, reported: Set<String>)>((nil, []))

    static func reportProgrammerError(_ message: String) {
        let handler: Handler? = state.withLock { state in
            if let handler = state.handler { return handler }
            // Release builds: print each distinct message once.
            guard state.reported.insert(message).inserted else { return { _ in } }
            return nil
        }
        if let handler {
            handler(message)
            return
        }
        assertionFailure(message)
        _writeToStandardError(message)
    }

    /// Runs `body` with every programmer error routed to `handler` (tests).
    static func withHandler<R>(_ handler: @escaping Handler, body: () throws -> R) rethrows -> R {
        let previous = state.withLock { state in
            let previous = state.handler
            state.handler = handler
            return previous
        }
        defer {
            // The replaced handler is released after the lock is dropped.
            let replaced = state.withLock { state in
                defer { state.handler = previous }
                return state.handler
            }
            _ = replaced
        }
        return try body()
    }
}
