package io.github.axesched.executor;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import javax.net.ssl.SSLContext;

/**
 * An executor's configuration. Every setter returns this, so a configuration reads as one
 * chain; each field's doc says its default. {@link Executor#Executor(Config)} checks it.
 */
public final class Config {
    /** Listen address when none is set: loopback, a free port. */
    public static final String LISTEN_DEFAULT = "127.0.0.1:0";
    /** Heartbeat period (R5.2: every 10 s). */
    public static final Duration HEARTBEAT_INTERVAL_DEFAULT = Duration.ofSeconds(10);
    /** Workers per CPU in the handler pool (the seed: cores × 2). */
    public static final int POOL_SIZE_PER_CPU_DEFAULT = 2;
    /** Accepted runs that may wait for a worker (the seed: 200–500). */
    public static final int QUEUE_SIZE_DEFAULT = 256;
    /** How long a finished ticket is remembered when the run carries no dedup_ttl_ms. */
    public static final Duration DEDUP_TTL_DEFAULT = Duration.ofMinutes(10);
    /** First delay before a result is re-sent. */
    public static final Duration RESEND_MIN_DEFAULT = Duration.ofMillis(500);
    /** Cap of the doubling re-send delay. */
    public static final Duration RESEND_MAX_DEFAULT = Duration.ofSeconds(30);
    /** Bound of one HTTP call to one scheduler address. */
    public static final Duration REQUEST_TIMEOUT_DEFAULT = Duration.ofSeconds(5);
    /** Result calls in flight at once. */
    public static final int RESULT_SENDERS_DEFAULT = 8;
    /** Largest output sent (the tail is kept). */
    public static final int OUTPUT_LIMIT_DEFAULT = 64 << 10;
    /** The most output the scheduler takes. */
    public static final int OUTPUT_LIMIT_MAX = 1 << 20;

    String app;
    final List<String> schedulers = new ArrayList<>();
    String listen = LISTEN_DEFAULT;
    String advertise;
    String token;
    Duration heartbeatInterval = HEARTBEAT_INTERVAL_DEFAULT;
    int poolSize;
    int queueSize = QUEUE_SIZE_DEFAULT;
    Duration dedupTtl = DEDUP_TTL_DEFAULT;
    DedupStore dedupStore;
    Duration resendMin = RESEND_MIN_DEFAULT;
    Duration resendMax = RESEND_MAX_DEFAULT;
    Duration requestTimeout = REQUEST_TIMEOUT_DEFAULT;
    int resultSenders = RESULT_SENDERS_DEFAULT;
    int outputLimit = OUTPUT_LIMIT_DEFAULT;
    SSLContext serverTls;
    boolean requireClientCert;
    SSLContext schedulerTls;
    System.Logger logger = System.getLogger("io.github.axesched.executor");

    /** The executor application name tasks reference. Required. */
    public Config app(String app) {
        this.app = app;
        return this;
    }

    /** Scheduler base URLs (http://host:port or https://…, no path), tried in order with failover. Required. */
    public Config schedulers(List<String> urls) {
        schedulers.clear();
        schedulers.addAll(urls);
        return this;
    }

    /** Scheduler base URLs (see {@link #schedulers(List)}). */
    public Config schedulers(String... urls) {
        return schedulers(List.of(urls));
    }

    /** The host:port to listen on. Defaults to {@link #LISTEN_DEFAULT}. */
    public Config listen(String hostPort) {
        this.listen = hostPort;
        return this;
    }

    /**
     * The host:port the scheduler dials, registered as this executor's address. Defaults to the
     * listen address (with the port actually bound).
     */
    public Config advertise(String hostPort) {
        this.advertise = hostPort;
        return this;
    }

    /**
     * The executor token: presented to the scheduler as a bearer token, and the key its signed
     * calls are checked with. Without one, no call is checked (loopback only). Defaults to none.
     */
    public Config token(String token) {
        this.token = token;
        return this;
    }

    /** Heartbeat period; the scheduler's answer may shorten it. Defaults to {@link #HEARTBEAT_INTERVAL_DEFAULT}. */
    public Config heartbeatInterval(Duration d) {
        this.heartbeatInterval = d;
        return this;
    }

    /** Handler threads. Defaults to {@link #POOL_SIZE_PER_CPU_DEFAULT} × available processors. */
    public Config poolSize(int n) {
        this.poolSize = n;
        return this;
    }

