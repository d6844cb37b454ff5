package io.github.axesched.executor;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsParameters;
import com.sun.net.httpserver.HttpsServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.io.OutputStream;
import java.lang.System.Logger.Level;
import java.net.InetSocketAddress;
import java.nio.channels.ClosedByInterruptException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;

/**
 * An axe executor (docs/protocol.md): it registers with the scheduler, serves /axe/run,
 * /axe/runs, /axe/kill and /axe/beat, runs handlers on a bounded pool and reports results back
 * until acknowledged.
 *
 * <pre>{@code
 * Executor ex = new Executor(new Config().app("billing").schedulers("http://127.0.0.1:7070").token(tok));
 * ex.handle("invoice", ctx -> "done " + ctx.params());
 * ex.start();
 * Runtime.getRuntime().addShutdownHook(new Thread(() -> ex.stop(Duration.ofSeconds(30))));
 * }</pre>
 *
 * <p>Guarantees: at most one run per ticket while it is remembered, at most one run per task at
 * a time unless the run is parallel, stale epochs (per shard) refused, deadline and kill
 * interrupt the handler, results re-sent with backoff across the schedulers until
 * acknowledged, graceful drain and deregister on {@link #stop(Duration)}.
 */
public final class Executor {
    /** The protocol version this SDK speaks. */
    public static final int PROTOCOL_VERSION = 2;

    static final String PATH_RUN = "/axe/run";
    static final String PATH_RUNS = "/axe/runs";
    static final String PATH_KILL = "/axe/kill";
    static final String PATH_BEAT = "/axe/beat";
    static final String PATH_REGISTER = "/api/v1/executors/register";
    static final String PATH_HEARTBEAT = "/api/v1/executors/heartbeat";
    static final String PATH_DEREGISTER = "/api/v1/executors/deregister";
    static final String PATH_CALLBACK = "/api/v1/callback";
    static final String PATH_CALLBACK_BATCH = "/api/v1/callback/batch";

    static final int MAX_RUN_BODY = 1 << 20;
    static final int MAX_RUNS_BODY = 4 << 20;
    static final int MAX_SMALL_BODY = 4 << 10;
    static final int MAX_RUNS_PER_CALL = 1000;
    /** Threads serving HTTP requests. */
    static final int HTTP_THREADS = 16;
    /** The most of an oversize signed body read (and dropped) to answer its 413 cleanly. */
    static final int MAX_DRAIN = 16 << 20;
    static final int MAX_ERROR_BYTES = 64 << 10;
    static final int RESULT_BATCH_MAX = 256;
    static final int RESULT_BATCH_BYTES = 512 << 10;

    /** Cancellation causes, as the Go SDK words them. */
    public static final String CAUSE_KILLED = "executor: run killed";
    public static final String CAUSE_DEADLINE = "context deadline exceeded";
    public static final String CAUSE_SHUTDOWN = "executor: executor shut down";

    static {
        // The JDK's server writes a response's headers and body in separate packets; without
        // TCP_NODELAY each small answer waits out the peer's delayed ACK (~40 ms). The property
        // is read once, when the first server is made, so set it before that.
        if (System.getProperty("sun.net.httpserver.nodelay") == null) {
            System.setProperty("sun.net.httpserver.nodelay", "true");
        }
    }

    private final Config cfg;
    private final System.Logger log;
    private final byte[] dispatchKey;
    private final String incarnation;
    private final Map<String, Handler> handlers = new LinkedHashMap<>();

    // Admission state, guarded by mu.
    private final Object mu = new Object();
    private final Map<String, ActiveRun> running = new HashMap<>();
    private final Map<String, String> tasks = new HashMap<>();
    private final Map<String, Delivery> delivering = new HashMap<>();
    private final Map<Integer, Long> shardEpochs = new HashMap<>();
    private long epoch;
    private int inflight;
    private boolean accepting;
    private boolean stopping;
    private boolean started;

    private final ArrayDeque<Delivery> outbox = new ArrayDeque<>();
    private volatile boolean abandoned;
    private final AtomicInteger registrations = new AtomicInteger();
    private volatile boolean registered;
    private volatile long heartbeatMs;
    /**
     * The protocol version of the scheduler, from its last registration answer (absent = 1). A
     * version 1 scheduler signs calls without the incarnation, and they are checked so.
     */
    private volatile int schedulerVersion = PROTOCOL_VERSION;

    private HttpServer server;
    private ExecutorService httpPool;
    private ThreadPoolExecutor pool;
    private ScheduledExecutorService timers;
    private ScheduledExecutorService heartbeats;
    private final List<Thread> senders = new ArrayList<>();
    private SchedulerClient results;
    private SchedulerClient control;
    private String address;

    /** Creates an executor; call {@link #handle} for each handler, then {@link #start()}. */
    public Executor(Config cfg) throws ExecutorException {
        cfg.validate();
        this.cfg = cfg;
        this.log = cfg.logger;
        this.dispatchKey = cfg.token == null || cfg.token.isEmpty() ? null : Signatures.dispatchKey(cfg.token);
        byte[] id = new byte[16];
        new SecureRandom().nextBytes(id);
        this.incarnation = Signatures.hex(id);
    }

