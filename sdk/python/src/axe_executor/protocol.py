"""The executor protocol, version 2 (docs/protocol.md): paths, limits, the signature of the
scheduler's calls and the tolerant decoding of its messages.

Decoding is tolerant of what a newer scheduler may add and strict about everything else: an
object member this SDK does not know is ignored, while a body that is not exactly one JSON
object, a repeated key in any object, invalid UTF-8, a lone surrogate escape, NaN or
Infinity, a known field of the wrong type, a missing required field or a field out of range
is refused with an InvalidMessage naming the field.
"""

import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .errors import InvalidMessage

VERSION = 2

PATH_REGISTER = "/api/v1/executors/register"
PATH_HEARTBEAT = "/api/v1/executors/heartbeat"
PATH_DEREGISTER = "/api/v1/executors/deregister"
PATH_CALLBACK = "/api/v1/callback"
PATH_CALLBACK_BATCH = "/api/v1/callback/batch"

PATH_RUN = "/axe/run"
PATH_RUNS = "/axe/runs"
PATH_KILL = "/axe/kill"
PATH_BEAT = "/axe/beat"

HEADER_TASK = "X-Axe-Task"
HEADER_TICKET = "X-Axe-Ticket"
HEADER_ATTEMPT = "X-Axe-Attempt"
HEADER_EPOCH = "X-Axe-Epoch"
HEADER_INCARNATION = "X-Axe-Incarnation"

STATUS_SUCCESS = "success"
STATUS_FAILED = "failed"

MAX_NAME_BYTES = 256
MAX_OUTPUT_BYTES = 1 << 20
MAX_ERROR_BYTES = 64 << 10
MAX_RUNS_PER_CALL = 1000
MAX_DEDUP_TTL_MS = 30 * 24 * 3600 * 1000
SHARD_COUNT = 256

# Request body limits of the executor's endpoints; a request without a plausible signature
# (when a token is set) may carry at most MAX_SMALL_BODY.
MAX_RUN_BODY = 1 << 20
MAX_RUNS_BODY = 4 << 20
MAX_SMALL_BODY = 4 << 10

SIGNATURE_SCHEME = "AXE-HMAC-SHA256"
SIGNATURE_SKEW_MS = 5 * 60 * 1000
BAD_SIGNATURE = "missing or invalid scheduler signature"
AUTH_SIGNED = "signed"

