package io.github.axesched.executor;

import java.text.MessageFormat;
import java.time.Instant;
import java.util.ResourceBundle;

/**
 * A {@link System.Logger} writing one line per message to standard error, with no logging
 * framework behind it. Unlike java.util.logging it keeps logging inside shutdown hooks, so a
 * drain started by SIGTERM is logged to the end.
 */
public final class StderrLogger implements System.Logger {
    private final Level min;

    /** Logs messages of min and above. */
    public StderrLogger(Level min) {
        this.min = min;
    }

    @Override
    public String getName() {
        return "axe-executor";
    }

    @Override
    public boolean isLoggable(Level level) {
        return level != Level.OFF && level.getSeverity() >= min.getSeverity();
    }

    @Override
    public void log(Level level, ResourceBundle bundle, String msg, Throwable thrown) {
        if (!isLoggable(level)) {
            return;
        }
        StringBuilder b = new StringBuilder().append(Instant.now()).append(' ').append(level.getName()).append(' ').append(msg);
        if (thrown != null) {
            b.append(": ").append(thrown);
        }
        synchronized (System.err) {
            System.err.println(b);
            if (thrown != null && level.getSeverity() >= Level.ERROR.getSeverity()) {
                thrown.printStackTrace(System.err);
            }
        }
    }

    @Override
    public void log(Level level, ResourceBundle bundle, String format, Object... params) {
        log(level, bundle, params == null || params.length == 0 ? format : MessageFormat.format(format, params), (Throwable) null);
    }
}
