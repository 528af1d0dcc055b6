// A /healthz-only server for bench/http.sh, until the real `ferry` binary serves it.
// Usage: ferry-http-bench <port> <loops>. Runs until killed.
import FerryHTTP
import FerryLoop
import Foundation

let arguments = CommandLine.arguments
let port = arguments.count > 1 ? Int(arguments[1]) ?? 8080 : 8080
let loops = arguments.count > 2 ? Int(arguments[2]) ?? 1 : 1

let group = LoopGroup(count: loops)
let configuration = HTTPServerConfiguration(host: "127.0.0.1", port: port)
let server = HTTPServer(configuration: configuration, group: group) { _ in
    var router = Router()
    router.get("/healthz") { _, responder in responder.respond(.text("ok")) }
    return router
}
do {
    let address = try server.start()
    print("listening on \(address) with \(loops) loop(s)")
} catch {
    print("ferry-http-bench: \(error)")
    exit(1)
}
while true { sleep(3600) }
