package io.github.axesched.executor;

/**
 * A named piece of work an executor runs. It returns the run's output: a {@link String} is sent
 * as is, {@code null} as "", anything else (a {@code Map}, {@code List}, number, …) as compact
 * JSON. Throwing reports the run failed with the exception's message.
 *
 * <p>The handler runs on a pool thread. When the run is killed or passes its deadline the thread
 * is interrupted and {@link RunContext#isCancelled()} turns true; blocking calls then throw
 * {@link InterruptedException}, which the executor reports as the cancellation's cause.
 */
@FunctionalInterface
public interface Handler {
    Object handle(RunContext ctx) throws Exception;
}
