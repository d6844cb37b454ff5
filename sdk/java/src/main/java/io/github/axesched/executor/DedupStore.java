package io.github.axesched.executor;

/**
 * Remembers finished tickets, so that a ticket delivered again is not run again and its result
 * is re-sent instead (docs/protocol.md, Tickets). The default is {@link InMemoryDedupStore}; a
 * store backed by a file or database keeps the guarantee across executor restarts.
 *
 * <p>Methods are called with the executor's admission lock held, so they should be quick; they
 * must be safe to call from several threads.
 */
public interface DedupStore {
    /**
     * A finished ticket: its status ("success" or "failed"), error text, the result body as sent
     * to the scheduler (UTF-8 JSON, re-sent when the ticket comes again), and when it may be
     * forgotten (Unix ms).
     */
    record Finished(String status, String error, byte[] result, long expiresAtMs) {}

    /** The remembered outcome of ticket, or null when unknown or expired at nowMs. */
    Finished get(String ticket, long nowMs);

    /** Remembers a finished ticket until f.expiresAtMs(). */
    void put(String ticket, Finished f);
}
