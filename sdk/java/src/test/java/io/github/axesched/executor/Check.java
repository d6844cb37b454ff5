package io.github.axesched.executor;

import java.util.Objects;
import java.util.function.BooleanSupplier;

/** Assertions for the tests. */
final class Check {
    private Check() {}

    static void eq(Object want, Object got, String what) {
        if (!Objects.equals(want, got)) {
            throw new AssertionError(what + ": want " + want + ", got " + got);
        }
    }

    static void isTrue(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    static void contains(String s, String part, String what) {
        if (s == null || !s.contains(part)) {
            throw new AssertionError(what + ": want text containing " + part + ", got " + s);
        }
    }

    interface Body {
        void run() throws Exception;
    }

    /** Runs body and returns what it threw, failing if it threw nothing or another type. */
    static <T extends Throwable> T throwsA(Class<T> type, Body body, String what) {
        try {
            body.run();
        } catch (Throwable t) {
            if (type.isInstance(t)) {
                return type.cast(t);
            }
            throw new AssertionError(what + ": want " + type.getSimpleName() + ", got " + t, t);
        }
        throw new AssertionError(what + ": want " + type.getSimpleName() + ", nothing thrown");
    }

    /** Waits for cond, polling, up to a generous bound for a busy machine. */
    static void waitFor(BooleanSupplier cond, String what) throws InterruptedException {
        long end = System.nanoTime() + 30_000_000_000L;
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > end) {
                throw new AssertionError("timed out waiting for " + what);
            }
            Thread.sleep(10);
        }
    }
}
