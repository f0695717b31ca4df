"""The prompt pool from Python: the same Redis keys and the same Lua scripts (scripts.py, generated
from src/data/prompts/scripts.ts) as the TypeScript PromptPool, so that a Python job and a
TypeScript one share one pool: either loads, either claims, a completion counts exactly once
whichever language sends it.

    import redis
    from laminar.data.prompts import PromptPool

    pool = PromptPool.open(redis.Redis.from_url("redis://127.0.0.1:6379"), epochs=1, default_group_size=8)
    pool.load_jsonl("train.jsonl")
    for claim in pool.claim("rollout-0", count=4):
        ...                                   # generate claim.n samples (or claim.samples)
        pool.complete(claim)

Semantics (leases, epochs, returned samples) are those of the TypeScript class; see
docs/components/data.md. Every Redis failure is a StoreError (ERR_STORE) with the cause chained.

On Sentinel or Cluster (`connect(address)`, redis_address.py), `replicas=k` makes every write wait
until k replicas acknowledged it (WAIT, in the same pipeline); fewer is a StoreError with code
ERR_NOT_REPLICATED, and a claim's prompts are given back at once (docs/components/data.md,
"Failover: Sentinel and Cluster").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Literal, Optional, Sequence, Tuple, TypeVar, Union

from redis.cluster import RedisCluster
from redis.exceptions import RedisError

from ... import error_codes
from ..errors import DataInputError, StoreError
from ..ids import check_name
from . import scripts as S
from .errors import DataNotFoundError, OwnershipError
from .prompt import group_id_of, parse_group_id, validate_prompt
from .redis_address import Replication, replication_of

LOAD_BATCH = 500
"""Prompts per LOAD script call (as in TypeScript)."""

_REASON = re.compile(r"[a-z][a-z0-9_]{0,31}")
# The longest return key return_samples accepts, as in TypeScript.
_MAX_RETURN_KEY = 512
_RETURNED_TOKEN = re.compile(r"(\d+):\d+")
_T = TypeVar("_T")

CompleteResult = Literal["ok", "duplicate"]


@dataclass(frozen=True)
class PromptClaim:
    """A claimed prompt. `token` identifies the claim (complete, give back and extend need it);
    `group_id` is what the trajectories of its samples carry."""

    id: str
    payload: Any
    n: int
    token: str
    epoch: int
    group_id: str
    deadline: int
    """Lease deadline, epoch ms (the Redis server's clock)."""
    samples: Optional[List[int]] = None
    """Set on a returned claim: the sample indices to generate (a fresh claim generates 0..n-1)."""
    returned: bool = False


@dataclass
class Rejection:
    line: int
    code: str
    message: str


@dataclass
class LoadReport:
    loaded: int = 0
    duplicates: int = 0
    rejected: List[Rejection] = field(default_factory=list)


@dataclass(frozen=True)
class PoolProgress:
    """Where the pool stands; the fields of the TypeScript `PoolProgress`, in snake_case."""

    epoch: int
    epochs: int
    total: int
    pending: int
    leased: int
    done_this_epoch: int
    claims: int
    completions: int
    expired: int
    returned: int
    duplicates: int
    returned_pending: int
    returned_leased: int
    returned_entries: int
    returned_samples: int
    returned_claims: int
    returned_completions: int
    returned_samples_completed: int
    returned_expired: int
    returned_given_back: int
    returned_duplicates: int
    finished: bool


class _NotReplicated(Exception):
    """Inside the pool: a write the replicas missed, with its answer (claim() gives its claims back)."""

    def __init__(self, value: Any, error: StoreError) -> None:
        super().__init__(error.message)
        self.value = value
        self.error = error


def _is_returned(claim: PromptClaim) -> bool:
    """A returned claim: flagged, or known by its token `<entry>:<seq>` (a fresh token is a number)."""
    return claim.returned or _RETURNED_TOKEN.fullmatch(claim.token) is not None


def _text(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


class PromptPool:
    """A prompt pool in Redis, shared with TypeScript rollouts and managers. Thread-safe as far as
    the redis-py client is (a `redis.Redis` is)."""

    def __init__(
        self,
        redis: Any,
        name: str = "default",
        *,
        default_group_size: int = 1,
        lease_ms: float = 600_000,
        replicas: Optional[int] = None,
        replica_timeout_ms: Optional[int] = None,
    ) -> None:
        """A handle on the pool, creating nothing (see `open`). `replicas`: replicas that must
        acknowledge each write (default: what the address of `connect` asked, else 0)."""
        self.name = check_name("prompt pool", name)
        if not isinstance(default_group_size, int) or isinstance(default_group_size, bool) or default_group_size < 1:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, "default_group_size must be an integer >= 1")
        if not lease_ms > 0:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, "lease_ms must be > 0")
        asked = replication_of(redis) or Replication()
        self._replication = Replication(
            asked.replicas if replicas is None else replicas,
            asked.timeout_ms if replica_timeout_ms is None else replica_timeout_ms,
        )
        if not isinstance(self._replication.replicas, int) or self._replication.replicas < 0:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, "replicas must be an integer >= 0")
        if not self._replication.timeout_ms > 0:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, "replica_timeout_ms must be > 0")
        self._redis = redis
        self._default_n = default_group_size
        self._lease_ms = lease_ms
        self._keys = [f"laminar:pp:{{{self.name}}}:{k}" for k in S.KEY_NAMES]
        self._scripts: Dict[str, Any] = {}

    @classmethod
    def open(
        cls,
        redis: Any,
        name: str = "default",
        *,
        epochs: int = 1,
        default_group_size: int = 1,
        lease_ms: float = 600_000,
        replicas: Optional[int] = None,
        replica_timeout_ms: Optional[int] = None,
    ) -> "PromptPool":
        """Opens the pool, creating it when new: `epochs` (passes over the dataset, 0 = unbounded) is
        recorded at the first open only, by whichever language opens it first."""
        pool = cls(redis, name, default_group_size=default_group_size, lease_ms=lease_ms, replicas=replicas, replica_timeout_ms=replica_timeout_ms)
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, "epochs must be an integer >= 0 (0 = unbounded)")
        pool._write(lambda c: c.hsetnx(pool._key("state"), "maxEpochs", epochs), pool._replication)
        return pool

    # -- loading -------------------------------------------------------------------------------

    def load_jsonl(self, path: str) -> LoadReport:
        """Loads a JSONL file (``{"id", "payload", "n"?}`` per line); broken lines are reported
        with their number and the good ones load. Ids already in the pool count as duplicates."""

        def lines() -> Iterable[Tuple[int, Any, Optional[str]]]:
            with open(path, encoding="utf-8") as f:
                for number, text in enumerate(f, start=1):
                    if text.strip() == "":
                        continue
                    try:
                        yield number, json.loads(text), None
                    except ValueError as err:
                        yield number, None, f"not JSON: {err}"

        return self._load(lines(), "line")

    def load(self, prompts: Iterable[Any]) -> LoadReport:
        """Loads prompts from an iterable; a rejected one is reported by its index (1-based)."""
        return self._load(((i, p, None) for i, p in enumerate(prompts, start=1)), "line")

    def _load(self, items: Iterable[Tuple[int, Any, Optional[str]]], unit: str) -> LoadReport:
        report = LoadReport()
        batch: List[Tuple[int, str, str]] = []

        def flush() -> None:
            if not batch:
                return
            argv: List[str] = []
            for _, id, stored in batch:
                argv += [id, stored]
            added = self._script(S.LOAD, *argv)
            for (line, id, _), a in zip(batch, added):
                if int(a) == 1:
                    report.loaded += 1
                else:
                    report.duplicates += 1
                    shown = json.dumps(id, ensure_ascii=False)
                    report.rejected.append(Rejection(line, error_codes.DUPLICATE_PROMPT, f"{unit} {line}: prompt id {shown} is already in the pool"))
            batch.clear()

        for line, value, error in items:
            if error is not None:
                report.rejected.append(Rejection(line, error_codes.BAD_PROMPT, f"{unit} {line}: {error}"))
                continue
            try:
                id, _, _, stored = validate_prompt(value, self._default_n)
            except DataInputError as err:
                report.rejected.append(Rejection(line, error_codes.BAD_PROMPT, f"{unit} {line}: {err.message}"))
                continue
            except ValueError as err:  # a payload json cannot hold (NaN)
                report.rejected.append(Rejection(line, error_codes.BAD_PROMPT, f"{unit} {line}: {err}"))
                continue
            batch.append((line, id, stored))
            if len(batch) >= LOAD_BATCH:
                flush()
        flush()
        return report

    # -- claims ----------------------------------------------------------------------------------

    def claim(self, rollout_id: str, count: int = 1, lease_ms: Optional[float] = None) -> List[PromptClaim]:
        """Claims up to `count` prompts under a lease: returned samples first, then fresh prompts.
        Empty when none are pending (or every epoch is done)."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, f"claim count must be an integer >= 1, got {count}")
        lease = -(-(self._lease_ms if lease_ms is None else lease_ms) // 1)  # Math.ceil
        try:
            res = self._script(S.CLAIM, int(lease), rollout_id, count)
        except _NotReplicated as err:
            self._give_back_unreplicated(err.value)
            raise err.error from None
        epoch, returned_claimed = int(res[0]), int(res[4])
        claims: List[PromptClaim] = []
        for i, item in enumerate(res[5:]):
            id, token, stored, deadline = _text(item[0]), _text(item[1]), json.loads(_text(item[2])), int(item[3])
            if i >= returned_claimed:
                claims.append(PromptClaim(id, stored["p"], int(stored["n"]), token, epoch, group_id_of(id, epoch), deadline))
            else:
                entry = json.loads(_text(item[4]))
                e = int(entry["e"])
                claims.append(PromptClaim(id, stored["p"], int(stored["n"]), token, e, group_id_of(id, e), deadline, list(entry["s"]), True))
        return claims

    def _give_back_unreplicated(self, res: Any) -> None:
        """A claim the replicas did not acknowledge is handed to no one (a failover could give the
        same prompts to another rollout): its claims go back to the front of their queues now."""
        for item in res[5:]:
            id, token = _text(item[0]), _text(item[1])
            returned = _RETURNED_TOKEN.fullmatch(token) is not None
            try:
                if returned:
                    self._run(S.GIVE_BACK_RETURNED, [token.split(":")[0], token], Replication(0))
                else:
                    self._run(S.GIVE_BACK, [id, token], Replication(0))
            except (StoreError, _NotReplicated):
                pass  # the lease returns it

    def complete(self, claim: PromptClaim) -> CompleteResult:
        """Marks a claim complete: "ok" once, "duplicate" for a retry. OwnershipError(ERR_LEASE_LOST)
        when the prompt was given back or claimed again by someone else; DataNotFoundError
        (ERR_UNKNOWN_CLAIM) for a claim that never was."""
        returned = _is_returned(claim)
        if returned:
            r = _text(self._script(S.COMPLETE_RETURNED, self._entry_of(claim), claim.token))
        else:
            r = _text(self._script(S.COMPLETE, claim.id, claim.token, claim.epoch))
        if r in ("ok", "duplicate"):
            return r  # type: ignore[return-value]
        what = "returned claim" if returned else "claim"
        if r == "unknown":
            raise DataNotFoundError(error_codes.UNKNOWN_CLAIM, f"no {what} of prompt {json.dumps(claim.id, ensure_ascii=False)} exists")
        raise OwnershipError(
            error_codes.LEASE_LOST,
            f"the {what} of prompt {json.dumps(claim.id, ensure_ascii=False)} was given back or taken by another rollout",
            {"id": claim.id},
        )

    def give_back(self, claim: PromptClaim) -> None:
        """Returns a claim to the front of its queue (the rollout will not finish it); its token can
        no longer complete."""
        returned = _is_returned(claim)
        if returned:
            r = _text(self._script(S.GIVE_BACK_RETURNED, self._entry_of(claim), claim.token))
        else:
            r = _text(self._script(S.GIVE_BACK, claim.id, claim.token))
        if r != "ok":
            what = "returned claim" if returned else "claim"
            raise OwnershipError(error_codes.LEASE_LOST, f"the {what} of prompt {json.dumps(claim.id, ensure_ascii=False)} is no longer held")

    def give_back_rollout(self, rollout_id: str) -> int:
        """Failover: returns every claim `rollout_id` holds, fresh and returned; how many."""
        n, rn = self._script(S.GIVE_BACK_ROLLOUT, rollout_id)
        return int(n) + int(rn)

    def extend(self, claim: PromptClaim, lease_ms: Optional[float] = None) -> int:
        """Extends a lease (a heartbeat for a long generation); the new deadline, epoch ms."""
        lease = int(-(-(self._lease_ms if lease_ms is None else lease_ms) // 1))
        returned = _is_returned(claim)
        if returned:
            d = int(self._script(S.EXTEND_RETURNED, self._entry_of(claim), claim.token, lease))
        else:
            d = int(self._script(S.EXTEND, claim.id, claim.token, lease))
        if d < 0:
            what = "returned prompt" if returned else "prompt"
            raise OwnershipError(error_codes.LEASE_LOST, f"the lease of {what} {json.dumps(claim.id, ensure_ascii=False)} is lost")
        return d

    def return_samples(self, group_id: str, samples: Sequence[int], reason: str = "failover", key: str = "") -> str:
        """Sends samples of an issued group back for regeneration (as the manager's failover does):
        served before fresh prompts as a claim with the same group id and `samples` set. "ok", or
        "duplicate" when `key` was used already (within a day): then nothing is queued, so a call
        that failed ambiguously (StoreError) can be retried with the same key. Without a key, each
        call appends one entry. DataInputError: ERR_UNKNOWN_GROUP, ERR_BAD_DATA_OPTIONS,
        ERR_GROUP_MISMATCH, as in TypeScript."""

        def bad(code: str, message: str) -> DataInputError:
            return DataInputError(code, message, {"groupId": group_id})

        g = parse_group_id(group_id) if isinstance(group_id, str) else None
        # Only the canonical form claim() issues: "q1#007" is not a group of this pool.
        if g is None or group_id_of(*g) != group_id:
            raise bad(error_codes.UNKNOWN_GROUP, f"malformed group id {json.dumps(group_id)} (expected <promptId>#<epoch>)")
        if not isinstance(reason, str) or _REASON.fullmatch(reason) is None:
            raise bad(error_codes.BAD_DATA_OPTIONS, f"reason must match /^[a-z][a-z0-9_]{{0,31}}$/, got {json.dumps(reason)}")
        if not isinstance(key, str) or len(key) > _MAX_RETURN_KEY:
            raise bad(error_codes.BAD_DATA_OPTIONS, f"key must be a string of at most {_MAX_RETURN_KEY} characters")
        if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence) or len(samples) == 0:
            raise bad(error_codes.BAD_DATA_OPTIONS, "samples must be a non-empty list of sample indices")
        for i in samples:
            if not isinstance(i, int) or isinstance(i, bool):
                raise bad(error_codes.BAD_DATA_OPTIONS, f"sample index {json.dumps(i)} is not an integer")
            if i < 0:
                raise bad(error_codes.GROUP_MISMATCH, f"sample index {i} is outside the group")
        ordered = sorted(samples)
        if len(set(ordered)) != len(ordered):
            raise bad(error_codes.BAD_DATA_OPTIONS, f"sample indices repeat: {json.dumps(list(samples))}")
        prompt_id, epoch = g
        entry = json.dumps({"id": prompt_id, "e": epoch, "s": ordered, "r": reason}, separators=(",", ":"), ensure_ascii=False)
        r, n = self._script(S.RETURN_SAMPLES, prompt_id, epoch, ordered[-1], len(ordered), entry, key)
        if _text(r) == "duplicate":
            return "duplicate"
        if _text(r) == "unknown":
            raise bad(error_codes.UNKNOWN_GROUP, f"unknown group id {json.dumps(group_id)}: not issued by prompt pool {self.name}")
        if _text(r) == "range":
            raise bad(error_codes.GROUP_MISMATCH, f"sample index {ordered[-1]} is outside the group of {int(n)}")
        return "ok"

    def group_size(self, group_id: str) -> Optional[int]:
        """n of a group this pool issued; None when there is no such group."""
        g = parse_group_id(group_id)
        if g is None:
            return None
        stored = self._call(lambda: self._redis.hget(self._key("prompts"), g[0]))
        epoch = self._call(lambda: self._redis.hget(self._key("state"), "epoch"))
        if stored is None or g[1] > int(epoch or 0):
            return None
        return int(json.loads(_text(stored))["n"])

    # -- state -----------------------------------------------------------------------------------

    def progress(self) -> PoolProgress:
        """The counters of the pool (one MULTI, a consistent snapshot)."""

        def read() -> List[Any]:
            p = self._redis.pipeline(transaction=True)
            p.hgetall(self._key("state"))
            p.llen(self._key("order"))
            p.llen(self._key("pending"))
            p.zcard(self._key("leases"))
            p.scard(self._key("done"))
            p.llen(self._key("returned"))
            p.zcard(self._key("returned:leases"))
            return p.execute()

        raw_state, total, pending, leased, done, returned_pending, returned_leased = self._call(read)
        state = {_text(k): int(_text(v)) for k, v in raw_state.items()}
        epochs = state.get("maxEpochs", 1)
        epoch = state.get("epoch", 0)
        return PoolProgress(
            epoch=epoch,
            epochs=epochs,
            total=total,
            pending=pending,
            leased=leased,
            done_this_epoch=done,
            claims=state.get("claims", 0),
            completions=state.get("completions", 0),
            expired=state.get("expired", 0),
            returned=state.get("returned", 0),
            duplicates=state.get("duplicates", 0),
            returned_pending=returned_pending,
            returned_leased=returned_leased,
            returned_entries=state.get("returnedEntries", 0),
            returned_samples=state.get("returnedSamples", 0),
            returned_claims=state.get("returnedClaims", 0),
            returned_completions=state.get("returnedCompletions", 0),
            returned_samples_completed=state.get("returnedSamplesCompleted", 0),
            returned_expired=state.get("returnedExpired", 0),
            returned_given_back=state.get("returnedGivenBack", 0),
            returned_duplicates=state.get("returnedDuplicates", 0),
            finished=total > 0
            and pending == 0
            and leased == 0
            and done >= total
            and epochs != 0
            and epoch + 1 >= epochs
            and returned_pending == 0
            and returned_leased == 0,
        )

    def destroy(self) -> None:
        """Removes every key of this pool."""
        self._write(lambda c: c.delete(*self._keys), self._replication)

    # -- Redis -----------------------------------------------------------------------------------

    def _key(self, name: str) -> str:
        return self._keys[S.KEY_NAMES.index(name)]

    def _entry_of(self, claim: PromptClaim) -> str:
        m = _RETURNED_TOKEN.fullmatch(claim.token)
        if m is None:
            raise DataNotFoundError(error_codes.UNKNOWN_CLAIM, f"{json.dumps(claim.token)} is not the token of a returned claim")
        return m.group(1)

    def _script(self, lua: str, *args: Union[str, int]) -> Any:
        """Runs one of the scripts, waiting for the pool's replicas; a shortfall raises the
        StoreError (ERR_NOT_REPLICATED), except in claim(), which gives its claims back first."""
        try:
            return self._run(lua, list(args), self._replication)
        except _NotReplicated as err:
            if lua is S.CLAIM:
                raise
            raise err.error from None

    def _run(self, lua: str, args: List[Union[str, int]], replication: Replication) -> Any:
        """redis-py's Script sends EVALSHA, and EVAL when Redis does not know the script yet (the
        same SHA-1 as the TypeScript side's, the text being the same)."""
        script = self._scripts.get(lua)
        if script is None:
            script = self._scripts[lua] = self._redis.register_script(lua)
        return self._write(lambda c: script(keys=self._keys, args=args, client=c), replication)

    def _write(self, command: Callable[[Any], Any], replication: Replication) -> Any:
        """One write, then WAIT for `replication.replicas` acknowledgements in the same pipeline:
        one connection (WAIT counts what its own connection wrote) and one round trip. On a
        cluster, the pipeline is the node's that holds the pool's slot (WAIT has no key)."""
        if replication.replicas == 0:
            return self._call(lambda: command(self._redis))

        def run() -> Tuple[Any, int]:
            target = self._redis
            if isinstance(target, RedisCluster):
                target = target.get_redis_connection(target.get_node_from_key(self._keys[0]))
            pipe = target.pipeline(transaction=False)
            command(pipe)
            pipe.execute_command("WAIT", replication.replicas, replication.timeout_ms)
            value, acks = pipe.execute()
            return value, int(acks)

        value, acks = self._call(run)
        if acks < replication.replicas:
            details = {"pool": self.name, "acknowledged": acks, "replicas": replication.replicas, "timeoutMs": replication.timeout_ms}
            message = (
                f"redis: the write reached the master, but {acks} of the {replication.replicas} replicas asked "
                f"acknowledged it within {replication.timeout_ms} ms"
            )
            raise _NotReplicated(value, StoreError(message, details, error_codes.NOT_REPLICATED))
        return value

    def _call(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        except RedisError as err:
            raise StoreError(f"redis: {err}", {"pool": self.name}) from err