    /** Accepted runs waiting for a thread beyond which /axe/run answers 429. Defaults to {@link #QUEUE_SIZE_DEFAULT}. */
    public Config queueSize(int n) {
        this.queueSize = n;
        return this;
    }

    /** How long a finished ticket is remembered when the run says nothing. Defaults to {@link #DEDUP_TTL_DEFAULT}. */
    public Config dedupTtl(Duration d) {
        this.dedupTtl = d;
        return this;
    }

    /** Where finished tickets are remembered. Defaults to a new {@link InMemoryDedupStore}. */
    public Config dedupStore(DedupStore store) {
        this.dedupStore = store;
        return this;
    }

    /** First re-send delay of a result. Defaults to {@link #RESEND_MIN_DEFAULT}. */
    public Config resendMin(Duration d) {
        this.resendMin = d;
        return this;
    }

    /** Cap of the re-send delay. Defaults to {@link #RESEND_MAX_DEFAULT}. */
    public Config resendMax(Duration d) {
        this.resendMax = d;
        return this;
    }

    /** Bound of one HTTP call to one scheduler. Defaults to {@link #REQUEST_TIMEOUT_DEFAULT}. */
    public Config requestTimeout(Duration d) {
        this.requestTimeout = d;
        return this;
    }

    /** Result calls in flight at once. Defaults to {@link #RESULT_SENDERS_DEFAULT}. */
    public Config resultSenders(int n) {
        this.resultSenders = n;
        return this;
    }

    /** Largest output sent, in UTF-8 bytes (the tail is kept); at most {@link #OUTPUT_LIMIT_MAX}. Defaults to {@link #OUTPUT_LIMIT_DEFAULT}. */
    public Config outputLimit(int bytes) {
        this.outputLimit = bytes;
        return this;
    }

    /**
     * Serve /axe/* over HTTPS with this context (see {@link Tls}); the registration then says
     * "https". requireClientCert makes every connection present a certificate the context's
     * trust managers accept (mTLS). Defaults to plain HTTP.
     */
    public Config serverTls(SSLContext ctx, boolean requireClientCert) {
        this.serverTls = ctx;
        this.requireClientCert = requireClientCert;
        return this;
    }

    /** The context calls to https:// schedulers use (e.g. trusting a private CA). Defaults to the JDK's. */
    public Config schedulerTls(SSLContext ctx) {
        this.schedulerTls = ctx;
        return this;
    }

    /** Where the executor logs. Defaults to System.getLogger("io.github.axesched.executor"). */
    public Config logger(System.Logger logger) {
        this.logger = logger;
        return this;
    }

    /** Fills defaults and checks; the message names the bad field. */
    void validate() throws ExecutorException {
        if (poolSize == 0) {
            poolSize = POOL_SIZE_PER_CPU_DEFAULT * Runtime.getRuntime().availableProcessors();
        }
        if (dedupStore == null) {
            dedupStore = new InMemoryDedupStore();
        }
        String bad = null;
        if (app == null || app.isEmpty()) {
            bad = "app: required";
        } else if (schedulers.isEmpty()) {
            bad = "schedulers: at least one required";
        } else if (poolSize < 0) {
            bad = "poolSize: must be positive";
        } else if (queueSize < 0) {
            bad = "queueSize: must not be negative";
        } else if (resultSenders <= 0) {
            bad = "resultSenders: must be positive";
        } else if (outputLimit <= 0 || outputLimit > OUTPUT_LIMIT_MAX) {
            bad = "outputLimit: must be between 1 and " + OUTPUT_LIMIT_MAX;
        } else if (heartbeatInterval.isNegative() || heartbeatInterval.isZero()) {
            bad = "heartbeatInterval: must be positive";
        } else if (resendMin.isNegative() || resendMin.isZero() || resendMax.compareTo(resendMin) < 0) {
            bad = "resendMin/resendMax: must be positive, min ≤ max";
        }
        for (String s : schedulers) {
            if (bad == null && !(s.startsWith("http://") || s.startsWith("https://"))) {
                bad = "schedulers: " + s + " is not an http:// or https:// URL";
            }
        }
        if (bad != null) {
            throw new ExecutorException(ExecutorException.Kind.INVALID_CONFIG, "invalid executor config: " + bad, null);
        }
    }
}
