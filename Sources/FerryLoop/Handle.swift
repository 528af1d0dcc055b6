import CLibUV

/// Casts a typed libuv handle pointer to the generic `uv_handle_t` libuv's
/// handle functions take.
@inline(__always)
func asHandle<T>(_ pointer: UnsafeMutablePointer<T>) -> UnsafeMutablePointer<uv_handle_t> {
    UnsafeMutableRawPointer(pointer).assumingMemoryBound(to: uv_handle_t.self)
}

/// Closes a handle whose `data` holds a retained reference to its owner: the
/// close callback releases the owner and frees the handle's memory, so neither
/// outlives the other.
func closeOwnedHandle<T>(_ pointer: UnsafeMutablePointer<T>) {
    let handle = asHandle(pointer)
    guard uv_is_closing(handle) == 0 else { return }
    uv_close(handle) { handle in
        guard let handle else { return }
        if let data = handle.pointee.data {
            Unmanaged<AnyObject>.fromOpaque(data).release()
        }
        handle.deallocate()
    }
}
