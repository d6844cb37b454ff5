package io.github.axesched.executor;

import java.time.Duration;
import java.time.Instant;

/**
 * What a {@link Handler} knows of its run, and whether the run has been cancelled (killed
 * through /axe/kill, past its deadline, or the executor shut down).
 */
public final class RunContext {
    private final RunRequest run;
    private volatile String cause;

    RunContext(RunRequest run) {
        this.run = run;
    }

    /** The run's globally unique ticket (its idempotency key). */
    public String ticket() {
        return run.ticket();
    }

    /** The task the run belongs to. */
    public String task() {
        return run.task();
    }

    /** The handler name the run was sent to. */
    public String handler() {
        return run.handler();
    }

    /** The task's group ("" if none). */
    public String group() {
        return run.group();
    }

    /** The attempt number, from 1; retries increase it. */
    public int attempt() {
        return run.attempt();
    }

    /**
     * The task's params, parsed: a {@code Map<String,Object>}, {@code List<Object>}, String,
     * Long, Double, Boolean, or null when the run has none.
     */
    public Object params() {
        return run.params();
    }

    /** The params as compact JSON text as sent, or null when the run has none. */
    public String paramsJson() {
        return run.paramsJson();
    }

    /** When the run was due, or null when unknown. */
    public Instant scheduledAt() {
        return run.scheduledAt() == 0 ? null : Instant.ofEpochMilli(run.scheduledAt());
    }

    /** When the scheduler times the run out, or null for none. */
    public Instant deadline() {
        return run.deadline() == 0 ? null : Instant.ofEpochMilli(run.deadline());
    }

    /** Whether the run was cancelled: killed, past its deadline, or the executor shut down. */
    public boolean isCancelled() {
        return cause != null;
    }

    /**
     * Why the run was cancelled ("executor: run killed", "context deadline exceeded",
     * "executor: executor shut down"), or null while it is not.
     */
    public String cancelCause() {
        return cause;
    }

    /** Throws {@link CancelledException} once the run is cancelled. */
    public void checkCancelled() throws CancelledException {
        String c = cause;
        if (c != null) {
            throw new CancelledException(c);
        }
    }

    /**
     * Sleeps for d, or less when the run is cancelled meanwhile: then it throws
     * {@link CancelledException} naming the cause.
     */
    public void sleep(Duration d) throws CancelledException {
        long end = System.nanoTime() + d.toNanos();
        while (true) {
            checkCancelled();
            long left = end - System.nanoTime();
            if (left <= 0) {
                return;
            }
            try {
                Thread.sleep(Math.max(1, Math.min(left / 1_000_000, 50)));
            } catch (InterruptedException e) {
                checkCancelled();
                Thread.currentThread().interrupt();
                throw new CancelledException("interrupted");
            }
        }
    }

    /** Sets the cause once; returns whether this call set it. */
    boolean cancel(String why) {
        synchronized (this) {
            if (cause != null) {
                return false;
            }
            cause = why;
            return true;
        }
    }
}
