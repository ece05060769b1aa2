// The one place SafeObserve calls Swift's Observation tracking, so that the
// choice of its variant per platform and toolchain is made here alone.
//
// - Where the toolchain ships the interface of Observation's `@_spi(SwiftUI)`
//   after-the-store tracking (`withObservationTracking(_:didSet:)`: Linux,
//   Windows and Android toolchains since 5.9), that variant is used: it is
//   called on the mutating thread after the store, and stays installed until
//   cancelled.
// - Elsewhere (Apple SDKs), or built with `-DSAFEOBSERVE_PUBLIC_TRACKING`
//   (which CI uses to test this path on Linux), the public
//   `withObservationTracking(_:onChange:)` is used: it is called before the
//   store and fires once.

#if !canImport(Darwin) && !SAFEOBSERVE_PUBLIC_TRACKING
    @_spi(SwiftUI) import Observation
#else
    import Observation
#endif

/// A tracking that fired: cancelling it removes its closure from every
/// registrar it was installed in.
@usableFromInline
// @unchecked Sendable: an `ObservationTracking` is Sendable where its
// type is visible; the public path holds nothing.
struct _FiredTracking: @unchecked Sendable {
    // Not optional: an optional of `ObservationTracking`, whose layout is
    // resilient, costs a value witness call at each test of it.
    #if !canImport(Darwin) && !SAFEOBSERVE_PUBLIC_TRACKING
        let tracking: ObservationTracking
    #else
        let tracking: Void
    #endif

    /// Removes the tracking's closure from its registrars (a one-shot
    /// tracking that fired is gone already).
    @usableFromInline
    func cancel() {
        #if !canImport(Darwin) && !SAFEOBSERVE_PUBLIC_TRACKING
            tracking.cancel()
        #endif
    }

    /// The key path whose change it reported, as the model's registrar
    /// names it (`nil` where that is not known).
    @usableFromInline
    var changedKeyPath: AnyKeyPath? {
        #if !canImport(Darwin) && !SAFEOBSERVE_PUBLIC_TRACKING
            tracking.changed
        #else
            nil
        #endif
    }
}

@usableFromInline
enum _ObservationTrackingLayer {
    /// Whether a tracking reports a change after its store and stays
    /// installed until cancelled (`false`: before the store, once).
    @usableFromInline
    static var reportsAfterTheStore: Bool {
        #if !canImport(Darwin) && !SAFEOBSERVE_PUBLIC_TRACKING
            true
        #else
            false
        #endif
    }

    /// How long after a delivery the before-the-store tracking's trackers
    /// read the key path again, to deliver a store that landed after the
    /// delivery read it (the writer was suspended between Observation's
    /// report and its store). Unused after the store.
    static let verificationDelays: [Duration] = [.milliseconds(2), .milliseconds(100)]

    /// Runs `read` with tracking and returns its result; `changed` is called
    /// on the mutating thread for the changes of what `read` read (see the
    /// file's header for when), with the tracking that fired. `willChange`,
    /// if given, is called on the mutating thread before each store (before
    /// `changed`, with the one-shot tracking).
    @usableFromInline
    static func track<T>(
        _ read: () -> T, willChange: (@Sendable () -> Void)? = nil,
        changed: @escaping @Sendable (_FiredTracking) -> Void
    ) -> T {
        #if !canImport(Darwin) && !SAFEOBSERVE_PUBLIC_TRACKING
            guard let willChange else {
                return withObservationTracking(read, didSet: { changed(_FiredTracking(tracking: $0)) })
            }
            return withObservationTracking(
                read, willSet: { _ in willChange() }, didSet: { changed(_FiredTracking(tracking: $0)) })
        #else
            withObservationTracking(
                read,
                onChange: {
                    willChange?()
                    changed(_FiredTracking(tracking: ()))
                })
        #endif
    }
}
