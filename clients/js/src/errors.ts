/** A protocol error answer (`{"error": {"code", "message", "retryable"}}`) or a transport failure. */
export class FerryError extends Error {
  constructor(
    /** The protocol's code (`lock_held`, `resolution_required`, …), or `network` / `bad_response`. */
    readonly code: string,
    message: string,
    /** The HTTP status, 0 for a transport failure. */
    readonly status: number,
    /** Whether sending the same request again may succeed (5xx, 429, network). */
    readonly retryable: boolean,
    /** The error object's other fields (`holder`, `device_rows`, …). */
    readonly details: Record<string, unknown> = {},
    /** `Retry-After`, in seconds, when the server sent one. */
    readonly retryAfter?: number,
  ) {
    super(message)
    this.name = 'FerryError'
  }
}