    /** Registers a handler under name; before {@link #start()} only. */
    public Executor handle(String name, Handler h) {
        synchronized (mu) {
            if (started) {
                throw new IllegalStateException("handle after start");
            }
            if (name == null || name.isEmpty() || h == null) {
                throw new IllegalArgumentException("a handler needs a name and a body");
            }
            handlers.put(name, h);
        }
        return this;
    }

    /** The address this executor registers (host:port), once started. */
    public String address() {
        return address;
    }

    /** This process's incarnation: a random id made at construction, sent at registration. */
    public String incarnation() {
        return incarnation;
    }

    /** Whether the last registration attempt succeeded. */
    public boolean isRegistered() {
        return registered;
    }

    /** How many times this executor has registered successfully. */
    public int registrations() {
        return registrations.get();
    }

    /**
     * Listens, registers and starts heartbeats. A scheduler that cannot be reached is tried
     * again at every heartbeat tick; a registration refused with 400 or 401 fails the start.
     */
    public void start() throws ExecutorException {
        synchronized (mu) {
            if (started) {
                throw new IllegalStateException("executor already started");
            }
            if (handlers.isEmpty()) {
                throw new ExecutorException(ExecutorException.Kind.INVALID_CONFIG, "invalid executor config: no handler", null);
            }
            started = true;
        }
        InetSocketAddress bind;
        try {
            bind = hostPort(cfg.listen);
        } catch (IllegalArgumentException e) {
            throw new ExecutorException(ExecutorException.Kind.INVALID_CONFIG, "invalid executor config: listen: " + e.getMessage(), e);
        }
        try {
            if (cfg.serverTls != null) {
                HttpsServer s = HttpsServer.create(bind, 1024);
                s.setHttpsConfigurator(new HttpsConfigurator(cfg.serverTls) {
                    @Override
                    public void configure(HttpsParameters p) {
                        SSLParameters sp = getSSLContext().getDefaultSSLParameters();
                        sp.setNeedClientAuth(cfg.requireClientCert);
                        p.setSSLParameters(sp);
                    }
                });
                server = s;
            } else {
                server = HttpServer.create(bind, 1024);
            }
        } catch (IOException e) {
            throw new ExecutorException(ExecutorException.Kind.OTHER, "cannot listen on " + cfg.listen + ": " + e.getMessage(), e);
        }
        int port = server.getAddress().getPort();
        String host = bind.getHostString();
        address = cfg.advertise != null ? cfg.advertise : (host.contains(":") ? "[" + host + "]" : host) + ":" + port;

        // Requests only parse, check and queue runs; a few threads keep up with the scheduler's
        // 8 calls in flight, and more let a slow client not hold the rest up.
        ThreadPoolExecutor hp = new ThreadPoolExecutor(HTTP_THREADS, HTTP_THREADS, 60, TimeUnit.SECONDS,
                new LinkedBlockingQueue<>(), threads("axe-http"));
        hp.allowCoreThreadTimeOut(true);
        httpPool = hp;
        server.setExecutor(httpPool);
        server.createContext("/", this::serve);
        pool = new ThreadPoolExecutor(cfg.poolSize, cfg.poolSize, 0, TimeUnit.SECONDS, new LinkedBlockingQueue<>(),
                threads("axe-handler"));
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, threads("axe-timer"));
        t.setRemoveOnCancelPolicy(true);
        timers = t;
        heartbeats = new ScheduledThreadPoolExecutor(1, threads("axe-heartbeat"));
        results = new SchedulerClient(cfg.schedulers, cfg.token, cfg.requestTimeout, cfg.schedulerTls);
        // Heartbeats use a client (and connections) of their own: a backlog of results never
        // delays them.
        control = new SchedulerClient(cfg.schedulers, cfg.token, cfg.requestTimeout, cfg.schedulerTls);
        for (int i = 0; i < cfg.resultSenders; i++) {
            Thread s = threads("axe-results").newThread(this::sendResults);
            senders.add(s);
            s.start();
        }
        synchronized (mu) {
            accepting = true;
        }
        server.start();
        heartbeatMs = cfg.heartbeatInterval.toMillis();
        try {
            register();
        } catch (ExecutorException e) {
            shutdownNow();
            throw e;
        } catch (IOException e) {
            log.log(Level.WARNING, "cannot register yet, retrying at every heartbeat: " + describe(e));
        }
        scheduleHeartbeat();
        log.log(Level.INFO, "executor " + cfg.app + " serving at " + address + " (incarnation " + incarnation + ")");
    }

    private static ThreadFactory threads(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    static InetSocketAddress hostPort(String hp) {
        int colon = hp.lastIndexOf(':');
        if (colon < 0) {
            throw new IllegalArgumentException("want host:port, got " + hp);
        }
        String host = hp.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port;
        try {
            port = Integer.parseInt(hp.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad port in " + hp);
        }
        return host.isEmpty() ? new InetSocketAddress(port) : new InetSocketAddress(host, port);
    }

    // ---- registration and heartbeats ----

    private void register() throws IOException, ExecutorException {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("app", cfg.app);
        body.put("address", address);
        body.put("protocol", cfg.serverTls != null ? "https" : "http");
        body.put("handlers", new ArrayList<>(handlers.keySet()));
        if (dispatchKey != null) {
            body.put("auth", "signed");
        }
        body.put("version", PROTOCOL_VERSION);
        body.put("incarnation", incarnation);
        SchedulerClient.Response r = control.post(PATH_REGISTER, Json.bytes(body));
        if (r.status() == 200) {
            int version = 1;
            try {
                if (Json.parse(r.body()) instanceof Map<?, ?> m) {
                    if (m.get("heartbeat_interval_ms") instanceof Long hb && hb > 0) {
                        heartbeatMs = Math.min(cfg.heartbeatInterval.toMillis(), hb);
                    }
                    if (m.get("version") instanceof Long v && v > 0) {
                        version = (int) Math.min(v, PROTOCOL_VERSION);
                    }
                }
            } catch (Json.ParseException e) {
                log.log(Level.WARNING, "registration answer is not JSON: " + e.getMessage());
            }
            if (version < PROTOCOL_VERSION && dispatchKey != null) {
                log.log(Level.WARNING, "the scheduler speaks protocol version " + version
                        + ": its calls are signed without this executor's incarnation; upgrade it to bind them");
            }
            schedulerVersion = version;
            registered = true;
            registrations.incrementAndGet();
            return;
        }
        registered = false;
        String why = PATH_REGISTER + " answered " + r.status() + ": " + new String(r.body(), StandardCharsets.UTF_8);
        if (r.status() == 400) {
            throw new ExecutorException(ExecutorException.Kind.REGISTRATION_REJECTED, "cannot register: " + why, null);
        }
        if (r.status() == 401 || r.status() == 403) {
            throw new ExecutorException(ExecutorException.Kind.UNAUTHORIZED, "cannot register: " + why, null);
        }
        throw new IOException("cannot register: " + why);
    }

    private void scheduleHeartbeat() {
        try {
            heartbeats.schedule(this::heartbeatTick, heartbeatMs, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // stopped
        }
    }

    private void heartbeatTick() {
        boolean draining;
        synchronized (mu) {
            draining = stopping;
        }
        try {
            if (!registered) {
                if (!draining) {
                    register();
                }
            } else if (heartbeat() == 404 && !draining) {
                log.log(Level.INFO, "the scheduler does not know this executor: registering again");
                registered = false;
                register();
            }
        } catch (ExecutorException | IOException e) {
            log.log(Level.WARNING, describe(e));
        } catch (RuntimeException e) {
            log.log(Level.ERROR, "heartbeat failed", e);
        }
        scheduleHeartbeat();
    }

    private int heartbeat() throws IOException {
        int n;
        synchronized (mu) {
            n = inflight;
        }
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("app", cfg.app);
        body.put("address", address);
        body.put("running", n);
        if (schedulerVersion >= 2) {
            body.put("incarnation", incarnation);
        }
        SchedulerClient.Response r = control.post(PATH_HEARTBEAT, Json.bytes(body));
        if (r.status() != 200 && r.status() != 404) {
            log.log(Level.WARNING, "heartbeat answered " + r.status());
        }
        return r.status();
    }

    // ---- HTTP ----

    private void serve(HttpExchange ex) throws IOException {
        try {
            serveExchange(ex);
        } catch (RuntimeException e) {
            log.log(Level.ERROR, "executor endpoint failed", e);
            reply(ex, 500, Map.of("error", "internal error"), true);
        } finally {
            ex.close();
        }
    }

    private void serveExchange(HttpExchange ex) throws IOException {
        String path = ex.getRequestURI().getPath();
        String auth = ex.getRequestHeaders().getFirst("Authorization");
        long declared = declaredLength(ex);
        boolean bearerProbe = false;
        if (dispatchKey != null) {
            bearerProbe = PATH_BEAT.equals(path) && auth != null
                    && MessageDigest.isEqual(auth.getBytes(StandardCharsets.UTF_8),
                            ("Bearer " + cfg.token).getBytes(StandardCharsets.UTF_8));
            if (!bearerProbe && !Signatures.plausible(auth, System.currentTimeMillis())) {
                // An unsigned body is read only when it is small (and then only to keep the
                // connection usable); a larger one is answered before it is read.
                boolean small = declared >= 0 && declared <= MAX_SMALL_BODY;
                if (small) {
                    ex.getRequestBody().readNBytes(MAX_SMALL_BODY);
                }
                reply(ex, 401, Map.of("error", Signatures.BAD_SIGNATURE), !small);
                return;
            }
        }
        int limit = switch (path) {
            case PATH_RUN -> MAX_RUN_BODY;
            case PATH_RUNS -> MAX_RUNS_BODY;
            default -> MAX_SMALL_BODY;
        };
        byte[] body = null;
        InputStream in = ex.getRequestBody();
        if (declared <= limit) {
            body = in.readNBytes(limit + 1);
        }
        if (body == null || body.length > limit) {
            // A signed caller's body over the limit is read on (up to MAX_DRAIN) and dropped
            // before the 413, so that closing the connection does not reset the answer away.
            boolean drained = declared >= 0 && declared <= MAX_DRAIN && drain(in, MAX_DRAIN);
            reply(ex, 413, Map.of("error", "request body over the limit of " + limit + " bytes for " + path), !drained);
            return;
        }
        String epochHeader = ex.getRequestHeaders().getFirst("X-Axe-Epoch");
        if (dispatchKey != null && !bearerProbe) {
            String inc = ex.getRequestHeaders().getFirst("X-Axe-Incarnation");
            String epochText = epochHeader == null ? "" : epochHeader;
            long now = System.currentTimeMillis();
            String bad;
            if (schedulerVersion < 2) {
                bad = Signatures.verify(dispatchKey, auth, address, path, epochText, null, body, now);
            } else if (inc == null || inc.isEmpty()) {
                bad = Signatures.BAD_SIGNATURE;
            } else if (!inc.equals(incarnation)) {
                // Say "another incarnation" only for a call validly signed for the one it names:
                // the scheduler then knows nothing of it was delivered.
                bad = Signatures.verify(dispatchKey, auth, address, path, epochText, inc, body, now);
                if (bad == null) {
                    bad = Signatures.BAD_SIGNATURE + ": " + Signatures.OTHER_INCARNATION;
                }
            } else {
                bad = Signatures.verify(dispatchKey, auth, address, path, epochText, incarnation, body, now);
            }
            if (bad != null) {
                log.log(Level.WARNING, "refused a call without a valid scheduler signature: " + path + " from "
                        + ex.getRemoteAddress() + ": " + bad);
                reply(ex, 401, Map.of("error", bad), false);
                return;
            }
        }
        String method = ex.getRequestMethod();
        switch (path) {
            case PATH_RUN, PATH_RUNS, PATH_KILL -> {
                if (!"POST".equals(method)) {
                    ex.getResponseHeaders().set("Allow", "POST");
                    reply(ex, 405, Map.of("error", "use POST"), false);
                    return;
                }
            }
            case PATH_BEAT -> {
                if (!"GET".equals(method)) {
                    ex.getResponseHeaders().set("Allow", "GET");
                    reply(ex, 405, Map.of("error", "use GET"), false);
                    return;
                }
            }
            default -> {
                reply(ex, 404, Map.of("error", "no endpoint " + path), false);
                return;
            }
        }
        Answer a;
        try {
            long headerEpoch = parseEpochHeader(epochHeader);
            a = switch (path) {
                case PATH_RUN -> handleRun(body, ex, headerEpoch, epochHeader);
                case PATH_RUNS -> handleRuns(body, headerEpoch, epochHeader);
                case PATH_KILL -> handleKill(body, headerEpoch, epochHeader);
                default -> handleBeat();
            };
        } catch (RunRequest.Invalid e) {
            a = new Answer(400, Map.of("error", e.getMessage()));
        }
        reply(ex, a.code(), a.body(), false);
    }

    /**
     * Reads and drops up to max bytes of in; whether it ended. (The server's body stream does
     * not bound skip() by the body's length, so it is read.)
     */
    private static boolean drain(InputStream in, int max) throws IOException {
        byte[] buf = new byte[64 << 10];
        long total = 0;
        int n;
        while ((n = in.read(buf)) >= 0) {
            total += n;
            if (total > max) {
                return false;
            }
        }
        return true;
    }

    private static long declaredLength(HttpExchange ex) {
        String cl = ex.getRequestHeaders().getFirst("Content-Length");
        if (cl == null) {
            String te = ex.getRequestHeaders().getFirst("Transfer-Encoding");
            return te == null ? 0 : -1;
        }
        try {
            return Long.parseLong(cl.trim());
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    private static void reply(HttpExchange ex, int code, Object body, boolean close) throws IOException {
        byte[] b = Json.bytes(body);
        ex.getResponseHeaders().set("Content-Type", "application/json");
        if (close) {
            ex.getResponseHeaders().set("Connection", "close");
        }
        ex.sendResponseHeaders(code, b.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(b);
        }
    }

    /** What an endpoint answers: its status and JSON body. */
    record Answer(int code, Object body) {}

    static long parseEpochHeader(String h) throws RunRequest.Invalid {
        if (h == null || h.isEmpty()) {
            return 0;
        }
        try {
            long e = Long.parseLong(h);
            if (e >= 0 && Long.toString(e).equals(h)) {
                return e;
            }
        } catch (NumberFormatException e) {
            // fall through
        }
        throw new RunRequest.Invalid("invalid run: header X-Axe-Epoch must be a non-negative integer, got " + Json.quote(h));
    }

    /** The epoch a call carries: its body's, else the header's; a contradiction is a 400. */
    static long callEpoch(long body, long header, String raw) throws RunRequest.Invalid {
        if (raw == null || raw.isEmpty()) {
            return body;
        }
        if (body != 0 && body != header) {
            throw new RunRequest.Invalid("invalid run: header X-Axe-Epoch is " + Json.quote(raw) + " but the body says " + body);
        }
        return header;
    }

    private Answer handleRun(byte[] body, HttpExchange ex, long headerEpoch, String rawEpoch) throws RunRequest.Invalid {
        RunRequest req;
        try {
            req = RunRequest.from(Json.parseCapturing(Json.decode(body), "params", 1));
        } catch (Json.ParseException e) {
            throw new RunRequest.Invalid("invalid run: " + e.getMessage());
        }
        checkHeader(ex, "X-Axe-Ticket", req.ticket());
        checkHeader(ex, "X-Axe-Task", req.task());
        checkHeader(ex, "X-Axe-Attempt", Integer.toString(req.attempt()));
        long e = callEpoch(req.epoch(), headerEpoch, rawEpoch);
        List<ActiveRun> admitted = new ArrayList<>(1);
        Answer a = admit(req, e, admitted);
        launch(admitted);
        return a;
    }

    private static void checkHeader(HttpExchange ex, String name, String want) throws RunRequest.Invalid {
        String got = ex.getRequestHeaders().getFirst(name);
        if (got != null && !got.isEmpty() && !got.equals(want)) {
            throw new RunRequest.Invalid("invalid run: header " + name + " is " + Json.quote(got) + " but the body says " + Json.quote(want));
        }
    }

    private Answer handleRuns(byte[] body, long headerEpoch, String rawEpoch) throws RunRequest.Invalid {
        Object v;
        try {
            v = Json.parseCapturing(Json.decode(body), "params", 3);
        } catch (Json.ParseException e) {
            throw new RunRequest.Invalid("invalid runs: " + e.getMessage());
        }
        if (!(v instanceof Map<?, ?> m)) {
            throw new RunRequest.Invalid("invalid runs: the body must be a JSON object");
        }
        if (!(m.get("runs") instanceof List<?> runs)) {
            throw new RunRequest.Invalid("invalid runs: runs: " + (m.get("runs") == null ? "required" : "must be an array"));
        }
        if (runs.isEmpty()) {
            throw new RunRequest.Invalid("invalid runs: runs: one or more required");
        }
        if (runs.size() > MAX_RUNS_PER_CALL) {
            throw new RunRequest.Invalid("invalid runs: runs: at most " + MAX_RUNS_PER_CALL + " per call, got " + runs.size());
        }
        List<Object> answers = new ArrayList<>(runs.size());
        // Every run is admitted before any starts: each is judged exactly as /axe/run would
        // judge it alone at that point of the batch (a ticket repeated later in the batch is
        // a duplicate of a run not yet finished, however fast its handler).
        List<ActiveRun> admitted = new ArrayList<>();
        for (Object r : runs) {
            Answer a;
            try {
                RunRequest req = RunRequest.from(r);
                a = admit(req, callEpoch(req.epoch(), headerEpoch, rawEpoch), admitted);
            } catch (RunRequest.Invalid e) {
                a = new Answer(400, Map.of("error", e.getMessage()));
            }
            Map<String, Object> item = new LinkedHashMap<>();
            item.put("code", a.code());
            item.put("body", a.body());
            answers.add(item);
        }
        launch(admitted);
        return new Answer(200, Map.of("results", answers));
    }

    private Answer handleKill(byte[] body, long headerEpoch, String rawEpoch) throws RunRequest.Invalid {
        Map<String, Object> m;
        try {
            m = Json.parseObject(body);
        } catch (Json.ParseException e) {
            throw new RunRequest.Invalid("invalid kill: " + e.getMessage());
        }
        String ticket;
        long bodyEpoch;
        Integer shard;
        try {
            ticket = RunRequest.name(m, "ticket", true);
            bodyEpoch = RunRequest.integer(m, "epoch", false, 0, Long.MAX_VALUE);
            shard = RunRequest.shard(m);
        } catch (RunRequest.Invalid e) {
            throw new RunRequest.Invalid(e.getMessage().replaceFirst("^invalid run", "invalid kill"));
        }
        long e = callEpoch(bodyEpoch, headerEpoch, rawEpoch);
        ActiveRun ar;
        synchronized (mu) {
            Answer stale = staleEpoch(e, shard);
            if (stale != null) {
                return stale;
            }
            ar = running.get(ticket);
        }
        if (ar == null) {
            return new Answer(404, Map.of("error", "ticket " + Json.quote(ticket) + " is not running here"));
        }
        ar.cancel(CAUSE_KILLED);
        log.log(Level.INFO, "run killed: ticket " + ticket + " task " + ar.req.task());
        return new Answer(200, Map.of("killed", true));
    }

    private Answer handleBeat() {
        int n;
        synchronized (mu) {
            n = inflight;
        }
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("app", cfg.app);
        m.put("running", n);
        m.put("handlers", new ArrayList<>(handlers.keySet()));
        return new Answer(200, m);
    }

    // ---- admission ----

    /** Records epoch (of shard, or of the single primary) and refuses one below the highest seen. Holds mu. */
    private Answer staleEpoch(long e, Integer shard) {
        if (e == 0) {
            return null;
        }
        if (shard == null) {
            if (e < epoch) {
                return new Answer(409, Map.of("error", "stale epoch " + e + " < " + epoch));
            }
            epoch = e;
            return null;
        }
        long highest = shardEpochs.getOrDefault(shard, 0L);
        if (e < highest) {
            return new Answer(409, Map.of("error", "stale epoch " + e + " < " + highest + " of shard " + shard));
        }
        if (e > highest) {
            shardEpochs.put(shard, e);
        }
        return null;
    }

    /** The highest epoch seen on a call without a shard (0 if none). */
    public long epoch() {
        synchronized (mu) {
            return epoch;
        }
    }

    /** The highest epoch seen on a call of shard (0 if none). */
    public long shardEpoch(int shard) {
        synchronized (mu) {
            return shardEpochs.getOrDefault(shard, 0L);
        }
    }

    /**
     * Decides what /axe/run answers for req; an admitted run is counted as running and added to
     * admitted, for {@link #launch} to start.
     */
    private Answer admit(RunRequest req, long e, List<ActiveRun> admitted) {
        long now = System.currentTimeMillis();
        Delivery resend = null;
        ActiveRun ar;
        synchronized (mu) {
            Answer stale = staleEpoch(e, req.shard());
            if (stale != null) {
                return stale;
            }
            if (!accepting) {
                return new Answer(503, Map.of("error", "executor is stopping"));
            }
            if (running.containsKey(req.ticket())) {
                return new Answer(202, Map.of("accepted", true, "duplicate", true));
            }
            DedupStore.Finished f = cfg.dedupStore.get(req.ticket(), now);
            if (f != null) {
                // The scheduler asks again for a finished ticket: it most likely never got the
                // result, so send it again (once more after a delivery under way ends).
                Delivery d = delivering.get(req.ticket());
                if (d != null) {
                    d.again = true;
                } else {
                    resend = new Delivery(req.ticket(), f.result());
                    delivering.put(req.ticket(), resend);
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("duplicate", true);
                m.put("status", f.status());
                m.put("error", f.error());
                if (resend != null) {
                    push(resend);
                }
                return new Answer(200, m);
            }
            Handler h = handlers.get(req.handler());
            if (h == null) {
                return new Answer(404, Map.of("error", "unknown handler " + Json.quote(req.handler())));
            }
            String other = tasks.get(req.task());
            if (other != null && !req.parallel()) {
                return new Answer(409, Map.of("error", "task " + Json.quote(req.task()) + " is already running here with ticket " + Json.quote(other)));
            }
            if (inflight >= cfg.poolSize + cfg.queueSize) {
                return new Answer(429, Map.of("error", "busy"));
            }
            long ttl = req.dedupTtlMs() > 0 ? req.dedupTtlMs() : cfg.dedupTtl.toMillis();
            ar = new ActiveRun(req, h, ttl);
            running.put(req.ticket(), ar);
            if (!req.parallel()) {
                tasks.put(req.task(), req.ticket());
            }
            inflight++;
        }
        admitted.add(ar);
        return new Answer(202, Map.of("accepted", true));
    }

    /** Arms the deadlines of admitted runs and hands them to the pool. */
    private void launch(List<ActiveRun> admitted) {
        long now = System.currentTimeMillis();
        for (ActiveRun ar : admitted) {
            long deadline = ar.req.deadline();
            if (deadline > 0) {
                if (deadline <= now) {
                    ar.cancel(CAUSE_DEADLINE);
                } else {
                    ar.timer = timers.schedule(() -> ar.cancel(CAUSE_DEADLINE), deadline - now, TimeUnit.MILLISECONDS);
                }
            }
            pool.execute(() -> execute(ar));
        }
    }

    /** A run admitted and not yet finished. */
    private static final class ActiveRun {
        final RunRequest req;
        final Handler handler;
        final long ttlMs;
        final RunContext ctx;
        volatile ScheduledFuture<?> timer;
        private Thread thread;

        ActiveRun(RunRequest req, Handler handler, long ttlMs) {
            this.req = req;
            this.handler = handler;
            this.ttlMs = ttlMs;
            this.ctx = new RunContext(req);
        }

        /** Cancels with why (the first cause wins) and interrupts the handler's thread. */
        synchronized void cancel(String why) {
            if (ctx.cancel(why) && thread != null) {
                thread.interrupt();
            }
        }

        synchronized boolean enter() {
            if (ctx.isCancelled()) {
                return false;
            }
            thread = Thread.currentThread();
            return true;
        }

        synchronized void leave() {
            thread = null;
            Thread.interrupted();
        }
    }

    private void execute(ActiveRun ar) {
        long started = System.currentTimeMillis();
        String status = "success";
        String error = "";
        String output = "";
        if (!ar.enter()) {
            status = "failed";
            error = "handler not started: " + ar.ctx.cancelCause();
        } else {
            try {
                output = outputOf(ar.handler.handle(ar.ctx));
            } catch (Throwable t) {
                status = "failed";
                error = errorOf(t, ar.ctx.cancelCause());
                if (t instanceof Error && !(t instanceof AssertionError) && !(t instanceof StackOverflowError)) {
                    log.log(Level.ERROR, "handler of ticket " + ar.req.ticket() + " threw", t);
                }
            } finally {
                ar.leave();
            }
        }
        if (ar.timer != null) {
            ar.timer.cancel(false);
        }
        finish(ar, status, error, output, started, System.currentTimeMillis());
    }

    private static String outputOf(Object v) {
        if (v == null) {
            return "";
        }
        if (v instanceof String s) {
            return s;
        }
        return Json.write(v);
    }

    static String errorOf(Throwable t, String cause) {
        String msg = t.getMessage();
        if (t instanceof CancelledException && msg != null && !msg.isEmpty()) {
            return msg;
        }
        boolean interrupted = t instanceof InterruptedException || t instanceof InterruptedIOException
                || t instanceof ClosedByInterruptException || t instanceof CancelledException;
        if (cause != null && interrupted) {
            return cause;
        }
        if (msg == null || msg.isEmpty()) {
            msg = t.getClass().getName();
        }
        return cause != null && !msg.contains(cause) ? msg + " (" + cause + ")" : msg;
    }

    private void finish(ActiveRun ar, String status, String error, String output, long started, long ended) {
        error = clipHead(error, MAX_ERROR_BYTES);
        if ("failed".equals(status) && error.isEmpty()) {
            error = "handler failed";
        }
        Map<String, Object> cb = new LinkedHashMap<>();
        cb.put("ticket", ar.req.ticket());
        cb.put("task", ar.req.task());
        cb.put("app", cfg.app);
        cb.put("address", address);
        cb.put("status", status);
        cb.put("error", error);
        cb.put("output", clipTail(output, cfg.outputLimit));
        cb.put("started_at", started);
        cb.put("ended_at", ended);
        cb.put("duration_ms", ended - started);
        byte[] body = Json.bytes(cb);
        synchronized (mu) {
            try {
                cfg.dedupStore.put(ar.req.ticket(), new DedupStore.Finished(status, error, body, ended + ar.ttlMs));
            } catch (RuntimeException e) {
                log.log(Level.ERROR, "cannot remember ticket " + ar.req.ticket(), e);
            }
            running.remove(ar.req.ticket());
            if (ar.req.ticket().equals(tasks.get(ar.req.task()))) {
                tasks.remove(ar.req.task());
            }
            inflight--;
            Delivery d = delivering.get(ar.req.ticket());
            if (d != null) {
                d.again = true;
            } else {
                d = new Delivery(ar.req.ticket(), body);
                delivering.put(ar.req.ticket(), d);
                push(d);
            }
            mu.notifyAll();
        }
    }

    /** The last limit UTF-8 bytes of s, not splitting a character. */
    static String clipTail(String s, int limit) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length <= limit) {
            return s;
        }
        int from = b.length - limit;
        while (from < b.length && (b[from] & 0xC0) == 0x80) {
            from++;
        }
        return new String(b, from, b.length - from, StandardCharsets.UTF_8);
    }

    /** The first limit UTF-8 bytes of s, not splitting a character. */
    static String clipHead(String s, int limit) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        if (b.length <= limit) {
            return s;
        }
        int to = limit;
        while (to > 0 && (b[to] & 0xC0) == 0x80) {
            to--;
        }
        return new String(b, 0, to, StandardCharsets.UTF_8);
    }

    // ---- result delivery ----

    /** One result on its way to the scheduler. */
    private static final class Delivery {
        final String ticket;
        final byte[] body;
        int attempts;
        boolean again;

        Delivery(String ticket, byte[] body) {
            this.ticket = ticket;
            this.body = body;
        }
    }

    /** Queues d for the senders. Holds mu. */
    private void push(Delivery d) {
        outbox.addLast(d);
        mu.notifyAll();
    }

    private void sendResults() {
        List<Delivery> batch = new ArrayList<>();
        while (true) {
            batch.clear();
            synchronized (mu) {
                while (outbox.isEmpty() && !abandoned) {
                    try {
                        mu.wait();
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (abandoned) {
                    return;
                }
                int bytes = 0;
                while (!outbox.isEmpty() && batch.size() < RESULT_BATCH_MAX) {
                    Delivery d = outbox.peekFirst();
                    if (!batch.isEmpty() && bytes + d.body.length > RESULT_BATCH_BYTES) {
                        break;
                    }
                    bytes += d.body.length;
                    batch.add(outbox.pollFirst());
                }
            }
            deliver(batch);
        }
    }

    private void deliver(List<Delivery> batch) {
        if (batch.size() == 1) {
            Delivery d = batch.get(0);
            int code;
            try {
                code = results.post(PATH_CALLBACK, d.body).status();
            } catch (IOException e) {
                log.log(Level.WARNING, "cannot send the result of " + d.ticket + ": " + describe(e));
                code = -1;
            }
            settle(d, code);
            return;
        }
        StringBuilder b = new StringBuilder("{\"results\":[");
        for (int i = 0; i < batch.size(); i++) {
            if (i > 0) {
                b.append(',');
            }
            b.append(new String(batch.get(i).body, StandardCharsets.UTF_8));
        }
        b.append("]}");
        List<?> items = null;
        try {
            SchedulerClient.Response r = results.post(PATH_CALLBACK_BATCH, b.toString().getBytes(StandardCharsets.UTF_8));
            if (r.status() == 200 && Json.parse(r.body()) instanceof Map<?, ?> m && m.get("results") instanceof List<?> l
                    && l.size() == batch.size()) {
                items = l;
            } else {
                log.log(Level.WARNING, "result batch answered " + r.status());
            }
        } catch (IOException | Json.ParseException e) {
            log.log(Level.WARNING, "cannot send a batch of " + batch.size() + " results: " + describe(e));
        }
        for (int i = 0; i < batch.size(); i++) {
            int code = -1;
            if (items != null && items.get(i) instanceof Map<?, ?> item && item.get("status") instanceof Long s) {
                code = s.intValue();
            }
            settle(batch.get(i), code);
        }
    }

    /** Ends a delivery the scheduler settled (200, or final 400/404/409), else re-sends it with backoff. */
    private void settle(Delivery d, int code) {
        boolean done = code == 200 || code == 400 || code == 404 || code == 409;
        if (code != 200 && done) {
            log.log(Level.WARNING, "the scheduler refused the result of " + d.ticket + " for good: " + code);
        }
        synchronized (mu) {
            if (done) {
                if (d.again) {
                    d.again = false;
                    d.attempts = 0;
                    push(d);
                } else {
                    delivering.remove(d.ticket);
                    mu.notifyAll();
                }
                return;
            }
            if (abandoned) {
                delivering.remove(d.ticket);
                mu.notifyAll();
                return;
            }
        }
        long delay = cfg.resendMin.toMillis() << Math.min(d.attempts, 20);
        delay = Math.min(delay, cfg.resendMax.toMillis());
        d.attempts++;
        try {
            timers.schedule(() -> {
                synchronized (mu) {
                    push(d);
                }
            }, delay, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            synchronized (mu) {
                delivering.remove(d.ticket);
            }
        }
    }

    /** Runs accepted and not yet finished (executing plus queued). */
    public int running() {
        synchronized (mu) {
            return inflight;
        }
    }

    /** Results not yet acknowledged by the scheduler. */
    public int pendingResults() {
        synchronized (mu) {
            return delivering.size();
        }
    }

    // ---- shutdown ----

    /**
     * Stops gracefully, in this order: answer 503 to new runs; deregister; let accepted runs
     * finish and deliver their results (heartbeats go on meanwhile, so the scheduler does not
     * declare a draining executor lost); then stop heartbeats, the server and the pools. If
     * timeout passes first, running handlers are cancelled ({@link #CAUSE_SHUTDOWN}) and results
     * not yet acknowledged are abandoned (the scheduler times those runs out). Returns whether
     * everything drained. Stopping twice, or an executor never started, is harmless.
     */
    public boolean stop(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        synchronized (mu) {
            if (!started || stopping) {
                return true;
            }
            stopping = true;
            accepting = false;
        }
        long t0 = System.nanoTime();
        deregister(t0);
        boolean drained = true;
        t0 = System.nanoTime();
        synchronized (mu) {
            while (inflight > 0 || !delivering.isEmpty()) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    drained = false;
                    break;
                }
                try {
                    mu.wait(Math.max(1, left / 1_000_000));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    drained = false;
                    break;
                }
            }
            if (!drained) {
                for (ActiveRun ar : running.values()) {
                    ar.cancel(CAUSE_SHUTDOWN);
                }
            }
        }
        log.log(Level.INFO, (drained ? "drained runs and results in " : "gave up draining after ") + ms(t0) + " ms");
        shutdownNow();
        return drained;
    }

    /** An exception's message, or its class when it has none (a refused connection has none). */
    static String describe(Exception e) {
        String m = e.getMessage();
        return m == null || m.isEmpty() ? e.getClass().getSimpleName() : m;
    }

    private static long ms(long t0) {
        return (System.nanoTime() - t0) / 1_000_000;
    }

    private void deregister(long t0) {
        if (!registered && registrations.get() == 0) {
            return;
        }
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("app", cfg.app);
        body.put("address", address);
        body.put("incarnation", incarnation);
        try {
            SchedulerClient.Response r = control.post(PATH_DEREGISTER, Json.bytes(body));
            if (r.status() == 200) {
                log.log(Level.INFO, "deregistered in " + ms(t0) + " ms");
            } else {
                log.log(Level.WARNING, "deregister answered " + r.status() + ": " + new String(r.body(), StandardCharsets.UTF_8));
            }
        } catch (IOException e) {
            log.log(Level.WARNING, "cannot deregister: " + describe(e));
        }
    }

    private void shutdownNow() {
        synchronized (mu) {
            accepting = false;
            abandoned = true;
            mu.notifyAll();
        }
        if (heartbeats != null) {
            heartbeats.shutdownNow();
        }
        if (server != null) {
            server.stop(0);
        }
        if (httpPool != null) {
            httpPool.shutdownNow();
        }
        if (pool != null) {
            pool.shutdownNow();
        }
        if (timers != null) {
            timers.shutdownNow();
        }
        for (Thread s : senders) {
            s.interrupt();
        }
    }
}
