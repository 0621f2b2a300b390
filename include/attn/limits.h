/* limits.h - every compile-time hard limit of attnd, each with its reason.
 *
 * Three kinds live here:
 *  - Request-shape limits (rank, input count, name length, JSON depth and
 *    values, header length) that decoders enforce whatever the configuration
 *    says.  They bound fixed-size arrays, recursion and memory per request,
 *    so they cannot be runtime knobs.
 *  - Ceilings of runtime settings: configuration key `max_body_bytes` may be
 *    set anywhere up to ATTN_MAX_BODY_BYTES, and so on.  src/config/config.c
 *    uses these as the `max` column of its key table, so raising a ceiling
 *    here raises what the configuration accepts.
 *  - Bounds on the model files read at start-up (src/model/): what a model
 *    description or a safetensors header may say before it is refused.
 *
 * Sizes of names and strings count bytes and exclude the terminating NUL.
 * Changing a value is a recompile; nothing reads these at run time.
 * Every value is an integer constant expression usable in array bounds; those
 * without a cast are usable in #if too.
 */
#ifndef ATTN_LIMITS_H
#define ATTN_LIMITS_H

#include <stddef.h> /* size_t, int64_t: the casts of a few values below */
#include <stdint.h>

/* ---- Request shape ------------------------------------------------------ */

/* Tensor rank.  Attention needs at most [batch, heads, seq, dim] plus masks
 * with two broadcast dimensions; 8 leaves room and keeps attn_tensor.shape a
 * small inline array (include/attn/tensor.h). */
#define ATTN_MAX_RANK 8

/* Input tensors in one request.  The largest model (mha with masks and
 * projection weights) takes about a dozen; 32 bounds the per-request input
 * array and the work of duplicate-name checks (quadratic in the count). */
#define ATTN_MAX_INPUTS 32

/* Requested outputs in one request: output, weights and a few extras; same
 * reasoning as ATTN_MAX_INPUTS. */
#define ATTN_MAX_OUTPUTS 32

/* Parameters in one request (causal, scale, num_heads, ...).  Bounds the
 * parameter array and the linear lookups done per parameter. */
#define ATTN_MAX_PARAMS 64

/* Tensor, model, parameter and output names.  Names are identifiers echoed in
 * responses and logs; 256 bytes is generous for that and keeps a hostile name
 * from bloating every error message and log line. */
#define ATTN_MAX_NAME_LEN 256

/* Client-supplied request id, echoed in the response and the access log. */
#define ATTN_MAX_ID_LEN 256

/* JSON nesting depth of a request body.  A tensor of rank ATTN_MAX_RANK
 * nested as arrays inside inputs[] inside the body is about 12 deep; 64 is
 * ample, and the limit stops stack exhaustion from "[[[[..." bodies long
 * before cJSON's own CJSON_NESTING_LIMIT (1000). */
#define ATTN_MAX_JSON_DEPTH 64

/* Most values (nodes) one JSON body may hold.  A node is a 64-byte cJSON
 * struct, so 2^24 of them is ~1 GiB of memory for one request; tensors that
 * large must travel with the binary data extension (4 bytes per FP32
 * instead of ~75 with their JSON text and node). */
#define ATTN_JSON_MAX_NODES ((size_t)1 << 24)

/* A body of Triton's model repository extension (POST /v2/repository/index,
 * .../models/{m}/load, .../unload): {"ready": true} or {"parameters":
 * {...}}, a few dozen bytes.  A longer one is refused (a 413: from its
 * Content-Length before a byte is read, http.c and routes.c; else
 * ATTN_ETOOBIG before it is parsed), and its JSON is held to a depth and a
 * count of values far below an inference body's: what a body may make the
 * parser allocate is then bounded by a few hundred KiB (cJSON, without a bound,
 * took 2 GB for a 48 MiB body: issue 39).  The depth and the values leave
 * room for the unknown keys a client may send, which are refused by name. */
#define ATTN_MAX_REPO_BODY_BYTES ((size_t)64 * 1024)
#define ATTN_MAX_REPO_JSON_DEPTH 8
#define ATTN_MAX_REPO_JSON_NODES 256

/* One HTTP request header line, name plus value.  8 KiB is what common
 * proxies (nginx large_client_header_buffers, Apache LimitRequestFieldSize)
 * accept, so anything longer would not have reached us through them anyway. */
#define ATTN_MAX_HEADER_LEN 8192

/* Request target (path and query).  Routes are short
 * (/v2/models/NAME/versions/V/infer); 2 KiB covers the longest with
 * ATTN_MAX_NAME_LEN names and rejects junk early. */
#define ATTN_MAX_URL_LEN 2048

/* ---- Ceilings of configuration keys ------------------------------------- */

