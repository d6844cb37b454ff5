package io.github.axesched.executor;

/** Thrown by {@link RunContext#checkCancelled()} once a run is cancelled; the message is the cause. */
public final class CancelledException extends Exception {
    private static final long serialVersionUID = 1L;

    public CancelledException(String cause) {
        super(cause);
    }
}
