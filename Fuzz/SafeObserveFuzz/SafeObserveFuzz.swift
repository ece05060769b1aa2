import SafeObserveModel

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Decodes fuzzer bytes into an operation sequence and checks it against the
/// reference model; on a disagreement, prints a shrunk reproduction and aborts.
func check(_ bytes: [UInt8]) -> Bool {
    guard let failure = ModelRunner.run(ModelOperation.sequence(decoding: bytes)) else { return true }
    print(ModelRunner.shrink(failure))
    return false
}

/// The libFuzzer driver (linked in by `-sanitize=fuzzer`), called from our
/// own `main` since SwiftPM gives every executable its own entry point.
#if FUZZING
    @_silgen_name("LLVMFuzzerRunDriver")
    func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt
#endif

/// With `-DFUZZING` (see Fuzz/run.sh): libFuzzer, on every input calling `check`
/// and aborting on a failure. Without it: `SafeObserveFuzz FILE…` replays
/// corpus files, and `SafeObserveFuzz --write-corpus DIR COUNT` writes seeded
/// sequences as corpus files.
@main
enum Replay {
    static func main() {
        #if FUZZING
            var argc = CommandLine.argc
            var argv = CommandLine.unsafeArgv
            exit(
                runFuzzerDriver(&argc, &argv) { data, size in
                    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
                    if !check(bytes) { abort() }
                    return 0
                })
        #else
            let arguments = Array(CommandLine.arguments.dropFirst())
            if arguments.first == "--write-corpus", arguments.count == 3, let count = UInt64(arguments[2]) {
                for seed in 0..<count {
                    let bytes = ModelOperation.sequence(seed: seed, length: 12 + Int(seed % 5) * 12).bytes
                    write(bytes, to: "\(arguments[1])/seed-\(seed)")
                }
                return
            }
            var failures = 0
            for path in arguments {
                guard let bytes = read(path) else {
                    print("cannot read \(path)")
                    exit(2)
                }
                if !check(bytes) {
                    print("failing input: \(path)")
                    failures += 1
                }
            }
            print("replayed \(arguments.count) input(s), \(failures) failure(s)")
            exit(failures == 0 ? 0 : 1)
        #endif
    }

    static func read(_ path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count <= 0 { break }
            bytes += buffer[0..<count]
        }
        return bytes
    }

    static func write(_ bytes: [UInt8], to path: String) {
        guard let file = fopen(path, "wb") else {
            print("cannot write \(path)")
            exit(2)
        }
        _ = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, file) }
        fclose(file)
    }
}