/* `host`: a DNS name is at most 253 bytes; 255 fits that and any textual
 * IPv6 address with a zone id.  attn_config.host is this plus one. */
#define ATTN_MAX_HOST_LEN 255

/* `models_dir` and the --config path.  Not PATH_MAX (4096): the struct holds
 * the string inline and 1023 bytes is plenty for a deployment path. */
#define ATTN_MAX_PATH_LEN 1023

/* `workers`: one thread each, each holding its request's tensors; beyond 256
 * the memory held in flight outgrows any machine this runs on. */
#define ATTN_MAX_WORKERS 256

/* `blas_threads_per_worker`: OpenBLAS builds commonly cap at 64 threads
 * (NUM_THREADS); asking for more is silently ignored by it. */
#define ATTN_MAX_BLAS_THREADS 64

/* libmicrohttpd I/O threads: they only parse, route and copy bytes, so a
 * few per core is already more than enough. */
#define ATTN_MAX_HTTP_THREADS 64

/* `queue_capacity`: the queue preallocates one slot pointer per entry; a
 * million slots is 8 MB, and a longer queue only delays the 503 a client
 * should get. */
#define ATTN_MAX_QUEUE_CAPACITY 1000000

/* `queue_timeout_ms` and `drain_timeout_ms`: one hour.  Longer waits outlast
 * every client and orchestrator timeout (Kubernetes terminationGracePeriod
 * is typically 30 s), so they are configuration mistakes. */
#define ATTN_MAX_TIMEOUT_MS 3600000

/* `max_body_bytes`: 8 GiB.  The body is buffered in memory before decoding,
 * and size_t arithmetic on it must not come near overflow on 64-bit hosts. */
#define ATTN_MAX_BODY_BYTES (8LL * 1024 * 1024 * 1024)

/* `max_inflate_ratio`: 1032, deflate's own largest ratio (a 258-byte
 * match in about two bits): no gzip or deflate body inflates further, so
 * 1032 is as good as no limit. */
#define ATTN_MAX_INFLATE_RATIO 1032

/* What a gzip or deflate body may always inflate to, whatever its ratio
 * (max_body_bytes permitting): a few bytes of zeros are cheap to inflate,
 * and a small body compresses past any ratio once its headers are paid. */
#define ATTN_INFLATE_FLOOR_BYTES ((size_t)1 << 20)

/* `max_total_body_bytes`: 1 TiB.  A budget for all bodies held at once, so
 * above any machine attnd runs on, yet far from size_t overflow when
 * bodies are added to it. */
#define ATTN_MAX_TOTAL_BODY_BYTES (1LL << 40)

/* `max_seq_len`: 2^20 tokens.  Dense attention scores are seq x seq floats
 * per head; at 2^20 one row block is already 4 MiB, and beyond that an exact
 * (non-flash) kernel is not the right tool. */
#define ATTN_MAX_SEQ_LEN 1048576
/* kv_cache_bytes, max_sessions, session_idle_timeout_s at most (a
 * configuration beyond is refused at start-up). */
#define ATTN_MAX_KV_CACHE_BYTES (1LL << 42)
#define ATTN_MAX_SESSIONS 10000000
#define ATTN_MAX_SESSION_IDLE_TIMEOUT_S (366LL * 24 * 3600)

/* `max_tensor_elements` and `max_weights_elements`: 2^40 elements (4 TiB of
 * fp32).  Keeps element counts far inside int64 so byte sizes (times 8 for
 * FP64 input) cannot overflow. */
#define ATTN_MAX_ELEMENTS (1LL << 40)

/* `max_connections`: 65536, the number of ports a single client address can
 * use and well above a default RLIMIT_NOFILE. */
#define ATTN_MAX_CONNECTIONS 65536

/* Connections metrics_port keeps open at once (when max_connections is
 * not lower): its clients are a few scrapers and the kubelet's probes,
 * each with a connection or two.  At the limit, as on port, the one that
 * waited longest without a complete request is closed to make room
 * (src/server/peers.c), so idle and slow-header clients cannot keep a
 * probe or a scrape out. */
#define ATTN_METRICS_PORT_CONNECTIONS 64

/* `connection_timeout_s`: one day; an idle connection held longer is a leak,
 * not a keep-alive. */
#define ATTN_MAX_CONNECTION_TIMEOUT_S 86400

/* `attnd --healthcheck`: the whole probe (resolving, connecting, sending,
 * reading the answer) must end within this, or it fails.  A running attnd
 * answers health in milliseconds even under load (health never waits
 * behind the queue), so 3 s without an answer means stuck or gone.  An
 * exec probe's own timeout (Kubernetes timeoutSeconds, default 1; Docker
 * HEALTHCHECK --timeout, default 30 s) should be longer, so that the probe
 * reports its reason instead of being killed. */
