// Checks that every ```swift block of README.md and of the DocC articles is
// in the DocumentationExamples test target (which compiles and runs them), or
// is marked as not compiled, with its reason, on the line before its fence:
//
//   <!-- not compiled: needs the Objective-C runtime -->
//
// In the target, the n-th block of a document is pasted between
// `// example: <document file name> <n>` and `// end example`, with only the
// scaffolding its prose implies around or between its lines. A block matches
// when each of its lines, without whitespace, is found in the region, in
// order (so the formatter may wrap or re-indent them); its `import` lines
// only need to be in the file. Run as `bash .ci/doc-examples`.

import Foundation

let root = URL(fileURLWithPath: CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : ".")
let fileManager = FileManager.default
let articles = root.appendingPathComponent("Sources/SafeObserve/Documentation.docc")
let documents =
    [root.appendingPathComponent("README.md")]
    + ((try? fileManager.contentsOfDirectory(at: articles, includingPropertiesForKeys: nil)) ?? [])
    .filter { $0.pathExtension == "md" }.sorted { $0.lastPathComponent < $1.lastPathComponent }
let targetFolder = root.appendingPathComponent("Tests/DocumentationExamples")
let sources = ((try? fileManager.contentsOfDirectory(at: targetFolder, includingPropertiesForKeys: nil)) ?? [])
    .filter { $0.pathExtension == "swift" }

func lines(_ url: URL) -> [String] {
    ((try? String(contentsOf: url, encoding: .utf8)) ?? "").components(separatedBy: "\n")
}
func squeezed(_ line: String) -> String { line.filter { !$0.isWhitespace } }
func trimmed(_ line: Substring) -> String { line.trimmingCharacters(in: .whitespaces) }

struct Block {
    let document: String
    let index: Int
    let line: Int
    let lines: [String]
    let skipReason: String?
}

var blocks: [Block] = []
for document in documents {
    let text = lines(document)
    var index = 0
    var row = 0
    while row < text.count {
        let fence = text[row].trimmingCharacters(in: .whitespaces)
        guard fence == "```swift" else {
            row += 1
            continue
        }
        index += 1
        let start = row
        var body: [String] = []
        row += 1
        while row < text.count, text[row].trimmingCharacters(in: .whitespaces) != "```" {
            body.append(text[row])
            row += 1
        }
        row += 1
        var previous = start - 1
        while previous >= 0, text[previous].trimmingCharacters(in: .whitespaces).isEmpty { previous -= 1 }
        var skipReason: String?
        if previous >= 0 {
            let line = text[previous].trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("<!-- not compiled:"), line.hasSuffix("-->") {
                skipReason = String(line.dropFirst("<!-- not compiled:".count).dropLast(3))
                    .trimmingCharacters(in: .whitespaces)
            }
        }
        blocks.append(
            Block(
                document: document.lastPathComponent, index: index, line: start + 1, lines: body,
                skipReason: skipReason))
    }
}

struct Region {
    let file: String
    let imports: Set<String>
    let text: String  // the region's lines without whitespace, concatenated
}

var regions: [String: Region] = [:]
var errors: [String] = []
for source in sources {
    let text = lines(source)
    let imports = Set(
        text.map { $0.trimmingCharacters(in: .whitespaces) }.filter { $0.hasPrefix("import ") }.map(squeezed))
    var row = 0
    while row < text.count {
        let line = text[row].trimmingCharacters(in: .whitespaces)
        guard line.hasPrefix("// example: ") else {
            row += 1
            continue
        }
        let key = String(line.dropFirst("// example: ".count))
        var body = ""
        row += 1
        while row < text.count, text[row].trimmingCharacters(in: .whitespaces) != "// end example" {
            body += squeezed(text[row])
            row += 1
        }
        if row == text.count { errors.append("\(source.lastPathComponent): `// example: \(key)` has no `// end example`") }
        if regions[key] != nil { errors.append("\(source.lastPathComponent): `// example: \(key)` appears twice") }
        regions[key] = Region(file: source.lastPathComponent, imports: imports, text: body)
        row += 1
    }
}

var compiled = 0
var skipped: [String] = []
for block in blocks {
    let key = "\(block.document) \(block.index)"
    let place = "\(block.document):\(block.line) (swift block \(block.index))"
    if let reason = block.skipReason {
        skipped.append("\(place): \(reason)")
        if regions[key] != nil { errors.append("\(place) is marked not compiled, but the target has it") }
        regions[key] = nil
        continue
    }
    guard let region = regions.removeValue(forKey: key) else {
        errors.append(
            "\(place) is not in Tests/DocumentationExamples (add it between `// example: \(key)` and "
                + "`// end example`, or mark it `<!-- not compiled: reason -->`)")
        continue
    }
    var rest = region.text[...]
    for line in block.lines {
        let wanted = squeezed(line)
        if wanted.isEmpty { continue }
        if line.trimmingCharacters(in: .whitespaces).hasPrefix("import ") {
            if !region.imports.contains(wanted) { errors.append("\(place): \(region.file) lacks `\(line)`") }
            continue
        }
        guard let found = rest.range(of: wanted) else {
            errors.append("\(place): \(region.file) differs from the document at `\(line.trimmingCharacters(in: .whitespaces))`")
            break
        }
        rest = rest[found.upperBound...]
    }
    compiled += 1
}
for (key, region) in regions.sorted(by: { $0.key < $1.key }) {
    errors.append("\(region.file): `// example: \(key)` matches no swift block of the documents")
}

for line in skipped { print("not compiled: \(line)") }
if errors.isEmpty {
    print("ok: \(compiled) swift blocks of README.md and the DocC articles are in Tests/DocumentationExamples, \(skipped.count) marked not compiled")
} else {
    for error in errors { print("error: \(error)") }
    exit(1)
}
