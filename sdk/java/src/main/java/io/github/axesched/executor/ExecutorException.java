package io.github.axesched.executor;

/** A failure of {@link Executor#start()}: configuration, listening or registration. */
public class ExecutorException extends Exception {
    private static final long serialVersionUID = 1L;

    /** What went wrong, for callers that act on it. */
    public enum Kind {
        /** The configuration is invalid. */
        INVALID_CONFIG,
        /** The scheduler refused the registration (400): retrying cannot fix it. */
        REGISTRATION_REJECTED,
        /** The scheduler refused the token (401), or it may not act for this app (403). */
        UNAUTHORIZED,
        /** Anything else (e.g. the listen address is taken). */
        OTHER
    }

    private final Kind kind;

    public ExecutorException(Kind kind, String message, Throwable cause) {
        super(message, cause);
        this.kind = kind;
    }

    public Kind kind() {
        return kind;
    }
}