_KEY_LABEL = b"axe dispatch key v1"
_SIG_HEADER = re.compile(r"\AAXE-HMAC-SHA256 t=(0|[1-9][0-9]{0,18}),sig=([0-9a-f]{64})\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INCARNATION = re.compile(r"\A[A-Za-z0-9_-]{16,64}\Z")


def dispatch_key(token: str) -> bytes:
    """The key the scheduler signs its calls to an executor with: the raw 32-byte
    HMAC-SHA256 of the label "axe dispatch key v1" under the UTF-8 bytes of the token."""
    return hmac.new(token.encode("utf-8"), _KEY_LABEL, hashlib.sha256).digest()


def _message(at_ms: int, address: str, path: str, epoch: str, incarnation: Optional[str]) -> bytes:
    if incarnation is None:
        head = "axe-dispatch-v1\n%d\n%s\n%s\n%s\n" % (at_ms, address, path, epoch)
    else:
        head = "axe-dispatch-v2\n%d\n%s\n%s\n%s\n%s\n" % (at_ms, address, path, epoch, incarnation)
    return head.encode("utf-8")


def signature(key: bytes, at_ms: int, address: str, path: str, epoch: str, body: bytes,
              incarnation: Optional[str] = None) -> str:
    """Lower-case hex HMAC-SHA256 of one call: the v2 message when incarnation is given, the
    v1 message otherwise."""
    m = hmac.new(key, _message(at_ms, address, path, epoch, incarnation), hashlib.sha256)
    m.update(body)
    return m.hexdigest()


def sign_call(key: bytes, at_ms: int, address: str, path: str, epoch: str, body: bytes,
              incarnation: Optional[str] = None) -> str:
    """The Authorization header of a call signed at at_ms (what the scheduler sends)."""
    return "%s t=%d,sig=%s" % (SIGNATURE_SCHEME, at_ms,
                               signature(key, at_ms, address, path, epoch, body, incarnation))


def parse_signature(header: Optional[str]) -> Optional[Tuple[int, str]]:
    """(t, hex signature) of a well-formed Authorization header, else None. Only the
    canonical form is accepted, so one call has exactly one valid header."""
    if not header:
        return None
    m = _SIG_HEADER.match(header)
    if m is None:
        return None
    return int(m.group(1)), m.group(2)


def now_ms() -> int:
    return int(time.time() * 1000)


def plausible(header: Optional[str], now: Optional[int] = None) -> bool:
    """Whether a header is a well-formed signature of a time within the skew: what can be
    judged before the body is read."""
    p = parse_signature(header)
    if p is None:
        return False
    now = now_ms() if now is None else now
    return abs(now - p[0]) <= SIGNATURE_SKEW_MS


def verify_call(key: bytes, header: Optional[str], address: str, path: str, epoch: str,
                body: bytes, incarnation: Optional[str] = None,
                now: Optional[int] = None) -> Optional[str]:
    """None when the call verifies, else the reason (starting with BAD_SIGNATURE)."""
    p = parse_signature(header)
    if p is None:
        return BAD_SIGNATURE
    at, sig = p
    now = now_ms() if now is None else now
    if abs(now - at) > SIGNATURE_SKEW_MS:
        return BAD_SIGNATURE + ": the call was signed more than 5m0s away from this executor's clock: check both clocks"
    want = signature(key, at, address, path, epoch, body, incarnation)
    if not hmac.compare_digest(sig, want):
        return BAD_SIGNATURE
    return None


def valid_incarnation(s: str) -> bool:
    return bool(_INCARNATION.match(s))


# ---------------------------------------------------------------------------------------
# Decoding


def _no_repeats(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InvalidMessage("repeated key: %s" % json.dumps(k, ensure_ascii=False))
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise InvalidMessage("%s is not JSON" % name)


def _check_surrogates(v: Any, where: str = "") -> None:
    """Refuse a lone surrogate anywhere in a decoded value (they can only arrive as \\u
    escapes, since the text itself was valid UTF-8)."""
    stack = [(v, where)]
    while stack:
        x, w = stack.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidMessage("%sinvalid UTF-8 or a lone surrogate escape" % (w + ": " if w else ""))
        elif isinstance(x, dict):
            for k, y in x.items():
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    raise InvalidMessage("%sinvalid UTF-8 or a lone surrogate escape in a key" % (w + ": " if w else ""))
                stack.append((y, w or k))
        elif isinstance(x, list):
            for y in x:
                stack.append((y, w))


def decode_object(body: bytes) -> Dict[str, Any]:
    """Decode exactly one JSON object: valid UTF-8, no repeated key in any object, nothing
    after it, no lone surrogate escape, no NaN/Infinity."""
    bad_bytes = False
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        # Invalid bytes become lone surrogates (U+DC80..U+DCFF) that the check below finds,
        # so that the error names the field holding them.
        text = body.decode("utf-8", "surrogateescape")
        bad_bytes = True
    try:
        v = json.loads(text, object_pairs_hook=_no_repeats, parse_constant=_no_constant)
    except InvalidMessage:
        raise
    except RecursionError:
        raise InvalidMessage("malformed message: nested too deeply")
    except ValueError as e:
        if bad_bytes:
            raise InvalidMessage("malformed message: invalid UTF-8")
        raise InvalidMessage("malformed message: %s" % e)
    if not isinstance(v, dict):
        raise InvalidMessage("malformed message: not a JSON object")
    if bad_bytes or "\\u" in text or "\\U" in text:
        _check_surrogates(v)
    if bad_bytes:
        raise InvalidMessage("malformed message: invalid UTF-8")
    return v


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _get_str(obj: Dict[str, Any], name: str, required: bool = False, max_bytes: int = MAX_NAME_BYTES,
             nonempty: bool = False) -> str:
    if obj.get(name) is None:  # absent, or null as Go reads it: the zero value
        if required:
            raise InvalidMessage("%s: required" % name)
        return ""
    v = obj[name]
    if not isinstance(v, str):
        raise InvalidMessage("%s: must be a string" % name)
    if nonempty and v == "":
        raise InvalidMessage("%s: required" % name)
    if len(v.encode("utf-8")) > max_bytes:
        raise InvalidMessage("%s: longer than %d bytes" % (name, max_bytes))
    return v


def _get_int(obj: Dict[str, Any], name: str, required: bool = False, lo: int = 0,
             hi: int = (1 << 63) - 1) -> int:
    if obj.get(name) is None:
        if required:
            raise InvalidMessage("%s: required" % name)
        return 0
    v = obj[name]
    if not _is_int(v):
        raise InvalidMessage("%s: must be an integer" % name)
    if v < lo or v > hi:
        if hi == (1 << 63) - 1:
            raise InvalidMessage("%s: must be at least %d" % (name, lo))
        raise InvalidMessage("%s: must be between %d and %d, got %d" % (name, lo, hi, v))
    return v


def _get_shard(obj: Dict[str, Any]) -> Optional[int]:
    if "shard" not in obj or obj["shard"] is None:
        return None
    return _get_int(obj, "shard", lo=0, hi=SHARD_COUNT - 1)


@dataclass
class RunMessage:
    """One run as the scheduler sends it (the body of /axe/run, an element of /axe/runs)."""
    ticket: str
    task: str
    attempt: int
    deadline: int
    handler: str = ""
    group: str = ""
    kind: str = ""
    scheduled_at: int = 0
    params: Any = None
    dedup_ttl_ms: int = 0
    epoch: int = 0
    shard: Optional[int] = None
    parallel: bool = False


def check_run(obj: Any) -> RunMessage:
    """Check a decoded run; unknown members are ignored. Raises InvalidMessage naming the
    field."""
    if not isinstance(obj, dict):
        raise InvalidMessage("run: must be a JSON object")
    parallel = obj.get("parallel", False)
    if parallel is None:
        parallel = False
    if not isinstance(parallel, bool):
        raise InvalidMessage("parallel: must be a boolean")
    return RunMessage(
        ticket=_get_str(obj, "ticket", required=True, nonempty=True),
        task=_get_str(obj, "task", required=True, nonempty=True),
        attempt=_get_int(obj, "attempt", required=True, lo=1),
        deadline=_get_int(obj, "deadline", required=True),
        handler=_get_str(obj, "handler"),
        group=_get_str(obj, "group"),
        kind=_get_str(obj, "kind"),
        scheduled_at=_get_int(obj, "scheduled_at"),
        params=obj.get("params"),
        # Beyond 30 days is held to 30 days: how long to remember is the receiver's policy.
        dedup_ttl_ms=min(_get_int(obj, "dedup_ttl_ms"), MAX_DEDUP_TTL_MS),
        epoch=_get_int(obj, "epoch"),
        shard=_get_shard(obj),
        parallel=parallel,
    )


def decode_run(body: bytes) -> RunMessage:
    return check_run(decode_object(body))


@dataclass
class RunsMessage:
    """The body of /axe/runs: each element is a RunMessage or the InvalidMessage that
    refuses it alone."""
    runs: List[Any] = field(default_factory=list)


def decode_runs(body: bytes) -> List[Any]:
    """Decode /axe/runs: the whole body must be one object with 1..MAX_RUNS_PER_CALL runs;
    each run is checked alone, so a malformed run refuses only itself."""
    obj = decode_object(body)
    runs = obj.get("runs")
    if "runs" not in obj:
        raise InvalidMessage("runs: required")
    if not isinstance(runs, list):
        raise InvalidMessage("runs: must be an array")
    if not runs:
        raise InvalidMessage("runs: one or more required")
    if len(runs) > MAX_RUNS_PER_CALL:
        raise InvalidMessage("runs: at most %d per call, got %d" % (MAX_RUNS_PER_CALL, len(runs)))
    out: List[Any] = []
    for r in runs:
        try:
            out.append(check_run(r))
        except InvalidMessage as e:
            out.append(e)
    return out


@dataclass
class KillMessage:
    ticket: str
    epoch: int = 0
    shard: Optional[int] = None


def decode_kill(body: bytes) -> KillMessage:
    obj = decode_object(body)
    return KillMessage(ticket=_get_str(obj, "ticket", required=True, nonempty=True),
                       epoch=_get_int(obj, "epoch"), shard=_get_shard(obj))


def header_epoch(raw: Optional[str], body_epoch: int) -> int:
    """The epoch of a call: the body's, else the X-Axe-Epoch header's, else 0. A malformed
    header, or one contradicting the body, raises InvalidMessage."""
    if raw is None or raw == "":
        return body_epoch
    if not re.fullmatch(r"[0-9]{1,19}", raw) or int(raw) > (1 << 63) - 1:
        raise InvalidMessage("header %s must be a non-negative integer, got %s" % (HEADER_EPOCH, json.dumps(raw)))
    epoch = int(raw)
    if body_epoch != 0 and body_epoch != epoch:
        raise InvalidMessage("header %s is %s but the body says %d" % (HEADER_EPOCH, json.dumps(raw), body_epoch))
    return epoch


def valid_text(s: str) -> str:
    """s with every lone surrogate replaced by U+FFFD, so that it encodes as UTF-8."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", s)


def clip_error(s: str, limit: int = MAX_ERROR_BYTES) -> str:
    """The first limit bytes of s (made valid text), cut at a character boundary."""
    s = valid_text(s)
    b = s.encode("utf-8")
    if len(b) <= limit:
        return s
    return b[:limit].decode("utf-8", "ignore")


def tail(s: str, limit: int) -> str:
    """The last limit bytes of s (made valid text), starting at a character boundary."""
    s = valid_text(s)
    b = s.encode("utf-8")
    if len(b) <= limit:
        return s
    return b[len(b) - limit:].decode("utf-8", "ignore")


def dumps(v: Any) -> bytes:
    """Compact JSON, UTF-8."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
