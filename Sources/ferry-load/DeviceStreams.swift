import FerryLoad
import FerryLoop

/// The streams of one loop's devices (`fleet`'s and `storm`'s): a ``StreamSet`` per
/// gateway and transport, each telling its device, by index, of its hello, its cues and
/// its end. Loop thread only.
struct DeviceStreams {
    private var sets: [[StreamSet]] = []

    /// No streams yet (a device's loop makes its sets when it starts).
    init() {}

    /// A set per server of `servers` and transport on `loop`, reporting to the three callbacks.
    init(
        loop: EventLoop, servers: [SocketAddress], opened: @escaping (Int) -> Void, cued: @escaping (Int) -> Void,
        ended: @escaping (Int) -> Void
    ) {
        sets = servers.map { server in
            StreamTransport.allCases.map { transport in
                let set = StreamSet(loop: loop, server: server, transport: transport)
                set.onOpened = opened
                set.onCue = cued
                set.onEnded = ended
                return set
            }
        }
    }

    /// Opens device `order.index`'s stream to server `server` (an index of the servers) over `transport`.
    func open(_ order: StreamOrder, server: Int, transport: StreamTransport) {
        sets[server][StreamTransport.allCases.firstIndex(of: transport)!].add(order)
    }

    /// Closes device `index`'s stream, whichever server and transport it went to.
    func close(index: Int) {
        for row in sets { for set in row { set.close(index: index) } }
    }

    /// Streams that could not open, by reason, and those that closed after their hello (`dropped`).
    var problems: [String: Int] {
        var problems: [String: Int] = [:]
        for row in sets {
            for set in row {
                problems.merge(set.failures, uniquingKeysWith: +)
                if set.dropped > 0 { problems["dropped", default: 0] += set.dropped }
            }
        }
        return problems
    }

    /// Closes every stream.
    func closeAll() {
        for row in sets { for set in row { set.closeAll() } }
    }
}
