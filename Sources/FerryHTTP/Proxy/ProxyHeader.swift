/// What a PROXY protocol header (v1 or v2) said about the connection it starts.
public struct ProxyHeader: Sendable, Equatable {
    /// The client the proxy accepted, or nil when the header says the connection speaks
    /// for itself: v1 `UNKNOWN`, v2 `LOCAL` (a proxy's own health check), v2 `AF_UNSPEC`
    /// or `AF_UNIX` (no IP address to name).
    public var source: ClientAddress?
    /// The address the client connected to, when ``source`` is given.
    public var destination: ClientAddress?

    /// A header naming `source` (and `destination`), or neither.
    public init(source: ClientAddress? = nil, destination: ClientAddress? = nil) {
        self.source = source
        self.destination = destination
    }
}