#define ATTN_HEALTHCHECK_TIMEOUT_MS 3000

/* `attnd --reload`: the longest it waits for the running attnd to confirm
 * the reload.  A reload reads the key files and every model file again;
 * with large weights that is seconds (the read speed of the disk), so a
 * minute; the wait ends at once when that attnd exits. */
#define ATTN_RELOAD_TIMEOUT_MS 60000

/* models_poll_s: at most a day between two looks at models_dir. */
#define ATTN_MAX_MODELS_POLL_S 86400

/* Draining (attn_server_wait_idle): once nothing is in flight, attnd
 * still answers (503, Connection: close) the requests that keep arriving on
 * open connections until none has begun for ATTN_DRAIN_QUIET_MS, for at
 * most ATTN_DRAIN_LINGER_MS: a request written just before the signal may
 * still be in its socket, and exiting at once would cut it (tests/load/
 * sigterm.py saw two in 3,761).  Bounded, so a client that keeps sending
 * cannot hold the exit. */
#define ATTN_DRAIN_QUIET_MS 50
#define ATTN_DRAIN_LINGER_MS 1000

/* Size of a configuration file.  Every key fits in well under 4 KiB; 1 MiB
 * refuses a wrong path (a model file, /dev/zero) before reading it all. */
#define ATTN_MAX_CONFIG_FILE_BYTES (1024 * 1024)

/* ---- Model files -------------------------------------------------------- */

/* Upper bound on a resident model's parameter count (embed_dim etc. from a
 * json file are checked against it before anything is allocated): 2^30 fp32
 * values are 4 GiB, far above any attention layer this server is for. */
#define ATTN_MODEL_MAX_PARAMS ((size_t)1 << 30)

/* Longest "weights" path a model file may give (bytes).  Every message
 * about the weights names their file, and a diagnostic holds 256 bytes
 * (ATTN_DIAG_MAX): a longer path was cut before the message could say
 * which file or what was wrong (found by fuzz_model). */
#define ATTN_MODEL_MAX_WEIGHTS_PATH 160

/* Any single dimension of a resident model (embed_dim, num_heads, kdim, ...)
 * above this is a typo, not a model. */
#define ATTN_MODEL_MAX_DIM ((int64_t)1 << 24)

/* A model description file larger than this is refused unread. */
#define ATTN_MODEL_MAX_JSON_BYTES ((size_t)1 << 20)

/* Model names: 1..64 of [A-Za-z0-9_.-], not starting with '.' (they appear
 * in URL paths). */
#define ATTN_MODEL_MAX_NAME 64

/* Models a server holds: the two built-ins and up to 62 resident ones,
 * counting every name ever loaded (a name keeps its place, and its
 * metrics, after an unload).  Bounds the metrics' model labels. */
#define ATTN_MAX_MODELS 64

/* Safetensors header JSON larger than this is refused (the reference
 * implementation uses the same bound): a header is names and shapes, never
 * megabytes of text. */
#define ATTN_SAFETENSORS_MAX_HEADER ((size_t)100 << 20)

/* ---- Access: API keys, TLS, CORS, request ids ---------------------------- */

/* API keys (api_keys_file, ATTND_API_KEY): at most this many, each 1..this
 * many bytes of printable ASCII without spaces (a 256-bit key in base64 is
 * 44 bytes; 256 leaves room for any scheme of prefixes). */
#define ATTN_MAX_API_KEYS 1024
#define ATTN_MAX_API_KEY_LEN 256
/* api_keys_file larger than this is refused unread: 1024 keys of 256 bytes
 * with comments fit. */
#define ATTN_MAX_KEYS_FILE_BYTES ((size_t)1 << 20)

/* A PEM file (tls_cert_file, tls_key_file, tls_client_ca_file) larger than
 * this is refused unread: a certificate chain is a few KiB, a CA bundle
 * (Debian's ca-certificates.crt) about 200 KiB. */
#define ATTN_MAX_PEM_FILE_BYTES ((size_t)4 << 20)

/* `cors_allow_origins`: the list as text (attn_config holds it inline). */
#define ATTN_MAX_CORS_ORIGINS_LEN 2047

/* `access_log_exclude`: the list of path prefixes as text (inline too);
 * scanned for each request's access line, so kept short. */
#define ATTN_MAX_ACCESS_LOG_EXCLUDE_LEN 1023

/* An X-Request-Id taken from a request: at most this many bytes (longer,
 * or with a byte outside printable ASCII, and attnd makes its own). */
#define ATTN_MAX_REQUEST_ID_LEN 128

#endif /* ATTN_LIMITS_H */
