package io.github.axesched.executor;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

/**
 * A minimal test runner (no JUnit offline): runs every public no-argument method whose name
 * starts with "test" of the listed classes, each on a fresh instance, and prints one line per
 * test and "N passed, N failed" last; exits 1 on a failure. Arguments, if any, are substrings
 * of the tests to run (Class.method).
 */
public final class TestRunner {
    static final List<Class<?>> CLASSES = List.of(JsonTest.class, SignaturesTest.class, ExecutorTest.class);

    public static void main(String[] args) {
        int passed = 0;
        int failed = 0;
        for (Class<?> c : CLASSES) {
            Method[] methods = c.getDeclaredMethods();
            Arrays.sort(methods, Comparator.comparing(Method::getName));
            for (Method m : methods) {
                String name = c.getSimpleName() + "." + m.getName();
                if (!m.getName().startsWith("test") || m.getParameterCount() != 0 || !Modifier.isPublic(m.getModifiers())) {
                    continue;
                }
                if (args.length > 0 && Arrays.stream(args).noneMatch(name::contains)) {
                    continue;
                }
                long t0 = System.nanoTime();
                try {
                    Object target = c.getDeclaredConstructor().newInstance();
                    try {
                        m.invoke(target);
                    } finally {
                        if (target instanceof AutoCloseable ac) {
                            ac.close();
                        }
                    }
                    passed++;
                    System.out.printf("PASS %s (%d ms)%n", name, (System.nanoTime() - t0) / 1_000_000);
                } catch (Throwable t) {
                    Throwable cause = t instanceof InvocationTargetException ite ? ite.getCause() : t;
                    failed++;
                    System.out.printf("FAIL %s: %s%n", name, cause);
                    cause.printStackTrace(System.out);
                }
            }
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed == 0 && passed > 0 ? 0 : 1);
    }
}
