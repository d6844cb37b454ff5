import io.github.axesched.executor.Config;
import io.github.axesched.executor.Executor;
import java.time.Duration;
import java.util.Map;

public final class Hello {
    public static void main(String[] args) throws Exception {
        Executor ex = new Executor(new Config().app("billing")
                .schedulers("http://127.0.0.1:7070").listen("127.0.0.1:9100").token(System.getenv("AXE_TOKEN")));
        ex.handle("invoice", ctx -> {
            String customer = ctx.params() instanceof Map<?, ?> p ? (String) p.get("customer") : "nobody";
            ctx.checkCancelled();              // throws once killed or past its deadline
            return Map.of("invoiced", customer, "attempt", ctx.attempt());   // sent as JSON
        });
        ex.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> ex.stop(Duration.ofSeconds(30))));
        Thread.currentThread().join();
    }
}
