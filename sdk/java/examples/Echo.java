import io.github.axesched.executor.CancelledException;
import io.github.axesched.executor.Config;
import io.github.axesched.executor.Executor;
import io.github.axesched.executor.StderrLogger;
import java.time.Duration;
import java.util.Arrays;
import java.util.Map;

/**
 * The echo executor every axe SDK ships (docs/protocol.md): handler "echo" answers its params
 * as compact JSON, sleeps {"sleep_ms": N} first (ending early, failed, when the run is killed or
 * times out), and fails with {"fail": "text"}. Configured from AXE_SCHEDULERS, AXE_LISTEN,
 * AXE_TOKEN and AXE_APP; SIGTERM drains, deregisters and exits 0.
 */
public final class Echo {
    public static void main(String[] args) throws Exception {
        String schedulers = env("AXE_SCHEDULERS", "http://127.0.0.1:7070");
        Executor ex = new Executor(new Config()
                .app(env("AXE_APP", "echo"))
                .schedulers(Arrays.stream(schedulers.split(",")).map(String::trim).filter(s -> !s.isEmpty()).toList())
                .listen(env("AXE_LISTEN", "127.0.0.1:9100"))
                .token(env("AXE_TOKEN", ""))
                .logger(new StderrLogger(System.Logger.Level.INFO)));
        ex.handle("echo", ctx -> {
            Map<?, ?> p = ctx.params() instanceof Map<?, ?> m ? m : Map.of();
            if (p.get("sleep_ms") instanceof Number n) {
                try {
                    ctx.sleep(Duration.ofMillis(n.longValue()));
                } catch (CancelledException e) {
                    throw new CancelledException("cancelled: " + e.getMessage());
                }
            }
            if (p.get("fail") instanceof String f) {
                throw new Exception(f);
            }
            return ctx.paramsJson() == null ? "{}" : ctx.paramsJson();
        });
        ex.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            boolean drained = ex.stop(Duration.ofSeconds(30));
            System.err.println("echo: stopped" + (drained ? "" : " (not drained)"));
            System.err.flush();
            // The JVM exits 143 after SIGTERM; a clean drain is a clean exit.
            Runtime.getRuntime().halt(drained ? 0 : 1);
        }));
        Thread.currentThread().join();
    }

    private static String env(String name, String def) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? def : v;
    }
}
